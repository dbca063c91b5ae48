#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_report
short_description: Build the report of an SGLang deploy (success or failure), its text and statistics
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Builds the success or failure report, its text, and the per-host statistics.
  - Runs on the controller (the action plugin of the same name, the module's own argument spec and code) - it
    reads no host file.
options:
  readiness:
    description: The registered result of M(specdec.sglang.sglang_readiness).
    type: dict
    default: {}
  rollback_readiness:
    description: The readiness result of the rolled-back release; omit when none was started.
    type: dict
  attempts:
    description:
      - The attempts (the RV(specdec.sglang.sglang_release_judge#module:attempts) of the last
        M(specdec.sglang.sglang_release_judge)).
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
  drift:
    description: The RV(specdec.sglang.sglang_release_restart#module:drift) of M(specdec.sglang.sglang_release_restart).
    type: list
    elements: str
    default: []
  restarts_since_record:
    description:
      - The RV(specdec.sglang.sglang_release_restart#module:restarts_since_record) of
        M(specdec.sglang.sglang_release_restart).
    type: dict
  observed:
    description:
      - The RV(specdec.sglang.sglang_release_restart#module:observed) of M(specdec.sglang.sglang_release_restart); what
        of the process could not be read is said in the report's text.
    type: dict
    default: {}
  fields:
    description:
      - extra record fields (C(base_url), C(speculative_algorithm), C(served_model_name)).
      - C(previous_release_id), and C(stop_result) (systemd's C(Result) after the stop of the
        previous server - C(timeout) when its drain outlasted C(TimeoutStopSec)), copied into the report.
    type: dict
    default: {}
  outcome:
    description: C(ready) for the success report; anything else builds the failure report.
    type: str
    default: ready
  host:
    description: The inventory name in the report.
    type: str
    default: ""
  versions:
    description: Component versions to report next to the server's sglang version.
    type: dict
    default: {}
  context:
    description: C(gpus), C(tp_size), C(speculative_algorithm), C(base_url) of the deploy.
    type: dict
    default: {}
  rollback_target:
    description:
      - The release the rollback returned to (RV(specdec.sglang.sglang_release_rollback#module:target) of
        M(specdec.sglang.sglang_release_rollback)).
    type: str
    default: ""
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
"""

EXAMPLES = r"""
- name: Build the deploy report
  specdec.sglang.sglang_release_report:
    runtime_root: /opt/sglang
    release_id: 3f2a9c1b7d10
    outcome: ready
    host: "{{ inventory_hostname }}"
    envelope: full
    readiness: "{{ readiness_result }}"
    attempts: "{{ verdict.attempts }}"
    restarted: true
  register: report
"""

RETURN = r"""
report:
  description: The deploy report (success or failure).
  returned: success
  type: dict
text:
  description: The report as lines for the operator (success) or the failure message.
  returned: success
  type: list
  elements: str
stats:
  description: The report without its attempts (for C(set_stats)).
  returned: success
  type: dict
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "report"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
