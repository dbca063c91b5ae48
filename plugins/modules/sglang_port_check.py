#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_port_check
short_description: Check a TCP port is free or held by the service's own processes, before the service starts
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Reads C(/proc/net/tcp) and C(/proc/net/tcp6) for a listener on O(port), and C(/proc/<pid>/fd) for the process
    holding it. The port must be free, or held by O(unit)'s main process (C(systemctl show -p MainPID)) or one of
    its descendants (a deploy that does not restart keeps its server).
  - Any other holder fails with C(failure_class=port_in_use), naming its PID and command. A listener whose holder
    cannot be seen (not root) is returned as C(unknown) with a warning.
  - Read-only; supports check mode.
options:
  port:
    description: The TCP port the server will listen on.
    type: int
    required: true
  unit:
    description: The systemd unit whose processes may hold the port. Empty - nobody may.
    type: str
    default: ''
"""

EXAMPLES = r"""
- name: The port is free or the service's own
  specdec.sglang.sglang_port_check:
    port: 30000
    unit: sglang.service
"""

RETURN = r"""
state:
  description: C(free), C(own), C(foreign) or C(unknown).
  returned: always
  type: str
pid:
  description: The foreign holder's PID.
  returned: when O(port) is held by another process
  type: int
command:
  description: The foreign holder's command line.
  returned: when O(port) is held by another process
  type: str
failure_class:
  description: C(port_in_use) when another process holds the port; null otherwise.
  returned: always
  type: str
main_pid:
  description: The unit's main PID (0 when it is not running).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host import port_owner  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import read_unit_state  # noqa: E402


def main():
    module = AnsibleModule(
        argument_spec=dict(port=dict(type="int", required=True), unit=dict(type="str", default="")),
        supports_check_mode=True,
    )
    port, unit = module.params["port"], module.params["unit"]
    main_pid = 0
    if unit:

        def run_command(argv):
            return module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_COLORS": "0"})

        try:
            main_pid = read_unit_state(unit, run_command).main_pid
        except RuntimeError as exc:
            module.fail_json(msg=str(exc), failure_class=None)
    result = port_owner.port_check(port, main_pid)
    result.update(changed=False, main_pid=main_pid, failure_class=None)
    if result["state"] == "unknown":
        module.warn(result["reason"])
    if result["state"] == "foreign":
        failure_class = port_owner.FAILURE_CLASS
        result["failure_class"] = failure_class
        result["hint"] = failure_classifier.hint_for(failure_class)
        module.fail_json(
            msg="%s: %s; %s was not started on it. hint: %s"
            % (failure_class, result["reason"], unit or "the service", result["hint"]),
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
