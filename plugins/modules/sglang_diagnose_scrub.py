#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_diagnose_scrub
short_description: Redact secrets in the files of a support bundle, on the host, before it is packed
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Rewrites each file of O(paths) (a directory stands for the regular files directly in it) with the value of
    every secret-named key replaced by C(<redacted>), in the forms logs write it (a Python dataclass or dict repr,
    a YAML mapping, an environment line, C(--api-key <key>) on a command line), and every occurrence of a secret
    value read from O(secret_files).
  - sglang 0.5.17 and 0.5.23 log their server arguments, the API key included, at every start; the journal of a
    support bundle holds those lines. A key is secret as in the filter C(specdec.sglang.redact_secrets).
  - Stdlib only (C(plugins/module_utils/_host/redact.py)); secret values never appear in the result. Supports check
    mode.
options:
  paths:
    description: Files, or directories whose regular files (not recursive), to scrub in place.
    type: list
    elements: path
    required: true
  secret_files:
    description:
      - Files whose secret values (values of secret-named keys, such as the C(--config) file's C(api-key) and the
        environment file's tokens) are redacted wherever they appear in O(paths). Missing files are skipped.
    type: list
    elements: path
    default: []
"""

EXAMPLES = r"""
- name: Redact secrets in the collected files
  specdec.sglang.sglang_diagnose_scrub:
    paths: [/tmp/sglang-diagnose-x/ct129]
    secret_files: [/etc/sglang/sglang.yaml, /etc/sglang/sglang.env]
"""

RETURN = r"""
files:
  description: Each file scrubbed and how many values were redacted in it.
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/tmp/sglang-diagnose-x/ct129/journal.log", "redacted": 3}]
redacted:
  description: The number of values redacted in all files.
  returned: always
  type: int
  sample: 3
secret_values:
  description: How many distinct secret values O(secret_files) hold (the values themselves are never returned).
  returned: always
  type: int
  sample: 1
"""

import os  # noqa: E402  (Ansible modules keep their docs first)

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.redact import scrub, secret_values  # noqa: E402


def _read(path):
    with open(path, "rb") as handle:
        return handle.read().decode("utf-8", errors="surrogateescape")


def _files(paths):
    for path in paths:
        if os.path.isdir(path):
            for name in sorted(os.listdir(path)):
                full = os.path.join(path, name)
                if os.path.isfile(full) and not os.path.islink(full):
                    yield full
        elif os.path.isfile(path):
            yield path


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="list", elements="path", required=True),
            secret_files=dict(type="list", elements="path", default=[], no_log=False),
        ),
        supports_check_mode=True,
    )
    values = set()
    for path in module.params["secret_files"]:
        if os.path.isfile(path):
            values |= secret_values(_read(path))
    module.no_log_values.update(values)
    files = []
    for path in _files(module.params["paths"]):
        text, count = scrub(_read(path), values)
        files.append({"path": path, "redacted": count})
        if count and not module.check_mode:
            with open(path, "wb") as handle:
                handle.write(text.encode("utf-8", errors="surrogateescape"))
    total = sum(f["redacted"] for f in files)
    module.exit_json(changed=total > 0, files=files, redacted=total, secret_values=len(values))


if __name__ == "__main__":
    main()
