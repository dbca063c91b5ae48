#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_runtime_check
short_description: Verify a release venv against the runtime manifest (and the manifest against its files)
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - O(action=verify) (on the GPU host) runs the venv's own Python with a small stdlib-only probe that reads
    the versions of the manifest packages (C(importlib.metadata)), C(torch.version.cuda) and the import of
    each manifest module (an C(undefined symbol) ImportError is classified C(abi_mismatch) and names
    the symbol). Any difference from the manifest fails with an expected/actual table.
  - With O(cuda_check=true), runs a small matmul on each GPU in O(gpu_uuids) (one process per GPU,
    C(CUDA_VISIBLE_DEVICES=<uuid>)) and compares it with the CPU result, with a timeout; failures are
    classified (C(cuda_hang), C(cuda_unavailable), C(cuda_error), C(cuda_oom), C(wrong_result), ...).
  - O(action=validate) (delegate to the controller) checks the manifest data and the controller files
    before any host change - wheel files exist and match their sha256, the sglang wheel, extra wheels
    and patch set directories exist - and returns the canonical release inputs and their sha256.
  - Read-only; supports check mode.
options:
  action:
    description: V(verify) a venv on the host, or V(validate) the manifest and its files on the controller.
    type: str
    choices: [verify, validate]
    default: verify
  python:
    description: The venv's Python (O(action=verify)).
    type: path
  manifest:
    description: The runtime manifest (C(sglang_runtime_manifest)), a list of package entries.
    type: list
    elements: dict
    required: true
  cuda_version:
    description: CUDA version C(torch.version.cuda) must report (e.g. V(13.0)); empty skips the check.
    type: str
    default: ''
  expect_packages:
    description: Further distributions that must be installed at a version (name -> version), e.g. sglang.
    type: dict
    default: {}
  cuda_check:
    description: Run the matmul sanity check on each GPU of O(gpu_uuids).
    type: bool
    default: false
  gpu_uuids:
    description: GPUs (UUIDs) for the CUDA sanity check.
    type: list
    elements: str
    default: []
  timeout_s:
    description: Seconds the version/import probe may take.
    type: int
    default: 300
  cuda_timeout_s:
    description: Seconds the CUDA check may take on one GPU before it counts as hung.
    type: int
    default: 120
  reference_venv:
    description: Known-good venv on the host, needed by entries with C(source=reference_venv) (O(action=validate)).
    type: str
    default: ''
  sglang:
    description: sglang source spec (C(sglang_runtime_sglang)) (O(action=validate)).
    type: dict
    default: {}
  extra_wheels:
    description: Controller paths of extra wheels installed into the venv (O(action=validate)).
    type: list
    elements: path
    default: []
  patch_sets:
    description: Controller directories of patch sets, each holding C(patchset.yml) (O(action=validate)).
    type: list
    elements: path
    default: []
notes:
  - Logic in C(plugins/module_utils/_runtime/runtime_manifest.py) and C(plugins/module_utils/_runtime/runtime_probe.py).
"""

EXAMPLES = r"""
- name: Check the manifest and its wheel files on the controller
  specdec.sglang.sglang_runtime_check:
    action: validate
    manifest: "{{ sglang_runtime_manifest }}"
    sglang: "{{ sglang_runtime_sglang }}"
  delegate_to: localhost

- name: Verify the release venv and run the CUDA sanity check on the selected GPUs
  specdec.sglang.sglang_runtime_check:
    python: /opt/sglang/releases/0123456789ab/venv/bin/python
    manifest: "{{ sglang_runtime_manifest }}"
    cuda_version: "13.0"
    expect_packages: {sglang: "0.5.23"}
    cuda_check: true
    gpu_uuids: "{{ sglang_preflight_gpu_uuids }}"
"""

RETURN = r"""
ok:
  description: Everything matched (and every CUDA check passed).
  returned: always
  type: bool
  sample: true
rows:
  description: Expected/actual rows (package, expected, actual, status); status C(ok), C(missing),
    C(version_mismatch), C(local_mismatch), C(cuda_mismatch), C(abi_mismatch), C(import_error), C(not_installed).
  returned: O(action=verify)
  type: list
  elements: dict
  sample: [{package: torch, expected: 2.11.0+cu130, actual: 2.11.0+cu130, status: ok}]
table:
  description: The rows as a fixed-width table.
  returned: O(action=verify)
  type: str
mismatches:
  description: The rows whose status is not C(ok).
  returned: O(action=verify)
  type: list
  elements: dict
abi_mismatch:
  description: Imports that failed with an undefined symbol, each C({module, symbol, library}).
  returned: O(action=verify)
  type: list
  elements: dict
  sample: [{module: sgl_kernel, symbol: _ZN3c104cuda9SetDeviceEa, library: .../common_ops.abi3.so}]
probe:
  description: Raw probe result (python, packages, imports, torch_cuda, torch_version).
  returned: O(action=verify)
  type: dict
versions:
  description: Installed version of each manifest and expected package (name -> version or null).
  returned: O(action=verify)
  type: dict
  sample: {torch: 2.11.0+cu130, sglang: 0.5.23}
torch_cuda:
  description: C(torch.version.cuda) in the venv.
  returned: O(action=verify)
  type: str
  sample: "13.0"
cuda_checks:
  description: One result per GPU - uuid, ok, class, device_name, max_abs_diff, elapsed_s, error.
  returned: O(cuda_check=true)
  type: list
  elements: dict
errors:
  description: Manifest and controller-file problems, each naming the variable.
  returned: O(action=validate)
  type: list
  elements: str
inputs:
  description: Canonical release inputs (manifest, sglang spec, extra wheels, patch set files, by sha256).
  returned: O(action=validate)
  type: dict
inputs_sha256:
  description: sha256 of the canonical JSON of RV(inputs); the release id is derived from it and the host's Python.
  returned: O(action=validate)
  type: str
"""

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import (  # noqa: E402
    check_controller_inputs,
    compare,
    format_table,
    normalize_name,
    validate_manifest,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_probe import (  # noqa: E402
    ProbeError,
    command_runner,
    cuda_check,
    probe_venv,
)


def _validate(module):
    p = module.params
    errors = validate_manifest(p["manifest"], reference_venv=p["reference_venv"] or None)
    checked = check_controller_inputs(p["manifest"], p["sglang"], p["extra_wheels"], p["patch_sets"])
    errors.extend(checked["errors"])
    module.exit_json(
        changed=False,
        ok=not errors,
        errors=errors,
        inputs=checked["inputs"],
        inputs_sha256=checked["inputs_sha256"],
    )


def _verify(module):
    p = module.params
    if not p["python"]:
        module.fail_json(msg="python is required with action=verify")
    manifest = list(p["manifest"])
    extra = [
        {"name": name, "version": str(version), "local": "", "import": ""}
        for name, version in p["expect_packages"].items()
    ]
    names = {normalize_name(e["name"]) for e in manifest}
    probe_list = manifest + [e for e in extra if normalize_name(e["name"]) not in names]
    try:
        probe = probe_venv(p["python"], probe_list, timeout_s=p["timeout_s"], run_command=command_runner(module))
    except ProbeError as exc:
        module.fail_json(msg=f"venv probe failed with {p['python']}: {exc}", ok=False)
    comparison = compare(probe_list, probe, cuda_version=p["cuda_version"] or None)
    abi = [
        {"module": module_name, "symbol": r.get("symbol"), "library": r.get("library")}
        for module_name, r in (probe.get("imports") or {}).items()
        if r.get("class") == "abi_mismatch"
    ]
    versions = {name: (info or {}).get("version") for name, info in (probe.get("packages") or {}).items()}
    output = {
        "changed": False,
        "rows": comparison["rows"],
        "mismatches": comparison["mismatches"],
        "table": format_table(comparison["rows"]),
        "abi_mismatch": abi,
        "probe": probe,
        "versions": versions,
        "torch_cuda": probe.get("torch_cuda"),
    }
    failed = []
    if not comparison["ok"]:
        detail = "; ".join(f"{a['module']}: undefined symbol {a['symbol']}" for a in abi)
        lead = "ABI mismatch (" + detail + "). " if abi else ""
        failed.append(f"{lead}venv {probe.get('prefix')} does not match sglang_runtime_manifest:\n" + output["table"])
    if p["cuda_check"]:
        if not p["gpu_uuids"]:
            module.fail_json(msg="cuda_check=true needs gpu_uuids", **output)
        checks = cuda_check(
            p["python"], p["gpu_uuids"], timeout_s=p["cuda_timeout_s"], run_command=command_runner(module)
        )
        output["cuda_checks"] = checks
        for check in checks:
            if not check["ok"]:
                failed.append(f"CUDA sanity check on {check['uuid']}: {check['class']}: {check['error']}")
    output["ok"] = not failed
    if failed:
        module.fail_json(msg="\n".join(failed), **output)
    module.exit_json(**output)


def main():
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["verify", "validate"], "default": "verify"},
            "python": {"type": "path"},
            "manifest": {"type": "list", "elements": "dict", "required": True},
            "cuda_version": {"type": "str", "default": ""},
            "expect_packages": {"type": "dict", "default": {}},
            "cuda_check": {"type": "bool", "default": False},
            "gpu_uuids": {"type": "list", "elements": "str", "default": []},
            "timeout_s": {"type": "int", "default": 300},
            "cuda_timeout_s": {"type": "int", "default": 120},
            "reference_venv": {"type": "str", "default": ""},
            "sglang": {"type": "dict", "default": {}},
            "extra_wheels": {"type": "list", "elements": "path", "default": []},
            "patch_sets": {"type": "list", "elements": "path", "default": []},
        },
        supports_check_mode=True,
    )
    if module.params["action"] == "validate":
        _validate(module)
    _verify(module)


if __name__ == "__main__":
    main()
