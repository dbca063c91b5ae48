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
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says what it would change and changes nothing.
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

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "rollback"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
