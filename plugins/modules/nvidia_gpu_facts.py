#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvidia_gpu_facts
short_description: Per-GPU facts and health from nvidia-smi, and a GPU selection
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - Runs C(nvidia-smi --query-gpu=... --format=csv,nounits), C(nvidia-smi -q -x) and
    C(nvidia-smi --query-compute-apps=...) and turns the output into one record per GPU with a
    health verdict.
  - A GPU is unusable when it is lost (C(Unable to determine the device handle ...), C([GPU is lost]),
    C([GPU requires reset]), C(Unknown Error) bracketed or bare), has uncorrected volatile ECC errors,
    needs a reset (row remapping pending or failed, a recovery action), or is busy (processes on it, or more than
    O(busy_memory_mb) in use) unless O(allow_busy=true).
  - With O(select) (explicit ids) or O(count) (automatic), picks GPUs and returns them as UUIDs;
    unusable, unknown or excluded GPUs are refused with the reason.
  - Read-only; supports check mode.
  - For playbooks of one's own. The roles do not call it - a deploy reads the GPUs once with
    M(specdec.sglang.sglang_host_facts) (the same reader, C(plugins/module_utils/_gpu/nvidia_smi.py)) and judges and
    chooses them in the plan of the host (M(specdec.sglang.deploy_plan), C(sglang_deploy_plan.host.gpus)).
options:
  nvidia_smi:
    description: nvidia-smi executable (name on PATH or absolute path).
    type: str
    default: nvidia-smi
  select:
    description: Explicit GPUs to use, each an index (V("1")), a UUID (V(GPU-...)) or a PCI bus id.
    type: list
    elements: str
    default: []
  count:
    description:
      - Number of GPUs to pick automatically (healthy, idle, not excluded, lowest index first) when
        O(select) is empty. V(0) means no selection. With O(select), the list must have this length.
    type: int
    default: 0
  exclude:
    description:
      - GPUs never to use (ids as in O(select)).
      - An excluded GPU that is lost is acknowledged, it does not count against O(expected_count); the
        module warns, naming it, because a lost GPU can still disturb the others.
    type: list
    elements: str
    default: []
  allow_busy:
    description: Accept GPUs that have other processes on them or little free memory.
    type: bool
    default: false
  busy_memory_mb:
    description: Memory in use (MiB) above which a GPU without visible processes counts as busy.
    type: int
    default: 1024
  min_free_memory_mb:
    description: A GPU with less free memory (MiB) is unusable (V(0) disables the check).
    type: int
    default: 0
  expected_count:
    description: Number of GPUs the host should have; fewer (or lost ones) is a host problem. V(0) skips.
    type: int
    default: 0
  expected_name:
    description: Prefix of the product name every GPU must report (e.g. V(NVIDIA RTX PRO 6000 Blackwell)).
    type: str
    default: ''
  min_cuda_version:
    description: CUDA version the driver must support (the runtime's CUDA, e.g. V(13.0)).
    type: str
    default: ''
  fail_on_problems:
    description: Fail when there is a host problem or the selection cannot be satisfied.
    type: bool
    default: true
  timeout_s:
    description:
      - Seconds the whole gathering may take, all nvidia-smi calls together (a lost GPU can make it hang).
      - A call still running at the end is killed with its whole process group (coreutils C(timeout) around
        each call sends TERM, then KILL 2 s later), no further call is made, and the host gets the problem
        C(nvidia_smi_hang).
    type: int
    default: 60
notes:
  - The parser lives in C(plugins/module_utils/_gpu/nvidia_smi.py) and the selection in
    C(plugins/module_utils/_gpu/gpu_selection.py).
"""

EXAMPLES = r"""
- name: Read GPU health and pick GPU 1 (ct200, next to a training job)
  specdec.sglang.nvidia_gpu_facts:
    select: ["1"]
    expected_count: 8
    expected_name: NVIDIA RTX PRO 6000 Blackwell
    min_cuda_version: "13.0"
  register: gpu

- name: Two healthy idle GPUs, never GPU 1
  specdec.sglang.nvidia_gpu_facts:
    count: 2
    exclude: ["1"]
    fail_on_problems: false
  register: gpu
"""

RETURN = r"""
gpus:
  description:
    - One record per GPU, in nvidia-smi index order, lost GPUs included.
    - C(compute_capability) is what C(nvidia-smi --query-gpu=compute_cap) reports (V(12.0) on an RTX PRO 6000
      Blackwell, V(9.0) on an H200), null where nvidia-smi does not report it (older drivers, which the
      module detects and then asks again without the field; see RV(host_warnings)).
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      uuid: GPU-5a6eafee-1932-5f13-42d0-82f42c64e659
      name: NVIDIA H200
      pci_bus_id: "00000000:00:06.0"
      memory_total_mb: 143771
      memory_used_mb: 0
      memory_free_mb: 143156
      ecc_uncorrected: 0
      compute_capability: "9.0"
      ecc_mode: Enabled
      remapped_rows_pending: false
      remapped_rows_failure: false
      recovery_action: null
      lost: false
      lost_reason: null
      processes: []
      health: {usable: true, classes: [], reasons: []}
driver_version:
  description: NVIDIA driver version.
  returned: always
  type: str
  sample: "580.159.04"
driver_cuda_version:
  description: Highest CUDA version the driver supports (from C(nvidia-smi -q -x)).
  returned: always
  type: str
  sample: "13.0"
attached_gpus:
  description: GPUs the driver says are attached (can exceed the reachable ones).
  returned: always
  type: int
  sample: 8
usable_count:
  description: GPUs whose health is usable.
  returned: always
  type: int
  sample: 7
host_problems:
  description: Whole-host problems, each C({class, message}); classes C(driver_unavailable), C(no_devices),
    C(nvidia_smi_missing), C(nvidia_smi_hang), C(gpu_count), C(gpu_model), C(driver_cuda), C(nvml_init_failed), ...
  returned: always
  type: list
  elements: dict
  sample: [{class: gpu_count, message: "expected 8 GPUs, nvidia-smi shows 8 of which 7 reachable"}]
host_warnings:
  description:
    - Whole-host warnings, each C({class, message}), also shown as Ansible warnings; class
      C(excluded_gpu_lost) names a lost GPU that O(exclude) acknowledges; C(compute_cap_unknown) says that
      this nvidia-smi does not report compute capabilities.
  returned: always
  type: list
  elements: dict
  sample: [{class: excluded_gpu_lost, message: "GPU 1 (00000000:2A:00.0) is lost and excluded, ..."}]
selection:
  description: The selection result; C(uuids) is what CUDA_VISIBLE_DEVICES should get.
  returned: when O(select) or O(count) is given
  type: dict
  sample:
    ok: true
    mode: explicit
    uuids: [GPU-5a6eafee-1932-5f13-42d0-82f42c64e659]
    indices: [0]
    selected: [{index: 0, uuid: GPU-5a6eafee-1932-5f13-42d0-82f42c64e659, name: NVIDIA H200}]
    excluded: []
    refused: []
    errors: []
commands:
  description: Exit status of each nvidia-smi call (null when it did not run or was killed).
  returned: always
  type: dict
  sample: {query_gpu: 0, xml: 0, compute_apps: 0}
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_selection import find_gpu, select_gpus  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import (  # noqa: E402
    NvidiaSmiParseError,
    assess_host,
    collect,
    gather,
)

ARGUMENT_SPEC = {
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "select": {"type": "list", "elements": "str", "default": []},
    "count": {"type": "int", "default": 0},
    "exclude": {"type": "list", "elements": "str", "default": []},
    "allow_busy": {"type": "bool", "default": False},
    "busy_memory_mb": {"type": "int", "default": 1024},
    "min_free_memory_mb": {"type": "int", "default": 0},
    "expected_count": {"type": "int", "default": 0},
    "expected_name": {"type": "str", "default": ""},
    "min_cuda_version": {"type": "str", "default": ""},
    "fail_on_problems": {"type": "bool", "default": True},
    "timeout_s": {"type": "int", "default": 60},
}


def facts_and_selection(p: dict, run_command, run_collect=collect) -> dict:
    """Everything the module returns, from its parameters; ``run_collect`` runs nvidia-smi through
    ``run_command`` (``AnsibleModule.run_command``)."""
    calls = run_collect(p["nvidia_smi"], p["timeout_s"], run_command=run_command)
    if calls["query"] is None and calls["xml"] is None:
        result = {"gpus": [], "driver_version": None, "driver_cuda_version": None, "attached_gpus": 0}
        result["host_errors"] = list(calls["host_errors"])
    else:
        result = gather(
            calls["query"],
            calls["xml"],
            calls["apps"],
            stderr_text=calls["stderr"],
            allow_busy=p["allow_busy"],
            busy_memory_mb=p["busy_memory_mb"],
            min_free_mb=p["min_free_memory_mb"] or None,
        )
        result["host_errors"] = calls["host_errors"] + result["host_errors"]
    gpus = result["gpus"]
    excluded = [g for g in (find_gpu(gpus, ident) for ident in p["exclude"]) if g is not None]
    verdict = assess_host(
        result,
        expected_count=p["expected_count"] or None,
        expected_name=p["expected_name"] or None,
        min_cuda_version=p["min_cuda_version"] or None,
        excluded_gpus=excluded,
    )
    for field in calls.get("unsupported_fields", []):
        verdict["warnings"].append(
            {
                "class": "compute_cap_unknown",
                "message": f"this nvidia-smi ({p['nvidia_smi']}) does not know the query field {field}"
                " (an older driver): every GPU's compute_capability is null, so nothing can check the"
                " release's compiled GPU code against the GPUs; a newer driver reports it",
            }
        )
    output = {
        "changed": False,
        "gpus": gpus,
        "driver_version": result["driver_version"],
        "driver_cuda_version": result["driver_cuda_version"],
        "attached_gpus": result["attached_gpus"],
        "usable_count": len([g for g in gpus if g.get("health", {}).get("usable")]),
        "host_problems": verdict["problems"],
        "host_warnings": verdict["warnings"],
        "commands": calls["commands"],
    }
    if p["select"] or p["count"]:
        output["selection"] = select_gpus(
            gpus,
            select=p["select"],
            count=p["count"] or None,
            exclude=p["exclude"],
            allow_busy=p["allow_busy"],
        )
    return output


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        output = facts_and_selection(module.params, module.run_command)
    except NvidiaSmiParseError as exc:
        module.fail_json(msg=f"cannot parse nvidia-smi output: {exc}")
    for warning in output["host_warnings"]:
        module.warn(warning["message"])
    failures = [f"{pr['class']}: {pr['message']}" for pr in output["host_problems"]]
    failures.extend(output.get("selection", {}).get("errors", []))
    if failures and module.params["fail_on_problems"]:
        module.fail_json(msg="GPU preflight failed: " + "; ".join(failures), **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
