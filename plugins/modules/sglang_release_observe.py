#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_observe
short_description: Make the release record's observation the process a rollback restored
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - After a rollback that serves, makes the record's observation the restored process (the one the
    rollback verified), so the next deploy compares the running process with it.
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says what it would change and changes nothing.
"""

EXAMPLES = r"""
- name: Record the process the rollback restored as the one to compare with
  specdec.sglang.sglang_release_observe:
    runtime_root: /opt/sglang
    unit: sglang.service
"""

RETURN = r"""
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
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "observe"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
