#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_rollback
short_description: Restore the last good unit, environment and config files and point current back
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Restores the last good unit, environment and config files and points C(current) back at the
    last good release, when it is still on disk.
  - One operation on the release record C(<runtime_root>/state/last_good/deploy.json), whose one owner is
    C(plugins/module_utils/release_steps.py) over the pure decisions of C(plugins/module_utils/release.py).
    The options every release operation shares are the doc fragment C(specdec.sglang.release); the service
    role sets them once for the action group C(specdec.sglang.release) (C(module_defaults)).
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says what it would change and changes nothing.
  diff_mode:
    support: none
  platform:
    platforms: posix
seealso:
  - module: specdec.sglang.sglang_readiness
"""

EXAMPLES = r"""
- name: Put the last good release back
  specdec.sglang.sglang_release_rollback:
    runtime_root: /opt/sglang
    files: {unit: /etc/systemd/system/sglang.service, env: /etc/sglang/sglang.env, config: /etc/sglang/sglang.yaml}
  register: rollback
"""

RETURN = r"""
target:
  description: The release to return to; empty when none.
  returned: success
  type: str
restored:
  description: Whether the last good files and C(current) were put back.
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils.release_steps import (  # noqa: E402
    argument_spec,
    run_module,
)

OPERATION = "rollback"


def main():
    run_module(AnsibleModule(argument_spec=argument_spec(OPERATION), supports_check_mode=True), OPERATION)


if __name__ == "__main__":
    main()
