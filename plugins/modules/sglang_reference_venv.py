#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_reference_venv
short_description: Read what a reference venv holds (names, versions, Requires-Dist), read-only, in preflight
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Reads the C(*.dist-info/METADATA) files of C(<venv>/lib/python*/site-packages) on the host and returns, for
    sglang and each of O(names), the distribution's name, installed version and C(Requires-Dist) lines.
  - Checks nothing itself; C(specdec.sglang.deploy_plan) with C(reference_venv_report) checks the result against
    the deploy plan on the controller (the same coherence code as the manifest's).
  - Read-only; supports check mode. Nothing is imported from the venv and its Python is not run.
  - Logic in C(plugins/module_utils/_runtime/runtime_coherence.py) (C(read_reference_venv)).
options:
  venv:
    description: The reference venv (C(sglang_runtime_reference_venv)).
    type: path
    required: true
  names:
    description: Distributions to read besides sglang (the manifest entries with C(source=reference_venv)).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read the reference venv
  specdec.sglang.sglang_reference_venv:
    venv: /root/venv_sglang
    names: [torch, triton, sglang-kernel]
  register: reference
"""

RETURN = r"""
venv:
  description: The venv read.
  returned: always
  type: str
found:
  description: Whether the venv has a C(lib/python*/site-packages) directory.
  returned: always
  type: bool
site_packages:
  description: The site-packages directories read.
  returned: always
  type: list
  elements: str
distributions:
  description:
    - Normalised distribution name to C(name), C(version), C(requires) (the C(Requires-Dist) lines) and C(metadata)
      (the METADATA file read), for sglang and O(names) where installed.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_coherence import read_reference_venv  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(
            venv=dict(type="path", required=True),
            names=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    try:
        report = read_reference_venv(module.params["venv"], module.params["names"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read the reference venv {module.params['venv']}: {exc}")
    module.exit_json(changed=False, **report)


if __name__ == "__main__":
    main()
