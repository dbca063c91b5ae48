#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_host_facts
short_description: Read once everything the deploy plan needs from a host
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - One pass over the host, read-only - the Python the release venv is made from, the GPUs (nvidia-smi, with
    compute capability and each GPU's health), the target's and the draft's C(config.json), the reference venv's
    metadata, the holder of each service port (one per replica), the free disk where releases go, the releases on
    disk (complete or not), the release C(current) names, the release record and the running invocation of the
    unit.
  - Decides nothing - the action C(specdec.sglang.deploy_plan) turns the inputs and these facts into every decision
    of the deploy (C(plugins/module_utils/_plan/deploy_plan.py)).
  - The readers are the ones of each subsystem (C(plugins/module_utils/_host/host_facts.py) calls C(nvidia_smi),
    C(runtime_coherence), C(port_owner), C(unit_state) and C(release)).
  - Supports check mode (it only reads).
options:
  python:
    description: The Python interpreter (path or name on PATH) the release venv is made from.
    type: str
    default: python3
  gpu_checks:
    description: Read the GPUs with nvidia-smi. V(false) on hosts without GPUs (lab).
    type: bool
    default: false
  nvidia_smi:
    description: nvidia-smi executable (name on PATH or absolute path).
    type: str
    default: nvidia-smi
  nvidia_smi_timeout_s:
    description: Time budget of the three nvidia-smi calls together; a hung call is killed.
    type: int
    default: 60
  allow_busy:
    description: GPUs with processes or memory in use still count as healthy (their health verdict says so).
    type: bool
    default: false
  busy_memory_mb:
    description: Memory in use (MiB) above which a GPU counts as busy.
    type: int
    default: 1024
  min_free_memory_mb:
    description: A GPU with less free memory (MiB) is not usable. V(0) - no minimum.
    type: int
    default: 0
  models:
    description: Name (the variable that sets it) to model directory; each directory's C(config.json) is read.
    type: dict
    default: {}
  reference_venv:
    description: A known-good venv on the host whose metadata is read (names, versions, Requires-Dist). Empty - none.
    type: str
    default: ''
  reference_venv_names:
    description: Distributions to read from O(reference_venv) (sglang is always read).
    type: list
    elements: str
    default: []
  ports:
    description:
      - The service's ports (one per replica) whose holders are read, each with the unit whose main process may hold
        it (C(sglang_deploy_plan.service_ports)). Empty - none read.
    type: list
    elements: dict
    default: []
  unit:
    description: The systemd unit whose running invocation is read (the restart decision reads it). Empty - none.
    type: str
    default: ''
  paths:
    description:
      - The deploy plan's paths (C(sglang_deploy_plan.paths)) - C(root), C(current), C(state) and C(disk_check) are
        read. Without C(root), no release is read.
    type: dict
    default: {}
  files:
    description: Further paths whose existence the plan needs (the CA bundle).
    type: list
    elements: str
    default: []
"""

EXAMPLES = r"""
- name: Read the host once
  specdec.sglang.sglang_host_facts:
    python: /usr/bin/python3
    gpu_checks: true
    models:
      sglang_service_model_path: /models/Qwen3.6-27B
      sglang_service_draft_model_path: /models/Qwen3.6-27B-DFlash
    ports: [{port: 30000, unit: sglang.service}]
    unit: sglang.service
    paths: "{{ sglang_deploy_plan.paths }}"
  register: _facts
"""

RETURN = r"""
facts:
  description: Everything read; the input of C(specdec.sglang.deploy_plan)'s option C(facts).
  returned: always
  type: dict
  contains:
    python:
      description: C(argv0), C(found), C(version) (C(3.11.2)) and C(error).
      type: dict
      sample: {argv0: /usr/bin/python3, found: true, version: 3.11.2, error: ""}
    gpus:
      description:
        - C(read) (false when O(gpu_checks=false)); else nvidia-smi's facts - C(gpus) (one record per GPU with
          C(uuid), C(compute_capability), memory and C(health)), C(driver_version), C(driver_cuda_version),
          C(attached_gpus), C(host_errors), C(commands), C(unsupported_fields).
      type: dict
      sample: {read: false, gpus: [], host_errors: [], unsupported_fields: []}
    models:
      description: Per name of O(models) - C(path), C(config_path), C(exists), C(config) (the parsed JSON), C(error).
      type: dict
      sample: {sglang_service_model_path: {path: /models/t, config_path: /models/t/config.json, exists: true,
               config: {architectures: [Qwen3ForCausalLM]}, error: ""}}
    reference_venv:
      description: C(venv), C(python_exists) (its C(bin/python)) and C(report) (names, versions, Requires-Dist).
      type: dict
      sample: {venv: "", python_exists: false, report: null}
    unit:
      description: The unit's C(active_state), C(main_pid), C(invocation_id), C(n_restarts); C(error) without systemd.
      type: dict
      sample: {name: sglang.service, active_state: active, main_pid: 812, invocation_id: 4f0c9a, n_restarts: 0}
    ports:
      description:
        - Per port of O(ports), its holder - C(state) C(free), C(own), C(foreign) (with C(pid), C(command)) or
          C(unknown) - and the C(unit) it belongs to; null when no port is read.
      type: list
      elements: dict
      sample: [{state: free, port: 30000, unit: sglang.service}]
    disk:
      description: C(path), C(measured_at) (its nearest existing parent) and C(free_kib) (C(df -Pk)'s Available).
      type: dict
      sample: {path: /opt/sglang, measured_at: /opt/sglang, free_kib: 104857600}
    release:
      description: C(current) (the id C(current) names), C(releases) (id to complete), C(record), C(record_error).
      type: dict
      sample: {current: 3f2a9c1b7d10, releases: {3f2a9c1b7d10: true}, record: null, record_error: ""}
    files:
      description: Path of O(files) to whether it exists.
      type: dict
      sample: {/etc/ssl/certs/ca-certificates.crt: true}
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.host_facts import HostIO, read_host  # noqa: E402

ARGUMENT_SPEC = {
    "python": {"type": "str", "default": "python3"},
    "gpu_checks": {"type": "bool", "default": False},
    "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
    "nvidia_smi_timeout_s": {"type": "int", "default": 60},
    "allow_busy": {"type": "bool", "default": False},
    "busy_memory_mb": {"type": "int", "default": 1024},
    "min_free_memory_mb": {"type": "int", "default": 0},
    "models": {"type": "dict", "default": {}},
    "reference_venv": {"type": "str", "default": ""},
    "reference_venv_names": {"type": "list", "elements": "str", "default": []},
    "ports": {"type": "list", "elements": "dict", "default": []},
    "unit": {"type": "str", "default": ""},
    "paths": {"type": "dict", "default": {}},
    "files": {"type": "list", "elements": "str", "default": []},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)

    def run_command(argv):
        # A program that is not there is a fact (Python not found), not a module failure.
        found = argv[0] if os.path.isabs(argv[0]) and os.access(argv[0], os.X_OK) else module.get_bin_path(argv[0])
        if not found:
            raise OSError(f"{argv[0]}: not found")
        return module.run_command([found, *argv[1:]], environ_update={"LC_ALL": "C", "SYSTEMD_COLORS": "0"})

    try:
        facts = read_host(module.params, HostIO(run_command))
    except OSError as exc:
        module.fail_json(msg=f"cannot read the host: {exc}")
    module.exit_json(changed=False, facts=facts)


if __name__ == "__main__":
    main()
