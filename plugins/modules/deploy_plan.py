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
  - Runs once in the validation play of C(deploy.yml), on the controller; no host is contacted. Returns one plan
    (fact C(sglang_deploy_plan)) that the roles read.
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
  - With O(reference_venv_report) (what C(specdec.sglang.sglang_reference_venv) read on the host in preflight),
    checks the reference venv against O(plan) - the versions it holds for the C(reference_venv) entries, its sglang's
    and those packages' own C(Requires-Dist) - with the same coherence code, before anything is built.
  - Chooses the patch sets by capability; each C(patchset.yml) declares C(sglang_version) and C(serves)
    (dimension to allowed values; a missing dimension serves any value, an empty list none). A request no set serves
    fails, naming every set and what it serves. A set whose C(serves) is C(every_request) (the server-args redaction
    sets) is taken for every request of its sglang version, besides the set the algorithm needs.
  - With O(target_config), checks a target's parsed C(config.json) against the plan's O(plan) (the architecture the
    chosen patch sets serve), for preflight.
  - The logic lives in C(plugins/module_utils/deploy_plan.py).
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
    description: The venv's Python version (markers are evaluated for it).
    type: str
  cuda_version:
    description: The runtime's CUDA version.
    type: str
  index_url:
    description: Package index (PEP 503) whose metadata is read for an C(index) source; V("") for none.
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
    description: Directory holding the patch sets the plan chooses from.
    type: path
  runtime_root:
    description: The release tree root (C(sglang_runtime_root)).
    type: path
  unit_name:
    description: The systemd unit name (C(sglang_service_unit_name)).
    type: str
  config_dir:
    description: The service's configuration directory.
    type: path
  cache_dir:
    description: The service's cache directory.
    type: path
  disk_path:
    description: The path whose free space preflight checks.
    type: path
  gpus_wanted:
    description: GPUs the service needs.
    type: int
  reference_venv:
    description: Known-good venv on the host for manifest entries with C(source=reference_venv).
    type: str
  extra_wheels:
    description: Controller paths of further wheels installed into the venv (part of the release inputs).
    type: list
    elements: path
  plan:
    description: A plan returned earlier (with O(target_config) or O(release_python)).
    type: dict
  release_python:
    description:
      - The host's Python (C(version), C(interpreter)); returns the release id and directories of O(plan) for it
        (the one derivation of C(<root>/releases/<id>)).
    type: dict
  reference_venv_report:
    description:
      - What C(specdec.sglang.sglang_reference_venv) read in the reference venv on the host; checks it against O(plan)
        instead of building a plan.
    type: dict
  target_config:
    description: The target's parsed C(config.json); checks it against O(plan) instead of building a plan.
    type: dict
  target_config_path:
    description: Where O(target_config) was read (for the message).
    type: str
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
release_id:
  description: The release id, with O(release_python).
  returned: with O(release_python)
  type: str
release_dir:
  description: The release directory C(<root>/releases/<id>), with O(release_python).
  returned: with O(release_python)
  type: str
checked:
  description: With O(reference_venv_report), how many versions and requirements were checked.
  returned: with O(reference_venv_report)
  type: int
architecture:
  description: The target's architecture (V(dense) or V(hybrid_gdn)), with O(target_config).
  returned: with O(target_config)
  type: str
"""
