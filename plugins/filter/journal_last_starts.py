# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.journal_last_starts``: where the journal of a unit's last N starts begins."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: journal_last_starts
short_description: Where the journal of a unit's last N starts begins
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Reads a unit's journal as C(journalctl -o json) lines (one JSON object a line, oldest first).
  - A start is systemd's "unit starting" message (MESSAGE_ID C(7d4958e842da4a758f6c1cdc7b36dcc5)) where the
    journal holds them; otherwise each invocation id (C(_SYSTEMD_INVOCATION_ID) of the process's lines,
    C(INVOCATION_ID) of systemd's), at its first entry.
  - The logic lives in C(plugins/module_utils/_readiness/journal.py) (C(last_starts)); C(playbooks/diagnose.yml) uses it
    for C(sglang_diagnose_starts).
options:
  _input:
    description: The journal, C(journalctl -o json) output.
    type: str
    required: true
  keep:
    description: How many of the last starts to keep.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: The journal of the last 3 starts
  ansible.builtin.command:
    cmd: journalctl --no-pager -u sglang.service {{ _starts.since }}
  vars:
    _starts: "{{ journal_json.stdout | specdec.sglang.journal_last_starts(3) }}"
"""

RETURN = r"""
_value:
  description:
    - C(since) (the C(--since=@<s.us>) argument of journalctl, empty to keep the whole journal), C(since_us),
      C(by) (C(message_id), C(invocation_id) or C(none)), C(starts) (found) and C(kept).
  type: dict
"""

import json  # noqa: E402  (plugins keep their docs first)

from ansible_collections.specdec.sglang.plugins.module_utils._readiness.journal import (  # noqa: E402
    last_starts,
    since_argument,
)


def journal_last_starts(text, keep):
    entries = []
    for line in str(text).splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # journalctl's "-- No entries --" and the like
        if isinstance(entry, dict):
            entries.append(entry)
    found = last_starts(entries, keep)
    found["since"] = since_argument(found["since_us"])
    return found


class FilterModule:
    def filters(self):
        return {"journal_last_starts": journal_last_starts}
