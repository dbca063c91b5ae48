#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_gpu_code
short_description: Check that the runtime and the attention backend carry GPU code for the selected GPUs
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - For each compute capability of the selected GPUs (O(capabilities), the deploy plan's
    C(sglang_deploy_plan.host.gpus.capabilities) from the host facts' nvidia-smi read),
    checks that the manifest's packages with compiled GPU code (sglang-kernel, torch) hold code for it, that the
    attention backend (O(attention_backend), or the one sglang picks per GPU when empty) and the sampling backend
    (O(sampling_backend), or sglang's default when empty) have kernels for it, and that a backend compiling at run
    time (flashinfer) has its precompiled package in the manifest or a CUDA compiler on the host.
  - Where O(venv) holds a library at the manifest's version (its C(.dist-info) says so), the library's own
    C(.nv_fatbin) ELF section is read on the host (headers only, no CUDA tool, nothing imported); otherwise the
    facts of O(data) (C(roles/sglang_preflight/files/gpu_code.yml)) are used, each naming where it was read.
  - Fails, with O(fail_on_errors), naming the library, the capability and what the library holds.
  - Read-only; supports check mode. Logic in C(plugins/module_utils/_gpu/gpu_code.py) and
    C(plugins/module_utils/_gpu/cuda_fatbin.py).
options:
  manifest:
    description: The plan's runtime manifest (C(sglang_deploy_plan.manifest)), entries with C(name) and C(version).
    type: list
    elements: dict
    required: true
  data:
    description: The GPU code data (C(roles/sglang_preflight/files/gpu_code.yml), loaded).
    type: dict
    required: true
  capabilities:
    description: Compute capability of each selected GPU (V(12.0)); an empty entry is an unknown capability.
    type: list
    elements: str
    required: true
  attention_backend:
    description: C(sglang_service_attention_backend); empty lets sglang pick per GPU.
    type: str
    default: ''
  sampling_backend:
    description:
      - C(sglang_service_sampling_backend) (V(pytorch), V(flashinfer)); empty is sglang's own choice (flashinfer
        when flashinfer-python is in the manifest).
    type: str
    default: ''
  extra_flags:
    description: C(sglang_service_extra_flags), read for C(--attention-backend) where O(attention_backend) is empty.
    type: list
    elements: str
    default: []
  tree:
    description: Speculative decoding with topk > 1 (a DDTREE tree), which changes sglang's default backend.
    type: bool
    default: false
  target_architecture:
    description:
      - The target's architecture from its config.json (C(dense), C(hybrid_gdn)); empty when not known.
      - A hybrid target runs flashinfer's RMSNorm whatever the backends (the data's C(flashinfer_by_architecture)),
        so flashinfer's kernels must be precompiled in the manifest or compiled on the host.
    type: str
    default: ""
  venv:
    description: A venv on the host whose libraries are read where they are at the manifest's version (the
      reference venv, or the release's venv). Empty or absent reads nothing.
    type: path
    default: ''
  cuda_roots:
    description:
      - CUDA installations searched for C(bin/nvcc) after C(PATH), C(CUDA_HOME) and C(CUDA_PATH) (where flashinfer's
        run-time compile looks too).
    type: list
    elements: path
    default: [/usr/local/cuda]
  fail_on_errors:
    description: Fail when a package or backend has no code for a selected GPU.
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: The release has code for the selected GPUs
  specdec.sglang.sglang_gpu_code:
    manifest: "{{ sglang_deploy_plan.manifest }}"
    data: "{{ lookup('ansible.builtin.file', 'gpu_code.yml') | from_yaml }}"
    capabilities: ["12.0", "12.0"]
    attention_backend: fa3
    sampling_backend: pytorch
    venv: /root/venv_sglang
"""

RETURN = r"""
ok:
  description: No package or backend lacks code for a selected GPU.
  returned: always
  type: bool
reasons:
  description: Why each capability is covered, and where that was read (the host's file or the data).
  returned: always
  type: list
  elements: str
  sample: ["12.0: sglang-kernel 0.4.5 common_ops (sm100/) runs as sass sm_120 (read from ... on the host)"]
errors:
  description: What has no code for which capability, naming the library and what it holds.
  returned: always
  type: list
  elements: str
  sample: ["sglang-kernel 0.4.5 flash_ops for attention backend fa3 (...) has no code for compute capability 12.0 ..."]
not_checked:
  description: What could not be checked (an unknown capability, a package or backend without data).
  returned: always
  type: list
  elements: str
readings:
  description: Per library path read on the host, C(file), C(sass), C(ptx), C(containers), or C(error).
  returned: always
  type: dict
host_compiler:
  description: The CUDA compiler found on the host (PATH, C(CUDA_HOME)/bin, /usr/local/cuda/bin), or null.
  returned: always
  type: str
"""

import glob  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.cuda_fatbin import (  # noqa: E402
    FatbinError,
    read_shared_object,
)
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_code import (  # noqa: E402
    check_gpu_code,
    files_to_read,
)

ARGUMENT_SPEC = {
    "manifest": {"type": "list", "elements": "dict", "required": True},
    "data": {"type": "dict", "required": True},
    "capabilities": {"type": "list", "elements": "str", "required": True},
    "attention_backend": {"type": "str", "default": ""},
    "sampling_backend": {"type": "str", "default": ""},
    "extra_flags": {"type": "list", "elements": "str", "default": []},
    "tree": {"type": "bool", "default": False},
    "target_architecture": {"type": "str", "default": ""},
    "venv": {"type": "path", "default": ""},
    "cuda_roots": {"type": "list", "elements": "path", "default": ["/usr/local/cuda"]},
    "fail_on_errors": {"type": "bool", "default": True},
}


def _installed_version(site: str, package: str) -> str | None:
    """The version of ``package`` that ``site`` holds, from its ``.dist-info`` directory name."""
    wanted = re.sub(r"[-_.]+", "_", package).lower()
    for path in glob.glob(os.path.join(site, "*.dist-info")):
        stem = os.path.basename(path)[: -len(".dist-info")]
        name, _dash, version = stem.partition("-")
        if re.sub(r"[-_.]+", "_", name).lower() == wanted:
            return version.split("+", 1)[0]
    return None


def read_venv(venv: str, wanted: list[dict]) -> tuple[dict, list[str]]:
    """``(readings, notes)``: each wanted library's fatbin summary where the venv holds it at the manifest's version."""
    readings: dict = {}
    notes: list[str] = []
    if not venv:
        return readings, notes
    sites = sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages")))
    if not sites:
        notes.append(f"{venv} has no lib/python*/site-packages: the GPU code data is used")
        return readings, notes
    site = sites[-1]
    for item in wanted:
        installed = _installed_version(site, item["package"])
        if installed is None:
            continue
        if installed != item["version"]:
            note = f"{venv} holds {item['package']} {installed}, the manifest {item['version']}: its files are not read"
            if note not in notes:
                notes.append(note)
            continue
        path = os.path.join(site, item["path"])
        if not os.path.isfile(path):
            continue
        try:
            with open(path, "rb") as stream:
                summary = read_shared_object(stream)
        except (OSError, FatbinError) as exc:
            readings[item["path"]] = {"file": path, "error": str(exc)}
            continue
        readings[item["path"]] = dict(summary, file=path)
    return readings, notes


def host_compiler(cuda_roots=("/usr/local/cuda",)) -> str | None:
    """nvcc on PATH, under CUDA_HOME or CUDA_PATH, or under one of ``cuda_roots``."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), *cuda_roots):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


def run(p: dict) -> dict:
    readings, notes = read_venv(p["venv"], files_to_read(p["manifest"], p["data"]))
    compiler = host_compiler(p["cuda_roots"])
    result = check_gpu_code(
        p["manifest"],
        p["data"],
        [c or None for c in p["capabilities"]],
        attention_backend=p["attention_backend"],
        sampling_backend=p["sampling_backend"],
        extra_flags=p["extra_flags"],
        tree=p["tree"],
        target_architecture=p["target_architecture"],
        readings=readings,
        host_compiler=compiler,
    )
    result["not_checked"] = notes + result["not_checked"]
    return dict(result, readings=readings, host_compiler=compiler, changed=False)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    output = run(module.params)
    if output["errors"] and module.params["fail_on_errors"]:
        module.fail_json(msg="no GPU code for the selected GPUs: " + "; ".join(output["errors"]), **output)
    module.exit_json(**output)


if __name__ == "__main__":
    main()
