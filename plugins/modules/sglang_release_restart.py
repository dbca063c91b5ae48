#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_restart
short_description: Decide whether the SGLang service must restart (changed files, drift, crashes since the record)
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Reads the unit's state, where C(current) points and the checksums of the live and the last
    good files, and says whether the service must restart. It fails when the release has no launcher.
    It also compares the running process with the one the record verified - its release (from its resolved
    command line, executable, working directory and mapped files), environment and command line (RV(observed)).
    A difference is RV(drift), a reason to restart and verify. What cannot be read of the process (its
    C(environ), C(exe), C(cwd) or C(maps) where root lacks CAP_SYS_PTRACE) is listed in RV(observed) (C(unreadable),
    C(unreadable_reasons)), never taken as the same; drift is then decided on what can be read - the unit,
    environment and config files changed after the process started, systemd's C(ExecStart), C(Environment) and
    C(EnvironmentFiles) against the recorded ones, a start outside the deploy (another invocation, not by
    C(Restart=)), C(current) switched after the process started. And it reads what happened since the record -
    C(NRestarts), the exits in the unit's journal, the log lines of the last one (RV(restarts_since_record)).
options:
  restart_requested:
    description: A configuration change asked for a restart.
    type: bool
    default: false
  launcher:
    description: The program the unit runs from the new release; it must exist.
    type: path
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
"""

EXAMPLES = r"""
- name: Decide whether the service must restart
  specdec.sglang.sglang_release_restart:
    runtime_root: /opt/sglang
    release_id: 3f2a9c1b7d10
    unit: sglang.service
    files: {unit: /etc/systemd/system/sglang.service, env: /etc/sglang/sglang.env, config: /etc/sglang/sglang.yaml}
    launcher: /opt/sglang/releases/3f2a9c1b7d10/venv/bin/sglang
  register: restart
"""

RETURN = r"""
restart:
  description: Whether the service must restart.
  returned: success
  type: bool
reasons:
  description: Why it must restart (empty when not).
  returned: success
  type: list
  elements: str
drift:
  description: How the running process differs from the recorded one (empty when it does not).
  returned: success
  type: list
  elements: str
observed:
  description:
    - The running main process - C(invocation_id), C(main_pid), C(release),
      C(started_at) (epoch s), the sha256 of its environment (systemd's per-start variables left out), command line
      and systemd settings (C(unit_sha256)); C(unreadable) lists what could not be read (C(environ), C(exe),
      C(cwd), C(maps), C(cmdline), C(release)) and C(unreadable_reasons) why. Empty when no main process runs.
  returned: success
  type: dict
  sample: {"invocation_id": "5f0c...", "main_pid": 4242, "release": "0123456789ab", "started_at": 1764900000.5,
           "unreadable": ["cwd", "environ", "exe", "maps"], "unreadable_reasons": {"environ": "Permission denied"},
           "cmdline_sha256": "9a1f...", "unit_sha256": "77c2..."}
restarts_since_record:
  description:
    - C(n_restarts), C(exits), C(last_exit) (systemd's line), C(last_exit_at) (epoch s),
      C(last_exit_lines) (the dead process's last log lines); null when the recorded start still runs.
  returned: success
  type: dict
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "restart"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
