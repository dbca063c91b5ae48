# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.disk_free_verdict``: the preflight disk check's verdict and message."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: disk_free_verdict
short_description: Whether the free space df reported is enough, and a message whose numbers justify it
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Compares the free KiB (C(df -Pk)'s available column) with O(min_free_gb) GiB.
  - The message names the exact KiB compared and the free GiB rounded down, never up, so that a check that fails
    never reads "1.0 GiB free, 1 needed".
  - The logic lives in C(plugins/module_utils/_host/disk_space.py); C(roles/sglang_preflight/tasks/disk.yml) uses it.
options:
  _input:
    description: The free space in KiB, as df printed it.
    type: str
    required: true
  path:
    description: The directory measured (named in the message).
    type: str
    required: true
  min_free_gb:
    description: The GiB needed (C(sglang_preflight_min_free_disk_gb)).
    type: float
    required: true
"""

EXAMPLES = r"""
- name: Enough free disk space
  ansible.builtin.assert:
    that: _verdict.ok
    fail_msg: "{{ _verdict.msg }}"
  vars:
    _verdict: "{{ df_result.stdout | specdec.sglang.disk_free_verdict('/opt/sglang', 40) }}"
"""

RETURN = r"""
_value:
  description: C(ok) (bool), C(free_kib), C(needed_kib) (int) and C(msg) (str).
  type: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._host.disk_space import (  # noqa: E402
    disk_free_verdict as _verdict,
)


def disk_free_verdict(free_kib, path, min_free_gb):
    try:
        return _verdict(path, free_kib, min_free_gb)
    except ValueError as exc:
        raise AnsibleFilterError("disk_free_verdict: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"disk_free_verdict": disk_free_verdict}
