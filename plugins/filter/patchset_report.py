# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.patchset_report``: the deploy report's patch set entries, in one step."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: patchset_report
short_description: The deploy report's patch set entries from the patch role's apply and verify results
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Pairs the registered loop results of the patch role's apply (or revert) step and its verify step, in order, and
    returns one entry per set - C(name), C(sglang_version), C(files) and C(changed) of the first, C(verify) of the
    second (C({}) where the verify step was skipped, in check mode). The role's fact C(sglang_patches_report).
  - The logic is C(report_entries) in C(plugins/module_utils/_patchset/patchset.py).
options:
  _input:
    description: The apply step's results (C(register) of a loop, its C(results)).
    type: list
    elements: dict
    required: true
  verified:
    description: The verify step's results, in the same order.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Record what the patch sets did, for the deploy report
  ansible.builtin.set_fact:
    sglang_patches_report: "{{ _applied.results | specdec.sglang.patchset_report(_verified.results) }}"
"""

RETURN = r"""
_value:
  description: One entry per set - C(name), C(sglang_version), C(files), C(changed) and C(verify).
  type: list
  elements: dict
"""

from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset  # noqa: E402  (plugins keep their docs first)


def patchset_report(applied, verified):
    return patchset.report_entries(list(applied or ()), list(verified or ()))


class FilterModule:
    def filters(self):
        return {"patchset_report": patchset_report}
