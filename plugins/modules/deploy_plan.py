#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deploy_plan
short_description: Build the deploy plan on the controller (runtime coherence, patch sets by capability, paths)
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Runs on the controller; no host is contacted. In the validation play of C(deploy.yml) without O(facts) (the
    controller's decisions), in preflight once per host with O(facts). Returns one plan (fact C(sglang_deploy_plan))
    that the roles read.
  - Checks the runtime manifest against sglang's own C(Requires-Dist) (read from the sglang wheel for
    C(source=wheel), from the index's PEP 658 metadata for C(source=index) when O(index_url) serves it, else from the
    recorded metadata of a known runtime, C(roles/sglang_runtime/files/known_runtimes.yml)) and against each
    compiled package's own pins (a wheelhouse wheel's METADATA, or the pin its build states). A contradiction fails,
    naming the package, the package that requires it, the required version and the manifest's version. A manifest
    entry with C(override_reason) turns its conflicts into accepted ones, reported in the plan.
  - Derives the manifest from the chosen sglang version (O(sglang)) - the compiled core its known runtime records
    (torch, triton, sglang-kernel, flashinfer, at the versions of C(known_runtimes.yml)), each from the source
    O(core_sources) names (V(index) when it names none); the entries of O(manifest) win by name and are checked the
    same way. A version with no known runtime and an empty O(manifest) fails, naming the known versions.
  - Chooses the patch sets by capability; each C(patchset.yml) declares C(sglang_version) and C(serves)
    (dimension to allowed values; a missing dimension serves any value, an empty list none). A request no set serves
    fails, naming every set and what it serves. A set whose C(serves) is C(every_request) (the server-args redaction
    sets) is taken for every request of its sglang version, besides the set the algorithm needs.
  - With O(facts) (what C(specdec.sglang.sglang_host_facts) read on one host), the same call plans that host as well
    (C(plan.host)) - the release id for the host's Python and whether it must be built, the Python checked against
    O(python_version), the GPUs judged and chosen, the model directories and the target's architecture against the
    chosen patch sets, the reference venv against the manifest and sglang's requirements, the port's holder, the
    free disk, the build environment. Every refusal of the plan comes back at once.
  - Each option left out is read from the variable its description names (C(deploy_plan.INPUT_VARIABLES)); a variable
    that is not set (its role is not loaded) leaves out the check it feeds. A task passes an option to override it.
  - The logic lives in C(plugins/module_utils/_plan/deploy_plan.py).
options:
  sglang:
    description: The sglang source spec (C(sglang_runtime_sglang)).
    type: dict
  manifest:
    description: The runtime manifest's explicit entries (C(sglang_runtime_manifest)); they win over the derived core.
    type: list
    elements: dict
  core_sources:
    description:
      - Source (V(index), V(wheelhouse) needs a pin in O(manifest), V(reference_venv)) of each core package derived
        from the known runtime (C(sglang_runtime_core_sources)); a package it does not name comes from V(index).
    type: dict
  python_version:
    description: The venv's Python version (C(sglang_runtime_python_version)); markers are evaluated for it.
    type: str
  cuda_version:
    description: The runtime's CUDA version (C(sglang_runtime_cuda_version)).
    type: str
  index_url:
    description: Package index (PEP 503, C(sglang_runtime_index_url)) read for an C(index) source; V("") for none.
    type: str
  algorithm:
    description: The speculative algorithm (C(sglang_service_speculative_algorithm)).
    type: str
  attention_backend:
    description: The attention backend (C(sglang_service_attention_backend)).
    type: str
  patch_sets:
    description: Patch set directories chosen by the user (C(sglang_deploy_patch_sets)); omitted, the plan chooses.
    type: list
    elements: path
  patchset_root:
    description: Directory holding the patch sets the plan chooses from (default - the collection's C(patchsets/)).
    type: path
  runtime_root:
    description: The release tree root (C(sglang_runtime_root)).
    type: path
  unit_name:
    description: The systemd unit name (C(sglang_service_unit_name)).
    type: str
  config_dir:
    description: The service's configuration directory (C(sglang_service_config_dir)).
    type: path
  cache_dir:
    description: The service's cache directory (C(sglang_service_cache_dir)).
    type: path
  disk_path:
    description: The path whose free space preflight checks (C(sglang_preflight_disk_path)).
    type: path
  gpus:
    description: The GPUs listed for the service (C(sglang_preflight_gpus)).
    type: list
    elements: str
  gpu_count:
    description: GPUs to pick automatically (C(sglang_preflight_gpu_count)); V(0) - the tp size decides.
    type: int
  tp_size:
    description: The tensor-parallel size (C(sglang_service_tp_size)); the GPU count when nothing else names one.
    type: int
  reference_venv:
    description: Known-good venv on the host for C(source=reference_venv) entries (C(sglang_runtime_reference_venv)).
    type: str
  extra_wheels:
    description: Further wheels installed into the venv (C(sglang_runtime_extra_wheels)); part of the release inputs.
    type: list
    elements: path
  uv_version:
    description: The pinned uv version (C(sglang_runtime_uv_version)); its tool paths are part of the plan.
    type: str
  python_interpreter:
    description: The Python interpreter on the host (C(sglang_runtime_python_interpreter)); V("") - C(python<version>).
    type: str
  python_downloads:
    description: uv may download a Python when the host has none (C(sglang_runtime_python_downloads)).
    type: bool
  ca_bundle:
    description: CA bundle for HTTPS on the host (C(sglang_runtime_ca_bundle)), used by the build when it exists.
    type: str
  gpu_checks:
    description: Judge and choose the host's GPUs (C(sglang_preflight_gpu_checks)).
    type: bool
  excluded_gpus:
    description: GPUs never chosen (C(sglang_preflight_excluded_gpus)).
    type: list
    elements: str
  allow_busy:
    description: Busy GPUs may be chosen (C(sglang_preflight_allow_busy_gpus)).
    type: bool
  expected_gpu_count:
    description: GPUs the host must have (C(sglang_preflight_expected_gpu_count)); V(0) - any.
    type: int
  expected_gpu_name:
    description: Prefix of the GPUs' product name (C(sglang_preflight_expected_gpu_name)).
    type: str
  required_cuda_version:
    description: CUDA version the driver must cover (C(sglang_preflight_required_cuda_version)).
    type: str
  port:
    description: The service port (C(sglang_service_port)).
    type: int
  port_check:
    description: Refuse a port held by another process (C(sglang_preflight_port_check)).
    type: bool
  min_free_disk_gb:
    description: Free disk (GiB) needed where releases go (C(sglang_preflight_min_free_disk_gb)).
    type: float
  facts:
    description: What C(specdec.sglang.sglang_host_facts) read on the host (its C(facts)); omitted - no host part.
    type: dict
attributes:
  check_mode:
    description: Runs the same in check mode; it changes nothing.
    support: full
  action:
    description: An action plugin; it needs no connection to the host.
    support: full
notes:
  - An action plugin; it needs no connection to the host.
"""

EXAMPLES = r"""
- name: Plan this host (the controller's decisions and the host's, from the host facts)
  specdec.sglang.deploy_plan:
    sglang: "{{ sglang_runtime_sglang }}"
    manifest: "{{ sglang_runtime_manifest }}"
    python_version: "{{ sglang_runtime_python_version }}"
    runtime_root: "{{ sglang_runtime_root }}"
    facts: "{{ _host_facts.facts }}"

- name: Build the deploy plan (no host is contacted)
  specdec.sglang.deploy_plan:
    sglang: "{{ sglang_runtime_sglang }}"
    manifest: "{{ sglang_runtime_manifest }}"
    python_version: "{{ sglang_runtime_python_version }}"
    algorithm: "{{ sglang_service_speculative_algorithm }}"
    attention_backend: "{{ sglang_service_attention_backend }}"
    patchset_root: "{{ playbook_dir }}/patchsets"
"""

RETURN = r"""
plan:
  description: The deploy plan (also set as the fact C(sglang_deploy_plan)).
  returned: when a plan is built
  type: dict
errors:
  description: Every refusal, each naming the variable, what was found and what is allowed.
  returned: when a plan is built
  type: list
  elements: str
warnings:
  description: Accepted runtime conflicts and host warnings (a lost GPU that is excluded, a port holder not visible).
  returned: when a plan is built
  type: list
  elements: str
"""
