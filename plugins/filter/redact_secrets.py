# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.redact_secrets``: a YAML or environment file with the values of its secret keys redacted."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: redact_secrets
short_description: Redact the values of secret keys in a YAML or environment file's text
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Parses the text (a YAML document, or C(NAME=value) lines of an environment file) and writes it back with every
    key kept and the value of each secret key replaced by C(<redacted>); empty values stay empty.
  - A key is secret when one of its words (split at C(_), C(-), C(.) and case changes) is or ends with C(key) or
    C(token) (C(api_key), C(api-key), C(HF_TOKEN)), or when it contains C(secret), C(password), C(passwd),
    C(credential) or C(private). C(max_total_tokens) and C(tokenizer_path) are not secret.
  - Text that cannot be parsed is withheld, never copied. YAML comments are not kept.
  - The logic lives in C(plugins/module_utils/_host/redact.py); C(playbooks/diagnose.yml) uses it for the support
    bundle.
options:
  _input:
    description: The file's text.
    type: str
    required: true
  fmt:
    description: The file's format.
    type: str
    choices: [yaml, env]
    default: yaml
"""

EXAMPLES = r"""
- name: Write a redacted copy of the server's config file
  ansible.builtin.copy:
    content: "{{ config_text | specdec.sglang.redact_secrets('yaml') }}"
    dest: /tmp/bundle/config.redacted.yaml
    mode: "0600"
  no_log: true
"""

RETURN = r"""
_value:
  description: The text with the values of secret keys replaced by C(<redacted>), starting with a comment that says so.
  type: str
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._host.redact import RedactError, redact  # noqa: E402


def redact_secrets(text, fmt="yaml"):
    try:
        return redact(str(text), fmt)
    except RedactError as exc:
        raise AnsibleFilterError(f"redact_secrets: {exc}") from exc


class FilterModule:
    def filters(self):
        return {"redact_secrets": redact_secrets}
