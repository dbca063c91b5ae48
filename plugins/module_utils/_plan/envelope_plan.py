# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Memory envelopes planned before sglang starts (pure, stdlib only).

From the target's and the draft's config.json, the selected GPUs' memory (the host facts' GPUs, as
``nvidia_smi`` reads them: ``memory_total_mb`` / ``memory_free_mb``, MiB), the tensor-parallel size and each
envelope of the ladder, predict what sglang 0.5.17 allocates on one TP rank and whether it starts:

- weights: parameters from the config x dtype bytes, split over the TP ranks (the DFlash draft has
  no embedding / lm_head; its ``fc`` is a plain ``nn.Linear``, replicated on every rank);
- KV bytes per token: the full-attention layers only for a hybrid (``full_attention_interval``),
  KV heads per rank ``max(1, kv_heads // tp)``; a DFLASH/DDTREE draft scales the cell by
  ``(target_layers + draft_layers) / target_layers`` (``scale_kv_cell_size_per_token_for_dflash``);
- mamba state per request: ssm (GDN layers x value heads x key dim x value dim, ``mamba_ssm_dtype``,
  float32 by default) + conv (GDN layers x conv dim x (kernel - 1), bfloat16); speculative verify
  adds one snapshot per draft token: D = the DFLASH block size, or the DDTree tree budget N;
- the pool under sglang's own rule (``kv_cache_configurator._profile_available_bytes``):
  ``rest = available_after_load - pre_load x (1 - mem_fraction_static)``, then the mamba pool
  (``_handle_max_mamba_cache``: slots = max_running_requests with the radix cache disabled, else the
  ``--mamba-full-memory-ratio`` solve), then the KV tokens ``rest // cell``, then
  ``resolve_max_num_reqs`` (capped by ``tokens // 2`` and by the mamba slots / mamba ratio).

sglang's refusals are reproduced with its own wording (the three ``raise`` sites of that file).
The planner refuses one more thing sglang accepts: a KV pool that cannot hold one request of the
envelope's context length. Sizes are GiB, as sglang's "GB" in its logs.
"""

from __future__ import annotations

import math

from ansible_collections.specdec.sglang.plugins.module_utils._plan.model_config import architecture_of, text_config
from ansible_collections.specdec.sglang.plugins.module_utils._plan.speculation_cost import effective_budget

GIB = 1 << 30
MIB = 1 << 20
DTYPE_BYTES = {
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "fp16": 2,
    "bf16": 2,
    "float32": 4,
    "float": 4,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
}
# sglang 0.5.17 mem_cache/kv_cache_configurator.py
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3
MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP = 2
# arg_groups/overrides.py _MAMBA_EXTRA_BUFFER_ARCHS (the GDN ones): with the radix cache on, the
# overlap schedule on and the triton linear-attention backend, "auto" resolves to extra_buffer.
MAMBA_EXTRA_BUFFER_ARCHS = (
    "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration",
    "Qwen3NextForCausalLM",
)
DEFAULT_MAMBA_FULL_MEMORY_RATIO = 0.9
SPECULATIVE = ("DFLASH", "DDTREE")
# Allocated between "Load weight end" and the memory profile: on the H200 27B run the load used
# 50.16 GB and the profile saw 1 - 0.5250 of 95.61 GB available, i.e. 0.035 GB more.
LOAD_OVERHEAD_GIB = 0.05


class PlanError(ValueError):
    """The inputs cannot be planned (a config without the fields sglang needs, no GPU, ...)."""


def _int(cfg: dict, key: str, default=None, what: str = "config.json") -> int:
    value = cfg.get(key, default)
    if value is None:
        raise PlanError(f"{what} has no {key!r}: the planner needs it to size the model")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise PlanError(f"{what} {key}={value!r} is not an integer") from None


def _dtype_bytes(name, default: int = 2) -> int:
    if name in (None, "", "auto"):
        return default
    text = str(name).replace("torch.", "").lower()
    if text not in DTYPE_BYTES:
        raise PlanError(f"dtype {name!r} is not one the planner knows; use one of {', '.join(sorted(DTYPE_BYTES))}")
    return DTYPE_BYTES[text]


def _split(n: int, tp: int) -> float:
    return n / tp


# --------------------------------------------------------------------------------------------
# geometry
# --------------------------------------------------------------------------------------------
def target_geometry(config: dict) -> dict:
    """Layer layout, heads and dtypes of a target model from its config.json (text_config nested)."""
    if not isinstance(config, dict) or not config:
        raise PlanError("the target's config.json is empty or not a JSON object")
    text = text_config(config)
    what = "target config.json" + (" text_config" if text is not config else "")
    arch = architecture_of(config)
    layers = _int(text, "num_hidden_layers", what=what)
    hidden = _int(text, "hidden_size", what=what)
    heads = _int(text, "num_attention_heads", what=what)
    kv_heads = _int(text, "num_key_value_heads", heads, what=what)
    head_dim = _int(text, "head_dim", hidden // heads, what=what)
    geo = {
        "architecture": arch,
        "class": (config.get("architectures") or [None])[0],
        "layers": layers,
        "hidden": hidden,
        "intermediate": _int(text, "intermediate_size", what=what),
        "vocab": _int(text, "vocab_size", config.get("vocab_size"), what=what),
        "heads": heads,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "v_head_dim": int(text.get("v_head_dim") or head_dim),
        "attn_output_gate": bool(text.get("attn_output_gate", False)),
        "attention_bias": bool(text.get("attention_bias", False)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
        "dtype_bytes": _dtype_bytes(
            text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype") or config.get("dtype")
        ),
        "max_position_embeddings": int(text.get("max_position_embeddings") or 0),
        "rotary_dim": int(head_dim * float(text.get("partial_rotary_factor") or 1.0)),
        "vision": config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None,
    }
    if arch == "hybrid_gdn":
        interval = _int(text, "full_attention_interval", what=what)
        full = [i for i in range(layers) if (i + 1) % interval == 0]  # sglang: layer_types is dropped
        geo.update(
            full_layers=len(full),
            linear_layers=layers - len(full),
            linear_key_heads=_int(text, "linear_num_key_heads", what=what),
            linear_value_heads=_int(text, "linear_num_value_heads", what=what),
            linear_key_head_dim=_int(text, "linear_key_head_dim", what=what),
            linear_value_head_dim=_int(text, "linear_value_head_dim", what=what),
            linear_conv_kernel_dim=_int(text, "linear_conv_kernel_dim", 4, what=what),
            ssm_bytes=_dtype_bytes(text.get("mamba_ssm_dtype") or config.get("mamba_ssm_dtype"), default=4),
            conv_bytes=2,
        )
    else:
        geo.update(full_layers=layers, linear_layers=0)
    return geo


def draft_geometry(config: dict) -> dict:
    """A DFlash draft (``DFlashDraftModel``): decoder layers, fc over the target layers, no embedding."""
    if not isinstance(config, dict) or not config:
        raise PlanError("the draft's config.json is empty or not a JSON object")
    what = "draft config.json"
    hidden = _int(config, "hidden_size", what=what)
    heads = _int(config, "num_attention_heads", what=what)
    layers = _int(config, "num_hidden_layers", what=what)
    dflash = config.get("dflash_config") if isinstance(config.get("dflash_config"), dict) else {}
    target_ids = dflash.get("target_layer_ids") or config.get("target_layer_ids") or list(range(layers))
    return {
        "class": (config.get("architectures") or [None])[0],
        "layers": layers,
        "hidden": hidden,
        "intermediate": _int(config, "intermediate_size", what=what),
        "heads": heads,
        "kv_heads": _int(config, "num_key_value_heads", heads, what=what),
        "head_dim": _int(config, "head_dim", hidden // heads, what=what),
        "attention_bias": bool(config.get("attention_bias", False)),
        "context_features": len(target_ids),
        "block_size": int(config.get("block_size") or dflash.get("block_size") or 16),
        "dtype_bytes": _dtype_bytes(config.get("torch_dtype") or config.get("dtype")),
    }


def _attention_params(hidden, heads, kv_heads, head_dim, tp, *, gate=False, bias=False) -> float:
    q_out = heads * head_dim * (2 if gate else 1)
    kv_rank = max(1, kv_heads // tp) if kv_heads < tp else kv_heads / tp
    per_rank = hidden * q_out / tp + 2 * hidden * kv_rank * head_dim + heads * head_dim * hidden / tp
    if bias:
        per_rank += q_out / tp + 2 * kv_rank * head_dim
    return per_rank + 2 * head_dim  # q_norm, k_norm


def _vision_params(vision: dict, tp: int) -> float:
    """Qwen3-VL style vision tower: patch embed, blocks, merger (+ deepstack mergers)."""
    h = int(vision.get("hidden_size") or 0)
    if h <= 0:
        return 0.0
    inter = int(vision.get("intermediate_size") or 4 * h)
    depth = int(vision.get("depth") or vision.get("num_hidden_layers") or 0)
    patch = int(vision.get("patch_size") or 16)
    temporal = int(vision.get("temporal_patch_size") or 2)
    channels = int(vision.get("in_channels") or vision.get("in_chans") or 3)
    merge = int(vision.get("spatial_merge_size") or 2)
    out = int(vision.get("out_hidden_size") or h)
    positions = int(vision.get("num_position_embeddings") or 0)
    block = (3 * h * h + 3 * h) + (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h
    merged = h * merge * merge
    merger = 2 * merged + merged * merged + merged + merged * out + out
    deepstack = len(vision.get("deepstack_visual_indexes") or [])
    total = channels * temporal * patch * patch * h + h + positions * h + depth * block + (1 + deepstack) * merger
    return total / tp


def target_weight_bytes(geo: dict, tp: int) -> float:
    """Bytes of the target's weights on one TP rank."""
    h, inter, vocab = geo["hidden"], geo["intermediate"], geo["vocab"]
    params = vocab * h / tp * (1 if geo["tie_word_embeddings"] else 2) + h  # embed (+ lm_head), final norm
    mlp = 3 * h * inter / tp
    norms = 2 * h
    attn = _attention_params(
        h, geo["heads"], geo["kv_heads"], geo["head_dim"], tp, gate=geo["attn_output_gate"], bias=geo["attention_bias"]
    )
    params += geo["full_layers"] * (attn + mlp + norms)
    if geo["linear_layers"]:
        key_dim = geo["linear_key_heads"] * geo["linear_key_head_dim"]
        value_dim = geo["linear_value_heads"] * geo["linear_value_head_dim"]
        conv_dim = 2 * key_dim + value_dim
        gdn = (
            h * (2 * key_dim + 2 * value_dim) / tp  # in_proj_qkvz
            + h * 2 * geo["linear_value_heads"] / tp  # in_proj_ba
            + conv_dim * geo["linear_conv_kernel_dim"] / tp  # conv1d
            + 2 * geo["linear_value_heads"] / tp  # A_log, dt_bias
            + geo["linear_value_head_dim"]  # gated norm
            + value_dim * h / tp  # out_proj
        )
        params += geo["linear_layers"] * (gdn + mlp + norms)
    if geo["vision"] and str(geo["class"] or "").endswith("ForConditionalGeneration"):
        params += _vision_params(geo["vision"], tp)
    # the rotary cos/sin cache (float32, max positions x rotary dim) is part of sglang's "mem usage"
    rotary_cache = geo["max_position_embeddings"] * geo["rotary_dim"] * 4
    return params * geo["dtype_bytes"] + rotary_cache


def draft_weight_bytes(draft: dict, tp: int) -> float:
    """Bytes of a DFlash draft's weights on one TP rank (no embedding, no lm_head; fc replicated)."""
    h = draft["hidden"]
    attn = _attention_params(h, draft["heads"], draft["kv_heads"], draft["head_dim"], tp, bias=draft["attention_bias"])
    layer = attn + 3 * h * draft["intermediate"] / tp + 2 * h
    params = draft["layers"] * layer + draft["context_features"] * h * h + 2 * h
    return params * draft["dtype_bytes"]


def kv_cell_bytes(geo: dict, tp: int, kv_dtype_bytes: int | None = None) -> int:
    """KV bytes per token on one rank, target only (full-attention layers of a hybrid)."""
    kv_rank = max(1, geo["kv_heads"] // tp)
    return int(
        kv_rank * (geo["head_dim"] + geo["v_head_dim"]) * geo["full_layers"] * (kv_dtype_bytes or geo["dtype_bytes"])
    )


def mamba_per_request(geo: dict, tp: int) -> dict:
    """Per-request recurrent state on one rank: ``{ssm, conv, total}`` bytes (all GDN layers)."""
    if not geo["linear_layers"]:
        return {"ssm": 0, "conv": 0, "total": 0, "ssm_layer": 0, "conv_dim": 0}
    heads = geo["linear_value_heads"] // tp
    ssm_layer = heads * geo["linear_value_head_dim"] * geo["linear_key_head_dim"] * geo["ssm_bytes"]
    conv_dim = (
        2 * geo["linear_key_heads"] * geo["linear_key_head_dim"]
        + geo["linear_value_heads"] * geo["linear_value_head_dim"]
    ) // tp
    conv_layer = conv_dim * (geo["linear_conv_kernel_dim"] - 1) * geo["conv_bytes"]
    n = geo["linear_layers"]
    return {
        "ssm": n * ssm_layer,
        "conv": n * conv_layer,
        "total": n * (ssm_layer + conv_layer),
        "ssm_layer": ssm_layer,
        "conv_dim": conv_dim,
    }


# --------------------------------------------------------------------------------------------
# sglang's rule, one envelope
# --------------------------------------------------------------------------------------------
def mamba_ratio(geo: dict, disable_radix_cache: bool, disable_overlap_schedule: bool = False) -> int:
    """Mamba state slots per running request (``_calculate_mamba_ratio``): 1 without the radix cache,
    3 for ``no_buffer``, 3 + 2 for the ``extra_buffer`` ping-pong that "auto" picks for the
    extra-buffer classes when the overlap schedule is on."""
    if disable_radix_cache:
        return 1
    ratio = MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
    if geo.get("class") in MAMBA_EXTRA_BUFFER_ARCHS and not disable_overlap_schedule:
        ratio += MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP
    return ratio


def draft_tokens_of(envelope: dict, draft: dict | None) -> int:
    """D: verify tokens per request (DFLASH block size; DDTREE tree budget N, 0 = the set's default, 2 x block)."""
    algo = (envelope.get("algorithm") or "").upper()
    if algo not in SPECULATIVE:
        return 0
    block = int((draft or {}).get("block_size") or 16)
    n = int(envelope.get("num_draft_tokens") or 0)
    if algo == "DDTREE":
        return effective_budget(algo, block, n)
    return n or block


def sglang_memory(  # noqa: C901, PLR0912, PLR0915  (sglang's own sequence, kept in one place)
    geo: dict,
    draft: dict | None,
    envelope: dict,
    *,
    tp: int,
    pre_load_gib: float,
    total_gib: float,
    disable_radix_cache: bool = False,
    disable_overlap_schedule: bool = False,
    mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    kv_dtype_bytes: int | None = None,
    page_size: int = 1,
    load_overhead_gib: float = LOAD_OVERHEAD_GIB,
) -> dict:
    """What sglang computes for one envelope on one rank (the rule above); ``error`` is its refusal, verbatim."""
    mem = float(envelope["mem_fraction_static"])
    algo = (envelope.get("algorithm") or "").upper() or None
    spec = algo in SPECULATIVE and draft is not None
    d_tokens = draft_tokens_of(envelope, draft) if spec else 0
    requested = envelope.get("max_running_requests")
    requested = int(requested) if requested not in (None, "", 0) else None
    context_len = int(envelope.get("context_length") or 0) or geo["max_position_embeddings"] or 32768
    weights = target_weight_bytes(geo, tp)
    draft_weights = draft_weight_bytes(draft, tp) if spec else 0.0
    available = pre_load_gib - (weights + draft_weights) / GIB - load_overhead_gib
    slack = pre_load_gib * (1 - mem)
    rest = available - slack
    out = {
        "algorithm": algo,
        "context_length": context_len,
        "mem_fraction_static": mem,
        "requested_max_running_requests": requested,
        "cuda_graph": bool(envelope.get("cuda_graph", True)),
        "draft_tokens": d_tokens,
        "pre_load_gb": pre_load_gib,
        "weights_gb": weights / GIB,
        "draft_weights_gb": draft_weights / GIB,
        "available_after_load_gb": available,
        "slack_gb": slack,
        "min_viable_mem_fraction": 1 - available / pre_load_gib,
        "mamba_slots": None,
        "mamba_ssm_gb": 0.0,
        "mamba_conv_gb": 0.0,
        "intermediate_ssm_gb": 0.0,
        "intermediate_conv_gb": 0.0,
        "mamba_reserved_gb": 0.0,
        "kv_cell_bytes": None,
        "kv_tokens": None,
        "kv_k_gb": None,
        "kv_v_gb": None,
        "draft_kv_gb": None,
        "max_running_requests": None,
        "capped_by_mamba": False,
        "error": None,
        "error_class": None,
    }
    per = mamba_per_request(geo, tp)
    ratio = mamba_ratio(geo, disable_radix_cache, disable_overlap_schedule)
    if geo["linear_layers"]:
        per_req = per["total"]
        if spec and requested is None:
            raise PlanError("a speculative hybrid envelope needs max_running_requests (sglang asserts it is set)")
        if disable_radix_cache and requested is not None:
            slots = requested
            if spec:
                rest -= per_req * (slots + 1) * d_tokens / GIB
        else:
            budget = rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio) * GIB
            if spec:
                slots = int((budget - per_req * (1 + d_tokens)) // (per_req * (1 + d_tokens / ratio)))
                capped = min(requested, slots // ratio)
                rest -= per_req * (capped + 1) * d_tokens / GIB
            else:
                slots = int((budget - per_req) // per_req)
        out["mamba_slots"] = slots
        if slots <= 0:
            out["error_class"] = "hybrid_state_no_memory"
            out["error"] = (
                "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
                f"Computed max_mamba_cache_size={slots} (total_rest_memory={rest:.2f} GB, "
                f"mamba_cache_per_req={per_req / MIB:.2f} MB). Try: (1) reduce --max-running-requests, "
                "(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
                "(4) use GPUs with more memory."
            )
            return out
        out["mamba_ssm_gb"] = (slots + 1) * per["ssm"] / GIB
        out["mamba_conv_gb"] = (slots + 1) * per["conv"] / GIB
        rest -= (slots + 1) * per_req / GIB
    if rest <= 0:
        minimum = 1 - available / pre_load_gib
        out["error_class"] = "oom_mem_fraction"
        out["error"] = (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={mem}. Raise --mem-fraction-static above "
            f"{math.ceil(minimum * 1000) / 1000:.3f} (minimum viable = 1 - available/pre = {minimum:.4f}). "
            "If using speculative decoding, draft weights are now counted."
        )
        return out
    target_cell = kv_cell_bytes(geo, tp, kv_dtype_bytes)
    cell = target_cell
    if spec and geo["full_layers"] > 0:
        t_layers, d_layers = geo["full_layers"], draft["layers"]
        cell = (target_cell * (t_layers + d_layers) + t_layers - 1) // t_layers
    tokens = int(rest * GIB // cell) // page_size * page_size
    out.update(
        kv_cell_bytes=cell,
        kv_tokens=tokens,
        kv_k_gb=tokens * target_cell / 2 / GIB,
        kv_v_gb=tokens * target_cell / 2 / GIB,
        draft_kv_gb=tokens * (cell - target_cell) / GIB,
    )
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    max_reqs = min(requested, tokens // 2) if requested is not None else min(estimated, tokens // 2)
    if geo["linear_layers"]:
        cap = out["mamba_slots"] // ratio
        if cap < max_reqs:
            out["capped_by_mamba"] = True
            max_reqs = cap
        if max_reqs <= 0:
            out["error_class"] = "hybrid_state_too_small"
            out["error"] = (
                "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                f"max_mamba_cache_size={out['mamba_slots']}, mamba_ratio={ratio}, resulting max_num_reqs={max_reqs}. "
                "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
                "(3) use GPUs with more memory."
            )
            return out
        if spec:
            k = geo["linear_conv_kernel_dim"]
            n = geo["linear_layers"]
            columns = d_tokens * (k - 1) if algo == "DDTREE" else d_tokens + k - 2  # tree: dense; chain: dedup
            out["intermediate_ssm_gb"] = n * (max_reqs + 1) * d_tokens * per["ssm_layer"] / GIB
            out["intermediate_conv_gb"] = n * (max_reqs + 1) * per["conv_dim"] * columns * geo["conv_bytes"] / GIB
    out["mamba_reserved_gb"] = (
        out["mamba_ssm_gb"] + out["mamba_conv_gb"] + out["intermediate_ssm_gb"] + out["intermediate_conv_gb"]
    )
    out["max_running_requests"] = max_reqs
    return out


def runtime_reserve_gib(envelope: dict, tp: int, draft_tokens: int, chunked_prefill_size: int = 8192) -> float:
    """Headroom the runtime needs above the static pool (activations, CUDA graphs), GiB; a warning.

    Calibrated on the H200 27B run (headroom 11.47 GB, 8.38 GB left after capturing the graphs at
    16 requests: ~3.1 GB): 1 GiB + a chunked prefill of activations at 0.25 MiB per token, plus
    ``reserve_for_graph_mb``'s decode share (2 MiB per captured batch entry) with graphs on, plus
    sglang's ``tp/8`` GiB of communication buffers.
    """
    tokens = max(chunked_prefill_size, 2048)
    reserve_mb = 1024 + tokens * 0.25 + tp / 8 * 1024
    if envelope.get("cuda_graph", True):
        max_bs = int(envelope.get("max_running_requests") or 160)
        reserve_mb += max_bs * max(1, draft_tokens) * 2
    return reserve_mb / 1024


def plan_envelope(
    target_config: dict,
    draft_config: dict | None,
    gpus: list[dict],
    tp_size: int,
    envelope: dict,
    *,
    cuda_context_mb: float = 0.0,
    disable_radix_cache: bool = False,
    disable_overlap_schedule: bool = False,
    mamba_full_memory_ratio: float = DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    chunked_prefill_size: int = 8192,
) -> dict:
    """One envelope: sglang's numbers, ``fits`` and ``reasons`` (in numbers), ``min_mem_fraction``."""
    tp = int(tp_size)
    if tp < 1:
        raise PlanError(f"tp_size={tp_size} must be >= 1")
    if len(gpus) < tp:
        raise PlanError(f"tp_size={tp} needs {tp} GPUs, {len(gpus)} selected")
    chosen = gpus[:tp]
    free_mib = min(float(g["memory_free_mb"]) for g in chosen)
    total_mib = min(float(g.get("memory_total_mb") or g["memory_free_mb"]) for g in chosen)
    pre = (free_mib - cuda_context_mb) / 1024
    geo = target_geometry(target_config)
    algo = (envelope.get("algorithm") or "").upper()
    draft = draft_geometry(draft_config) if (algo in SPECULATIVE and draft_config) else None
    if algo in SPECULATIVE and draft is None:
        raise PlanError(f"algorithm {algo} needs the draft's config.json")
    kwargs = {
        "tp": tp,
        "pre_load_gib": pre,
        "total_gib": total_mib / 1024,
        "disable_radix_cache": disable_radix_cache,
        "disable_overlap_schedule": disable_overlap_schedule,
        "mamba_full_memory_ratio": mamba_full_memory_ratio,
    }
    mem = sglang_memory(geo, draft, envelope, **kwargs)
    reasons: list[str] = []
    warnings: list[str] = []
    if mem["error"]:
        reasons.append(f"sglang refuses it at start-up: {mem['error']}")
    elif mem["kv_tokens"] < mem["context_length"]:
        reasons.append(
            f"the KV pool holds {mem['kv_tokens']} tokens, fewer than one request of context_length "
            f"{mem['context_length']} (rest {mem['kv_tokens'] * mem['kv_cell_bytes'] / GIB:.2f} GB at "
            f"{mem['kv_cell_bytes']} bytes per token)"
        )
    if not reasons:
        req = mem["requested_max_running_requests"]
        if req is not None and mem["max_running_requests"] < req:
            why = "the mamba state cache" if mem["capped_by_mamba"] else "the KV pool"
            warnings.append(f"max_running_requests {req} is capped to {mem['max_running_requests']} by {why}")
        reserve = runtime_reserve_gib(envelope, tp, mem["draft_tokens"], chunked_prefill_size)
        if mem["slack_gb"] < reserve:
            warnings.append(
                f"headroom {mem['slack_gb']:.2f} GB (pre-load x (1 - mem_fraction_static)) is below the "
                f"~{reserve:.2f} GB the runtime needs for activations{' and CUDA graphs' if mem['cuda_graph'] else ''}"
            )
    mem.update(
        fits=not reasons,
        reasons=reasons,
        warnings=warnings,
        architecture=geo["architecture"],
        tp_size=tp,
        gpu_total_gb=total_mib / 1024,
        gpu_free_gb=free_mib / 1024,
        min_mem_fraction=_min_fraction(geo, draft, envelope, kwargs),
    )
    return mem


def _fits(geo, draft, envelope, kwargs, fraction) -> bool:
    trial = dict(envelope, mem_fraction_static=fraction)
    mem = sglang_memory(geo, draft, trial, **kwargs)
    return mem["error"] is None and mem["kv_tokens"] >= mem["context_length"]


def _min_fraction(geo, draft, envelope, kwargs) -> float | None:
    """The smallest mem_fraction_static (3 decimals, rounded up) at which the envelope fits, or None."""
    lo, hi = 0.0, 0.999
    if not _fits(geo, draft, envelope, kwargs, hi):
        return None
    for _halving in range(40):
        mid = (lo + hi) / 2
        if _fits(geo, draft, envelope, kwargs, mid):
            hi = mid
        else:
            lo = mid
    return math.ceil(hi * 1000) / 1000


def plan_ladder(target_config, draft_config, gpus, tp_size, envelopes, **kwargs) -> dict:
    """Every envelope in ladder order: ``{plans, fitting, first_fit, table}``.

    ``envelopes`` is a list of ``{name, context_length, mem_fraction_static, max_running_requests,
    cuda_graph, algorithm, num_draft_tokens}``.
    """
    plans = []
    for env in envelopes:
        plan = plan_envelope(target_config, draft_config, gpus, tp_size, env, **kwargs)
        plan["name"] = env.get("name", "")
        plans.append(plan)
    fitting = [p["name"] for p in plans if p["fits"]]
    return {
        "plans": plans,
        "fitting": fitting,
        "first_fit": fitting[0] if fitting else None,
        "table": format_table(plans),
    }


def _gb(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def format_table(plans: list[dict]) -> str:
    """A table an operator reads: one row per envelope, GB = GiB as sglang logs them."""
    head = (
        "envelope", "fits", "ctx", "mem", "req", "algo", "D", "free GB", "weights", "draft w", "mamba",
        "spec snap", "KV tokens", "KV GB", "max req", "min mem", "why not / warnings",
    )  # fmt: skip
    rows = [head]
    for p in plans:
        kv_gb = None if p["kv_tokens"] is None else (p["kv_k_gb"] + p["kv_v_gb"] + p["draft_kv_gb"])
        note = "; ".join(p["reasons"] + p["warnings"])
        rows.append(
            (
                p.get("name", ""),
                "yes" if p["fits"] else "NO",
                str(p["context_length"]),
                f"{p['mem_fraction_static']:.3f}",
                "-" if p["requested_max_running_requests"] is None else str(p["requested_max_running_requests"]),
                p["algorithm"] or "none",
                str(p["draft_tokens"]),
                _gb(p["pre_load_gb"]),
                _gb(p["weights_gb"]),
                _gb(p["draft_weights_gb"]),
                _gb(p["mamba_ssm_gb"] + p["mamba_conv_gb"]),
                _gb(p["intermediate_ssm_gb"] + p["intermediate_conv_gb"]),
                "-" if p["kv_tokens"] is None else str(p["kv_tokens"]),
                _gb(kv_gb),
                "-" if p["max_running_requests"] is None else str(p["max_running_requests"]),
                "-" if p["min_mem_fraction"] is None else f"{p['min_mem_fraction']:.3f}",
                note,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    lines = []
    for r in rows:
        lines.append(" | ".join(c.ljust(w) for c, w in zip(r[:-1], widths)) + " | " + r[-1])
    return "\n".join(lines)


def role_envelopes(
    envelopes: dict, ladder: list, algorithm: str | None, num_draft_tokens=None, ddtree_budget=0
) -> list:
    """The ladder of ``sglang_service_envelopes`` as planner envelopes (in ladder order)."""
    algo = (algorithm or "").upper() or None
    if algo == "DDTREE":
        draft_tokens = int(ddtree_budget or 0)  # 0: the patch set's default, sized by draft_tokens_of
    else:
        draft_tokens = int(num_draft_tokens or 0)
    out = []
    for name in ladder:
        if name not in envelopes:
            raise PlanError(
                f"sglang_service_envelope_ladder names {name!r}, which sglang_service_envelopes does not define"
            )
        env = envelopes[name]
        out.append(
            {
                "name": name,
                "context_length": int(env.get("context_length") or 0),
                "mem_fraction_static": float(env["mem_fraction_static"]),
                "max_running_requests": env.get("max_running_requests"),
                "cuda_graph": bool(env.get("cuda_graph", True)),
                "algorithm": algo,
                "num_draft_tokens": draft_tokens,
            }
        )
    return out


def launch_options(extra_flags) -> dict:
    """Planner options a launch flag changes (``--disable-radix-cache``, ``--disable-overlap-schedule``,
    ``--mamba-full-memory-ratio R``, ``--chunked-prefill-size N``)."""
    words = " ".join(str(f) for f in (extra_flags or [])).replace("=", " ").split()
    opts = {
        "disable_radix_cache": "--disable-radix-cache" in words,
        "disable_overlap_schedule": "--disable-overlap-schedule" in words,
    }
    for flag, key, kind in (
        ("--mamba-full-memory-ratio", "mamba_full_memory_ratio", float),
        ("--chunked-prefill-size", "chunked_prefill_size", int),
    ):
        if flag in words and words.index(flag) + 1 < len(words):
            try:
                opts[key] = kind(words[words.index(flag) + 1])
            except ValueError:
                raise PlanError(
                    f"sglang_service_extra_flags: {flag} {words[words.index(flag) + 1]!r} is not a number"
                ) from None
    return opts


def recommend_ladder(target_config, draft_config, gpus, tp_size, shapes, *, max_requests=16, **kwargs) -> list:
    """The planner's answer for a host: each envelope shape with the running requests sglang will really give.

    ``shapes``: ``[{name, context_length, mem_fraction_static, cuda_graph, algorithm, num_draft_tokens}]``.
    For each, ``max_running_requests`` is the largest value up to ``max_requests`` whose envelope fits, lowered
    to what sglang resolves it to (the mamba-state cap, the KV pool): asking for more only moves memory to
    request slots sglang then caps. A shape that fits with no request count is left out.
    """
    answer = []
    for shape in shapes:
        for requests in range(int(max_requests), 0, -1):
            plan = plan_envelope(
                target_config, draft_config, gpus, tp_size, dict(shape, max_running_requests=requests), **kwargs
            )
            if not plan["fits"]:
                continue
            resolved = plan["max_running_requests"]
            if resolved < requests:
                again = plan_envelope(
                    target_config, draft_config, gpus, tp_size, dict(shape, max_running_requests=resolved), **kwargs
                )
                if not again["fits"]:
                    continue
                plan = again
            answer.append(dict(shape, max_running_requests=plan["max_running_requests"], plan=plan))
            break
    return answer
