#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_judge
short_description: Turn one readiness result of an SGLang start into an attempt and the ladder's outcome
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Turns one readiness result into an attempt and the outcome C(ready), C(next_envelope) or C(failed).
  - Runs on the controller (the action plugin of the same name, the module's own argument spec and code) - it
    reads no host file.
options:
  readiness:
    description: The registered result of M(specdec.sglang.sglang_readiness).
    type: dict
    default: {}
  attempts:
    description: The attempts so far (the RV(attempts) of the previous C(judge)).
    type: list
    elements: dict
    default: []
  envelope:
    description: The envelope of this attempt, or the one that is ready.
    type: str
    default: ""
  restarted:
    description: Whether the service was (re)started for this attempt.
    type: bool
    default: false
  started_at:
    description:
      - The host's epoch seconds when the service was started (the host's clock, as the readiness
        result's C(verdict_epoch)); the attempt's C(start_to_verdict_s) is the difference, on that one clock.
    type: float
  record_error:
    description:
      - The RV(specdec.sglang.sglang_release_record#module:record_error) of a failed
        M(specdec.sglang.sglang_release_record) - the ready attempt fails with C(record_failed) and the deploy rolls
        back.
    type: dict
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
"""

EXAMPLES = r"""
- name: Judge one attempt
  specdec.sglang.sglang_release_judge:
    runtime_root: /opt/sglang
    release_id: 3f2a9c1b7d10
    ladder: [full, small]
    envelopes: "{{ sglang_service_envelopes }}"
    envelope: full
    readiness: "{{ readiness_result }}"
    attempts: []
    restarted: true
  register: verdict
"""

RETURN = r"""
attempts:
  description: The attempts so far, this one last.
  returned: success
  type: list
  elements: dict
outcome:
  description: C(ready), C(next_envelope) or C(failed).
  returned: success
  type: str
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "judge"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
