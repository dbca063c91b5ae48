# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the service role's replicas: ``service_replicas``, ``replica_host_report``, ``rolling_order``."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: service_replicas
short_description: The replicas the service role runs on a host, each with its unit, port, GPUs, files and state
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Plans the host's replicas with C(plugins/module_utils/_plan/replica_plan.py) (C(service_replicas), the same function
    that validates C(sglang_service_replicas)) and returns one item per replica - C(name), C(unit), C(port),
    C(gpus) (UUIDs), C(unit_path), C(env_path), C(config_path), C(state_dir), C(readiness_job), C(deploy_marker).
  - An empty list is the host's single replica with the unit name, port, files and state of a deploy without
    replicas.
  - The same file holds C(envelope_gpus) (what the envelope planner sizes each replica on, its own GPUs),
    C(replica_host_report), C(replica_merge) and
    C(rolling_order) (the order of a rolling restart through the gateway, checked against
    C(sglang_deploy_min_serving)).
options:
  _input:
    description: C(sglang_service_replicas).
    type: list
    elements: dict
    required: true
  selected:
    description: C(sglang_preflight_gpus) (the operator's GPU ids; empty for automatic selection).
    type: list
    elements: str
  gpu_uuids:
    description: C(sglang_service_gpu_uuids) (the selected GPUs as UUIDs, in the same order).
    type: list
    elements: str
  tp_size:
    description: C(sglang_service_tp_size).
    type: int
  port:
    description: C(sglang_service_port).
    type: int
  unit_name:
    description: C(sglang_service_unit_name).
    type: str
  config_dir:
    description: C(sglang_service_config_dir).
    type: str
  runtime_root:
    description: C(sglang_service_runtime_root).
    type: str
  count:
    description: C(sglang_service_replica_count) (used only when the list is empty).
    type: int
    default: 0
"""

EXAMPLES = r"""
- name: One readiness verdict per replica
  ansible.builtin.debug:
    msg: "{{ item.unit }} on port {{ item.port }}"
  loop: >-
    {{ sglang_service_replicas | specdec.sglang.service_replicas(sglang_preflight_gpus, sglang_service_gpu_uuids,
       tp_size=sglang_service_tp_size, port=sglang_service_port, unit_name=sglang_service_unit_name,
       config_dir=sglang_service_config_dir, runtime_root=sglang_service_runtime_root) }}
"""

RETURN = r"""
_value:
  description: One item per replica (see the description); a single item named C("") without replicas.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._plan import replica_plan  # noqa: E402


def service_replicas(replicas, selected, gpu_uuids, *, tp_size, port, unit_name, config_dir, runtime_root, count=0):
    try:
        return replica_plan.service_replicas(
            list(selected or ()),
            list(gpu_uuids or ()),
            int(tp_size),
            int(port),
            list(replicas or ()),
            unit_name=str(unit_name),
            config_dir=str(config_dir),
            runtime_root=str(runtime_root),
            count=int(count or 0),
        )
    except ValueError as exc:
        raise AnsibleFilterError("service_replicas: %s" % exc) from exc


def envelope_gpus(
    replicas, selected, gpu_uuids, *, tp_size, port, count=0, unit_name="sglang", gpu_facts=(), assumed_mb=0
):
    try:
        return replica_plan.envelope_gpus(
            list(selected or ()),
            list(gpu_uuids or ()),
            int(tp_size),
            list(replicas or ()),
            count=int(count or 0),
            unit_name=str(unit_name),
            port=int(port),
            gpu_facts=list(gpu_facts or ()),
            assumed_memory_mb=int(assumed_mb or 0),
        )
    except ValueError as exc:
        raise AnsibleFilterError("envelope_gpus: %s" % exc) from exc


def replica_host_report(results, host, rollbacks=None, loop_var="_sglang_service_replica_item", gateways=()):
    """The host's report from the registered results of the per-replica ``report`` step (a loop).

    ``rollbacks``: ``[{name, unit, rollback, rollback_readiness}]`` for the replicas rolled back with the host
    (``rollback``: the ``rollback`` step's result; ``rollback_readiness``: the restored release's readiness).
    ``gateways``: ``sglang_service_gateways`` when the deploy was gateway-aware: the report's ``out_of_gateways``
    names the replicas it left out of them."""
    reports, texts = [], []
    for result in results or ():
        replica = (result.get(loop_var) or {}).get("name", "")
        reports.append(dict(result.get("report") or {}, replica=replica))
        texts.append(list(result.get("text") or ()))
    by_name = {
        str(entry["name"]): {
            "unit": entry.get("unit", ""),
            "target": (entry.get("rollback") or {}).get("target") or "",
            "readiness": entry.get("rollback_readiness") if (entry.get("rollback") or {}).get("restored") else None,
        }
        for entry in rollbacks or ()
    }
    return replica_plan.host_report(str(host), reports, texts, by_name, list(gateways or ()))


def replica_merge(results, updates):
    return replica_plan.merge_by_name(list(results or ()), list(updates or ()))


def rolling_order(workers, min_serving):
    if isinstance(min_serving, str) and min_serving.strip().isdigit():
        min_serving = int(min_serving.strip())  # an extra var or a survey answer
    order, errors = replica_plan.rolling_order(list(workers or ()), min_serving)
    if errors:
        raise AnsibleFilterError("; ".join(errors))
    return order


class FilterModule:
    def filters(self):
        return {
            "service_replicas": service_replicas,
            "envelope_gpus": envelope_gpus,
            "replica_host_report": replica_host_report,
            "rolling_order": rolling_order,
            "replica_merge": replica_merge,
        }
