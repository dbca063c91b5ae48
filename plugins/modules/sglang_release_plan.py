#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_plan
short_description: Plan the switch of an SGLang deploy from its release record (the first envelope of the ladder)
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Reads the record (migrating older formats) and chooses the first envelope of the ladder.
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
notes:
  - The record has a C(schema) number. Records without one (written before this collection) are read as
    schema 1 and migrated; a record newer than this collection reads fails with a message.
"""

EXAMPLES = r"""
- name: Plan the switch from the release record
  specdec.sglang.sglang_release_plan:
    runtime_root: /opt/sglang
    release_id: 3f2a9c1b7d10
    ladder: [full, small]
    envelopes: "{{ sglang_service_envelopes }}"
  register: plan
"""

RETURN = r"""
record:
  description: The release record in the current schema; null when none.
  returned: success
  type: dict
  sample: {"schema": 2, "release_id": "20260801-abc123", "previous_release_id": "20260720-def456",
           "envelope": "full", "ladder": ["full"], "envelopes": {"full": {"mem_fraction_static": 0.88}}}
release_dir:
  description: The release's directory, C(<runtime_root>/releases/<release_id>) (the one derivation).
  returned: success
  type: str
  sample: /srv/sglang/releases/0123456789ab
current_link:
  description: The link the unit starts from, C(<runtime_root>/current) (the one derivation); it points at the
    release that serves.
  returned: success
  type: str
  sample: /srv/sglang/current
previous_release_id:
  description: The release serving before this deploy (the record's), empty on a first deploy.
  returned: success
  type: str
first_envelope_index:
  description: Index in the ladder of the first envelope to try.
  returned: success
  type: int
first_envelope:
  description: The first envelope to try.
  returned: success
  type: str
to_try:
  description: The envelopes to try, in order.
  returned: success
  type: list
  elements: str
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "plan"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
