#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_record
short_description: Record the release that proved good (its files, the verified process) and prune old releases
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Keeps copies of the files that proved good, writes the record (with the verified process as
    observed now) and prunes old releases. Every file is written to a temporary name first and renamed only when
    all are written, so a failure (a full disk) leaves the last good copies and the record as they were and no
    temporary file behind; the task fails with RV(record_error), which M(specdec.sglang.sglang_release_judge)
    (its O(specdec.sglang.sglang_release_judge#module:record_error)) turns into a
    failed attempt that rolls back.
options:
  readiness:
    description: The registered result of M(specdec.sglang.sglang_readiness).
    type: dict
    default: {}
  envelope:
    description: The envelope of this attempt, or the one that is ready.
    type: str
    default: ""
  keep_releases:
    description: Releases to keep; the current, the last good and its previous are never removed.
    type: int
    default: 3
  fields:
    description:
      - extra record fields (C(base_url), C(speculative_algorithm), C(served_model_name)).
      - C(previous_release_id), and C(stop_result) (systemd's C(Result) after the stop of the
        previous server - C(timeout) when its drain outlasted C(TimeoutStopSec)), copied into the report.
    type: dict
    default: {}
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says what it would change and changes nothing.
notes:
  - The record has a C(schema) number. Records without one (written before this collection) are read as
    schema 1 and migrated; a record newer than this collection reads fails with a message.
"""

EXAMPLES = r"""
- name: Record the release that proved good and prune old releases
  specdec.sglang.sglang_release_record:
    runtime_root: /opt/sglang
    release_id: 3f2a9c1b7d10
    unit: sglang.service
    ladder: [full, small]
    envelopes: "{{ sglang_service_envelopes }}"
    files: {unit: /etc/systemd/system/sglang.service, env: /etc/sglang/sglang.env, config: /etc/sglang/sglang.yaml}
    envelope: full
    readiness: "{{ readiness_result }}"
    keep_releases: 3
"""

RETURN = r"""
record:
  description: The release record in the current schema; null when none.
  returned: success
  type: dict
  sample: {"schema": 2, "release_id": "20260801-abc123", "previous_release_id": "20260720-def456",
           "envelope": "full", "ladder": ["full"], "envelopes": {"full": {"mem_fraction_static": 0.88}}}
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
record_error:
  description: Step C(record), on failure. C(errno), C(strerror), C(path) and C(free_bytes) of the state directory.
  returned: failure
  type: dict
pruned:
  description: Release ids removed.
  returned: success
  type: list
  elements: str
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "record"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
