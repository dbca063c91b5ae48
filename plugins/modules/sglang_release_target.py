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
  - One operation on the release record C(<runtime_root>/state/last_good/deploy.json), whose one owner is
    C(plugins/module_utils/release_steps.py) over the pure decisions of C(plugins/module_utils/release.py).
    The options every release operation shares are the doc fragment C(specdec.sglang.release); the service
    role sets them once for the action group C(specdec.sglang.release) (C(module_defaults)).
options:
  rollback_release:
    description: A release id to roll back to; empty means the record's previous good release.
    type: str
    default: ""
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - The record has a C(schema) number. Records without one (written before this collection) are read as
    schema 1 and migrated; a record newer than this collection reads fails with a message.
seealso:
  - module: specdec.sglang.sglang_readiness
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

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils.release_steps import (  # noqa: E402
    argument_spec,
    run_module,
)

OPERATION = "target"


def main():
    run_module(AnsibleModule(argument_spec=argument_spec(OPERATION), supports_check_mode=True), OPERATION)


if __name__ == "__main__":
    main()
