#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_target
short_description: Choose the release playbooks/rollback.yml returns to (a complete release only)
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Chooses the release C(playbooks/rollback.yml) returns to; only a complete release (one with
    C(<runtime_root>/releases/<id>/.complete)) is accepted.
options:
  rollback_release:
    description: A release id to roll back to; empty means the record's previous good release.
    type: str
    default: ""
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
notes:
  - The record has a C(schema) number. Records without one (written before this collection) are read as
    schema 1 and migrated; a record newer than this collection reads fails with a message.
"""

EXAMPLES = r"""
- name: Choose the release playbooks/rollback.yml returns to
  specdec.sglang.sglang_release_target:
    runtime_root: /opt/sglang
    rollback_release: ""
  register: target
"""

RETURN = r"""
record:
  description: The release record in the current schema; null when none.
  returned: success
  type: dict
  sample: {"schema": 2, "release_id": "20260801-abc123", "previous_release_id": "20260720-def456",
           "envelope": "full", "ladder": ["full"], "envelopes": {"full": {"mem_fraction_static": 0.88}}}
target:
  description: The release to return to; empty when none.
  returned: success
  type: str
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "target"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
