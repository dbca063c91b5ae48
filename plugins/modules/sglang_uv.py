#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_uv
short_description: uv at a pinned version in a tool venv of its own, in one module run
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Puts the tools directory (the parent of O(tool_dir)) in place (root, 0755), reads C(<tool_dir>/bin/uv --version)
    and, unless it answers with O(version), removes the tool venv (an interrupted C(python -m venv) or pip install
    leaves one without a working uv), makes it again with O(python) and installs uv into it with its pip - from
    O(wheel) without an index, else C(uv==<version>) from the index (O(environment)). Then uv must answer with
    O(version), or the module fails with C(<uv> reports <output>, <variable>=<version>).
  - The logic is C(plugins/module_utils/_runtime/uv_tool.py).
options:
  tool_dir:
    description: The tool venv (the deploy plan's C(paths.uv_tool_dir), C(<root>/tools/uv-<version>)); its uv is
      C(<tool_dir>/bin/uv).
    type: path
    required: true
  version:
    description: The pinned uv version.
    type: str
    required: true
  python:
    description: The interpreter that makes the tool venv.
    type: str
    default: python3
  wheel:
    description: A uv wheel already on the host, installed with C(--no-index); empty for the index.
    type: path
  environment:
    description: Variables for the pip install (the index, a CA bundle, pip's settings).
    type: dict
    default: {}
  variable:
    description: The variable the refusal names as holding O(version).
    type: str
    default: version
attributes:
  check_mode:
    support: full
    description: Reads uv's version and reports whether the tool venv would be made again; writes nothing.
  diff_mode:
    support: none
    description: No diff.
"""

EXAMPLES = r"""
- name: Install uv
  specdec.sglang.sglang_uv:
    tool_dir: /opt/sglang/tools/uv-0.9.5
    version: 0.9.5
    environment:
      PIP_INDEX_URL: https://pypi.example.com/simple
    variable: sglang_runtime_uv_version
"""

RETURN = r"""
uv:
  description: The uv of the tool venv.
  returned: always
  type: str
  sample: /opt/sglang/tools/uv-0.9.5/bin/uv
version:
  description: The version uv answers with (empty in check mode when it would be installed).
  returned: always
  type: str
  sample: 0.9.5
removed:
  description: Whether a tool venv without a working uv of O(version) was removed.
  returned: always
  type: bool
installed:
  description: Whether the tool venv was made and uv installed into it.
  returned: always
  type: bool
"""

import os  # noqa: E402
import shutil  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._runtime import uv_tool  # noqa: E402


class _HostOps:
    def __init__(self, module):
        self.module = module

    def run(self, argv, env=None):
        try:
            return self.module.run_command(argv, check_rc=False, environ_update=env or None, handle_exceptions=False)
        except OSError as exc:  # no such program: its failure, said by the step that ran it
            return 127, "", str(exc)

    @staticmethod
    def exists(path):
        return os.path.lexists(path)

    @staticmethod
    def remove_tree(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def _tools_dir(module, path):
    """The tools directory, root 0755 (made with its parents where missing); whether it changed."""
    changed = False
    if not os.path.isdir(path):
        changed = True
        if module.check_mode:
            return changed
        os.makedirs(path, 0o755)
    changed = module.set_mode_if_different(path, "0755", changed)
    changed = module.set_owner_if_different(path, "root", changed)
    return module.set_group_if_different(path, "root", changed)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            tool_dir=dict(type="path", required=True),
            version=dict(type="str", required=True),
            python=dict(type="str", default="python3"),
            wheel=dict(type="path"),
            environment=dict(type="dict", default={}),
            variable=dict(type="str", default="version"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    tool_dir = p["tool_dir"].rstrip("/")
    result = dict(uv=uv_tool.uv_path(tool_dir))
    try:
        tools_changed = _tools_dir(module, os.path.dirname(tool_dir))
        done = uv_tool.ensure(
            tool_dir,
            p["version"],
            _HostOps(module),
            python=p["python"],
            wheel=p["wheel"] or "",
            environment={str(k): str(v) for k, v in (p["environment"] or {}).items()},
            variable=p["variable"],
            check_mode=module.check_mode,
        )
    except uv_tool.UvToolError as exc:
        module.fail_json(msg=exc.msg, **result)
    except OSError as exc:
        module.fail_json(msg="sglang_uv: %s" % exc, **result)
    result.update(
        changed=tools_changed or done["changed"],
        version=done["version"],
        removed=done["removed"],
        installed=done["installed"],
    )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
