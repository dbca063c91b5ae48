#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_envelope_plan
short_description: Plan the memory envelopes of the ladder from config.json and the GPUs' memory, before sglang starts
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - From C(config.json) of the target and of the draft model predicts, for each envelope of
    the ladder, what sglang 0.5.17 allocates on one tensor-parallel rank - weights, KV bytes per token (the
    full-attention layers only for a hybrid Gated-DeltaNet target), mamba state per request (ssm + conv, plus
    one snapshot per draft token for speculative verify, i.e. the DFLASH block size or the DDTree tree budget),
    draft weights and KV - and whether it starts under sglang's own C(--mem-fraction-static) rule.
  - The decisions are C(plugins/module_utils/_plan/envelope_plan.py); this module formats the result.
  - The deploy hands it both C(config.json) as the host facts read them (O(target_config) and O(draft_config),
    from C(sglang_deploy_plan.host.models.configs)); it then runs on the controller (its action plugin) and
    reads nothing on the host. Without them it reads the files on the host.
  - An envelope that does not fit is named with the numbers (sglang's own refusal when sglang would refuse it).
    With O(fail_when_none=true) the module fails when no envelope fits, with the table in the message.
  - An envelope of the ladder whose C(context_length) is above the target's C(max_position_embeddings)
    (C(text_config) read when the checkpoint nests it) is refused before anything else, naming the envelope, the
    value and the model's limit (C(plugins/module_utils/_plan/validation_rules.py) C(context_length_errors)); sglang
    would refuse it at start unless the envelope's environment sets C(SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN).
  - Read-only; supports check mode.
options:
  model_path:
    description: Directory of the target model (its C(config.json) is read unless O(target_config) is given).
    type: path
    required: true
  draft_model_path:
    description: Directory of the draft model; read when O(speculative_algorithm) is V(DFLASH) or V(DDTREE).
    type: path
    default: ''
  target_config:
    description: The target's C(config.json) as read already (the host facts); then nothing is read on the host.
    type: dict
  draft_config:
    description: The draft's C(config.json) as read already (the host facts).
    type: dict
  gpus:
    description:
      - The selected GPUs, each with C(memory_total_mb) and C(memory_free_mb) (MiB), as
        M(specdec.sglang.sglang_host_facts) (or M(specdec.sglang.nvidia_gpu_facts)) returns them; the first
        O(tp_size) are planned.
    type: list
    elements: dict
    required: true
  tp_size:
    description: Tensor-parallel size.
    type: int
    default: 1
  envelopes:
    description: The envelopes by name (C(sglang_service_envelopes)).
    type: dict
    required: true
  ladder:
    description: The envelope names, in ladder order (C(sglang_service_envelope_ladder)).
    type: list
    elements: str
    required: true
  speculative_algorithm:
    description: V(DFLASH), V(DDTREE), or empty for the target alone.
    type: str
    default: ''
  num_draft_tokens:
    description: DFLASH verify tokens per request (the block size).
    type: int
    default: 16
  ddtree_budget:
    description: DDTree tree budget N (nodes verified per request); V(0) is the patch set's default, 2 x block size.
    type: int
    default: 0
  extra_flags:
    description: The extra launch flags (C(sglang_service_extra_flags)); C(--disable-radix-cache),
      C(--disable-overlap-schedule), C(--mamba-full-memory-ratio) and C(--chunked-prefill-size) change the plan.
    type: list
    elements: str
    default: []
  cuda_context_mb:
    description: Memory (MiB) sglang's process takes before it measures the free memory (CUDA context, torch
      distributed), subtracted from C(memory_free_mb).
    type: float
    default: 768
  fail_when_none:
    description: Fail when no envelope of the ladder fits.
    type: bool
    default: true
notes:
  - Sizes are GiB, as sglang's "GB" in its logs. The prediction was replayed against sglang's own log lines of
    the H200 27B runs within 5% (C(tests/device/records/*/envelopes.json)).
"""

EXAMPLES = r"""
- name: Plan the envelopes for the selected GPUs
  specdec.sglang.sglang_envelope_plan:
    model_path: /models/Qwen3.6-27B
    draft_model_path: /models/Qwen3.6-27B-DFlash
    gpus: "{{ sglang_preflight_gpus_facts | selectattr('uuid', 'in', sglang_preflight_gpu_uuids) | list }}"
    tp_size: 2
    envelopes: "{{ sglang_service_envelopes }}"
    ladder: "{{ sglang_service_envelope_ladder }}"
    speculative_algorithm: DFLASH
    num_draft_tokens: 16
  register: plan
"""

RETURN = r"""
fitting:
  description: The envelopes that fit, in ladder order.
  returned: always
  type: list
  elements: str
  sample: [small]
skipped:
  description: The envelopes that do not fit, in ladder order.
  returned: always
  type: list
  elements: str
  sample: [full]
first_fit:
  description: The first envelope of the ladder that fits, or null.
  returned: always
  type: str
  sample: small
table:
  description: One line per envelope, with the numbers and the reason an envelope does not fit.
  returned: always
  type: list
  elements: str
plans:
  description:
    - One record per envelope - C(name), C(fits), C(reasons), C(warnings), C(error) (sglang's refusal), C(error_class),
      C(weights_gb), C(draft_weights_gb), C(mamba_slots), C(mamba_ssm_gb), C(mamba_conv_gb), C(intermediate_ssm_gb),
      C(intermediate_conv_gb), C(kv_cell_bytes), C(kv_tokens), C(kv_k_gb), C(kv_v_gb), C(draft_kv_gb),
      C(max_running_requests), C(min_viable_mem_fraction) (sglang's printed one), C(min_mem_fraction) (the
      smallest that fits this envelope), C(pre_load_gb), C(slack_gb).
  returned: always
  type: list
  elements: dict
architecture:
  description: V(dense) or V(hybrid_gdn), from the target's config.json.
  returned: always
  type: str
  sample: hybrid_gdn
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._plan.envelope_plan import (  # noqa: E402
    PlanError,
    launch_options,
    plan_ladder,
    role_envelopes,
)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation_rules import context_length_errors  # noqa: E402


def _read_config(module, path: str, variable: str) -> dict:
    file = os.path.join(path, "config.json")
    try:
        with open(file, encoding="utf-8") as handle:
            config = json.load(handle)
    except OSError as exc:
        module.fail_json(
            msg=f"{variable}={path}: cannot read {file} ({exc.strerror}); point {variable} at the model directory"
        )
    except ValueError as exc:
        module.fail_json(msg=f"{variable}={path}: {file} is not JSON ({exc}); the download may be incomplete")
    if not isinstance(config, dict):
        module.fail_json(msg=f"{variable}={path}: {file} holds no JSON object")
    return config


ARGUMENT_SPEC = {
    "model_path": {"type": "path", "required": True},
    "draft_model_path": {"type": "path", "default": ""},
    "target_config": {"type": "dict"},
    "draft_config": {"type": "dict"},
    "gpus": {"type": "list", "elements": "dict", "required": True},
    "tp_size": {"type": "int", "default": 1},
    "envelopes": {"type": "dict", "required": True},
    "ladder": {"type": "list", "elements": "str", "required": True},
    "speculative_algorithm": {"type": "str", "default": ""},
    "num_draft_tokens": {"type": "int", "default": 16, "no_log": False},
    "ddtree_budget": {"type": "int", "default": 0},
    "extra_flags": {"type": "list", "elements": "str", "default": []},
    "cuda_context_mb": {"type": "float", "default": 768},
    "fail_when_none": {"type": "bool", "default": True},
}


def uses_draft(p: dict) -> bool:
    return (p["speculative_algorithm"] or "").upper() in ("DFLASH", "DDTREE")


def plan(p: dict, target: dict, draft) -> tuple[dict, str]:
    """``(result, failure)``: the module's result for the validated parameters ``p`` and both configs; ``failure``
    is the message to fail with ("" when the plan stands)."""
    too_long = context_length_errors(p["envelopes"], p["ladder"], target)
    if too_long:
        return {"changed": False}, "envelope plan: " + " | ".join(too_long)
    algo = (p["speculative_algorithm"] or "").upper()
    try:
        envelopes = role_envelopes(p["envelopes"], p["ladder"], algo, p["num_draft_tokens"], p["ddtree_budget"])
        result = plan_ladder(
            target,
            draft,
            p["gpus"],
            p["tp_size"],
            envelopes,
            cuda_context_mb=p["cuda_context_mb"],
            **launch_options(p["extra_flags"]),
        )
    except PlanError as exc:
        return {"changed": False}, f"envelope plan: {exc}"
    out = {
        "changed": False,
        "fitting": result["fitting"],
        "skipped": [x["name"] for x in result["plans"] if not x["fits"]],
        "first_fit": result["first_fit"],
        "table": result["table"].splitlines(),
        "plans": result["plans"],
        "architecture": result["plans"][0]["architecture"] if result["plans"] else None,
    }
    if p["fail_when_none"] and not result["fitting"]:
        return out, (
            f"no envelope of sglang_service_envelope_ladder={p['ladder']} fits the selected GPUs "
            f"(tp_size={p['tp_size']}): the service is not started. Lower context_length, max_running_requests "
            "or the draft tokens, raise mem_fraction_static where the table allows, or use more GPUs (tp_size).\n"
            + result["table"]
        )
    return out, ""


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    target = p["target_config"] or _read_config(module, p["model_path"], "sglang_service_model_path")
    draft = None
    if uses_draft(p):
        draft = p["draft_config"] or _read_config(module, p["draft_model_path"], "sglang_service_draft_model_path")
    out, failure = plan(p, target, draft)
    if failure:
        module.fail_json(msg=failure, **out)
    module.exit_json(**out)


if __name__ == "__main__":
    main()
