# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.speculation_verdict``: whether speculative decoding pays on this GPU."""

from __future__ import annotations

import json

DOCUMENTATION = r"""
---
name: speculation_verdict
short_description: The break-even accept length of the deployed mode and budget on this GPU class, and whether it pays
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Looks up the recorded step cost of O(algorithm) (and, for DDTREE, the budget N) on the GPU class named by
    O(gpu_names) in the cost table (C(roles/sglang_service/files/speculation-cost.json), made from the step-cost
    records by C(scripts/make-speculation-cost)), and compares the probe's accept length with the break-even accept
    length C(step / graphed target step) at batch 1.
  - C(pays) when the accept length is above the break-even, C(does not pay) otherwise, C(unknown) when the GPU class,
    the mode or the budget has no record, or no accept length was measured (the reason says which).
  - The logic lives in C(plugins/module_utils/_plan/speculation_cost.py); C(roles/sglang_service/tasks/report.yml)
    uses it.
options:
  _input:
    description:
      - The cost table, as the file lookup reads it (JSON text, parsed here in Python) or already parsed.
    type: raw
    required: true
  gpu_names:
    description: nvidia-smi's names of the GPUs the service runs on.
    type: list
    elements: str
    required: true
  algorithm:
    description: The speculative algorithm as sglang spells it (C(DFLASH), C(DDTREE)); anything else speculates not.
    type: str
    required: true
  block_size:
    description: The draft block B (C(sglang_service_speculative_num_draft_tokens)).
    type: int
    required: true
  budget:
    description: DDTREE's tree budget N (C(sglang_service_ddtree_budget)); 0 means the patch set's default 2 x B.
    type: int
    default: 0
  accept_length:
    description: The probe's measured accept length (C(spec_accept_length)); null when not measured.
    type: float
"""

EXAMPLES = r"""
- name: Say whether speculation pays
  ansible.builtin.debug:
    msg: "{{ _verdict.summary }}"
  vars:
    _verdict: >-
      {{ lookup('ansible.builtin.file', 'speculation-cost.json')
         | specdec.sglang.speculation_verdict(gpu_names=['NVIDIA H200'], algorithm='DDTREE', block_size=16,
                                              budget=16, accept_length=4.6) }}
"""

RETURN = r"""
_value:
  description: >-
    C(algorithm), C(gpu_class), C(block_size), C(budget), C(accept_length), C(break_even) (batch 1),
    C(break_even_by_batch), C(verdict) (pays / does not pay / unknown), C(reason), C(record) (the record's path in
    the repository) and C(summary) (the report's line).
  type: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.speculation_cost import (  # noqa: E402
    speculation_verdict as _verdict,
)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.speculation_cost import (  # noqa: E402
    verdict_line as _line,
)


def speculation_verdict(table, gpu_names, algorithm, block_size, *, budget=0, accept_length=None):
    try:
        if isinstance(table, (str, bytes)):
            table = json.loads(table)
        result = _verdict(
            table,
            gpu_names=list(gpu_names or []),
            algorithm=algorithm,
            block_size=block_size,
            budget=budget,
            accept_length=accept_length,
        )
    except (TypeError, ValueError) as exc:  # json.JSONDecodeError is a ValueError
        raise AnsibleFilterError("speculation_verdict: %s" % exc) from exc
    result["summary"] = _line(result)
    return result


class FilterModule:
    def filters(self):
        return {"speculation_verdict": speculation_verdict}
