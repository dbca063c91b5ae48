# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.gateway_workers``: every replica of every worker host as a gateway worker."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: gateway_workers
short_description: Every replica of every worker host as a gateway worker (URL, host, replica, unit)
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Reads, for each host of the input list, the fact C(_sglang_gateway_worker) that playbooks/gateway.yml sets on
    the worker hosts (C(address), C(gpus), C(tp_size), C(port), C(unit_name), C(replicas)).
  - Plans each host's replicas with C(plugins/module_utils/_plan/replica_plan.py) (the same function that validates
    C(sglang_service_replicas)) and returns one worker per replica, in host then replica order.
  - Fails naming the hosts that were not read (limited out of the run, or unreachable) and every replica error.
options:
  _input:
    description: The worker hosts (C(groups[...])).
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The gateway routes to every replica of the deploy group
  ansible.builtin.set_fact:
    sglang_gateway_workers: "{{ groups['gpu'] | specdec.sglang.gateway_workers(hostvars) | map(attribute='url') }}"
"""

RETURN = r"""
_value:
  description:
    - One item per replica, C({host, replica, unit, port, url}); C(replica) is C("") for a host's single replica.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.replica_plan import (  # noqa: E402
    gateway_workers as _workers,
)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.replica_plan import (  # noqa: E402
    plan_replicas,
    replica_list,
)

FACT = "_sglang_gateway_worker"


def gateway_workers(hosts, hostvars):
    missing, errors, planned = [], [], {}
    for host in hosts:
        fact = (hostvars.get(host) or {}).get(FACT)
        if not fact:
            missing.append(str(host))
            continue
        replicas, found = plan_replicas(
            fact.get("gpus") or [],
            int(fact["tp_size"]),
            int(fact["port"]),
            replica_list(fact.get("replicas") or [], int(fact.get("replica_count") or 0)),
            unit_name=str(fact["unit_name"]),
        )
        errors += [f"{host}: {e}" for e in found]
        planned[str(host)] = {"address": fact["address"], "replicas": replicas}
    if missing:
        errors.insert(
            0,
            f"gateway_workers: host(s) {', '.join(missing)} of the worker group were not read (limited out of the run"
            " or unreachable); run playbooks/gateway.yml over the gateway and every worker host",
        )
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    return _workers(planned)


class FilterModule:
    def filters(self):
        return {"gateway_workers": gateway_workers}
