# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator's hybrid (Gated-DeltaNet) mode: what sglang 0.5.17 allocates and refuses for such a target.

A config.json with ``full_attention_interval`` and ``linear_*`` fields (nested in ``text_config`` for
the multimodal class) turns it on. Given a GPU memory (``SGLANG_SIM_GPU_MEMORY_MB``, the free MiB
sglang would see before loading), the start-up computes the pools with sglang's own rule
(``kv_cache_configurator._profile_available_bytes`` / ``_handle_max_mamba_cache`` /
``resolve_max_num_reqs``), written here again on purpose, independently of the collection's planner
(``plugins/module_utils/_plan/envelope_plan.py``): the simulator must refuse what sglang refuses, and
``tests/simulator/test_simulator_hybrid.py`` checks that the two agree.
"""

from __future__ import annotations

import math

GIB = 1 << 30
TEXT_CLASS = "Qwen3_5ForCausalLM"
EXTRA_BUFFER = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "Qwen3NextForCausalLM")


def text_of(config: dict) -> dict:
    nested = config.get("text_config")
    return nested if isinstance(nested, dict) and nested else config


def is_hybrid(config: dict) -> bool:
    text = text_of(config)
    return bool(text.get("full_attention_interval")) and bool(text.get("linear_num_value_heads"))


class Pools:
    """sglang's numbers for one launch; ``error`` is the exception line sglang raises (or None)."""

    def __init__(self, config: dict, draft: dict | None, args, gpu_free_mib: float | None):
        t = text_of(config)
        self.architecture = (config.get("architectures") or ["?"])[0]
        tp = max(1, args.tp_size)
        layers, hidden = int(t["num_hidden_layers"]), int(t["hidden_size"])
        interval = int(t["full_attention_interval"])
        self.full = sum(1 for i in range(layers) if (i + 1) % interval == 0)
        self.linear = layers - self.full
        nk, nv = int(t["linear_num_key_heads"]), int(t["linear_num_value_heads"])
        dk, dv = int(t["linear_key_head_dim"]), int(t["linear_value_head_dim"])
        kernel = int(t.get("linear_conv_kernel_dim") or 4)
        ssm_bytes = 2 if str(t.get("mamba_ssm_dtype") or "float32") in ("bfloat16", "float16") else 4
        self.ssm_layer = nv // tp * dv * dk * ssm_bytes
        self.conv_dim = (2 * nk * dk + nv * dv) // tp
        self.conv_layer = self.conv_dim * (kernel - 1) * 2
        self.per_req = self.linear * (self.ssm_layer + self.conv_layer)
        heads = int(t["num_attention_heads"])
        head_dim = int(t.get("head_dim") or hidden // heads)
        kv = max(1, int(t.get("num_key_value_heads") or heads) // tp)
        self.cell = kv * head_dim * 2 * self.full * 2
        self.target_cell = self.cell
        algo = (args.speculative_algorithm or "").upper()
        self.spec = algo in ("DFLASH", "DDTREE") and draft is not None
        self.tree = algo == "DDTREE"
        block = int((draft or {}).get("block_size") or 16)
        self.draft_tokens = (args.speculative_num_draft_tokens or block) if self.spec else 0
        if self.spec and int((draft or {}).get("num_hidden_layers") or 0) > 0:
            d_layers = int(draft["num_hidden_layers"])
            self.cell = (self.cell * (self.full + d_layers) + self.full - 1) // self.full
        self.requested = args.max_running_requests
        self.ratio = 1 if args.disable_radix_cache else (5 if self.architecture in EXTRA_BUFFER else 3)
        self.weights_gib = _weights(t, tp) / GIB + (_vision(config, tp) / GIB if "vision_config" in config else 0.0)
        self.draft_weights_gib = _draft_weights(draft, tp) / GIB if self.spec else 0.0
        self.kernel = kernel
        self.error = None
        self.slots = self.tokens = self.max_reqs = None
        self.capped_warning = None
        if gpu_free_mib is not None:
            self._solve(gpu_free_mib / 1024, float(args.mem_fraction_static or 0.88), args, t)

    def _solve(self, pre: float, mem: float, args, t: dict) -> None:
        available = pre - self.weights_gib - self.draft_weights_gib - 0.05
        rest = available - pre * (1 - mem)
        d = self.draft_tokens
        if args.disable_radix_cache and self.requested:
            self.slots = self.requested
            if self.spec:
                rest -= self.per_req * (self.slots + 1) * d / GIB
        else:
            budget = rest * 0.9 / 1.9 * GIB
            if self.spec:
                self.slots = int((budget - self.per_req * (1 + d)) // (self.per_req * (1 + d / self.ratio)))
                capped = min(self.requested or 0, self.slots // self.ratio)
                rest -= self.per_req * (capped + 1) * d / GIB
            else:
                self.slots = int((budget - self.per_req) // self.per_req)
        if self.slots <= 0:
            self.error = (
                "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
                f"Computed max_mamba_cache_size={self.slots} (total_rest_memory={rest:.2f} GB, "
                f"mamba_cache_per_req={self.per_req / (1 << 20):.2f} MB). Try: (1) reduce --max-running-requests, "
                "(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
                "(4) use GPUs with more memory."
            )
            return
        rest -= (self.slots + 1) * self.per_req / GIB
        if rest <= 0:
            minimum = 1 - available / pre
            self.error = (
                "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                f"--mem-fraction-static={mem}. Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} "  # noqa: E501
                f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, draft weights "
                "are now counted."
            )
            return
        self.tokens = int(rest * GIB // self.cell)
        context = args.context_length or int(t.get("max_position_embeddings") or 32768)
        estimated = max(min(int(self.tokens / context * 512), 4096), 2048)
        reqs = min(self.requested, self.tokens // 2) if self.requested else min(estimated, self.tokens // 2)
        cap = self.slots // self.ratio
        if cap < reqs:
            self.capped_warning = (
                f"max_running_requests is capped to {cap} by the mamba state cache (max_mamba_cache_size={self.slots}, "
                f"{self.ratio} state slots per request). To raise it: increase --mamba-full-memory-ratio or "
                "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16."
            )
            reqs = cap
        if reqs <= 0:
            self.error = (
                "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                f"max_mamba_cache_size={self.slots}, mamba_ratio={self.ratio}, resulting max_num_reqs={reqs}. "
                "Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
                "(3) use GPUs with more memory."
            )
            return
        self.max_reqs = reqs

    def mamba_line(self) -> str:
        slots = self.slots if self.slots is not None else (self.requested or 48) * self.ratio
        conv = (slots + 1) * self.linear * self.conv_layer / GIB
        ssm = (slots + 1) * self.linear * self.ssm_layer / GIB
        line = (
            f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, conv_state size: {conv:.2f}GB, "
            f"ssm_state size: {ssm:.2f}GB "
        )
        if self.spec:
            reqs = (self.max_reqs or self.requested or 48) + 1
            d = self.draft_tokens
            columns = d * (self.kernel - 1) if self.tree else d + self.kernel - 2
            inter_ssm = self.linear * reqs * d * self.ssm_layer / GIB
            inter_conv = self.linear * reqs * self.conv_dim * columns * 2 / GIB
            line += (
                f"intermediate_ssm_state_cache size: {inter_ssm:.2f}GB "
                f"intermediate_conv_window_cache size: {inter_conv:.2f}GB "
            )
        return line

    def kv_line(self, fallback_tokens: int) -> tuple[int, str]:
        tokens = self.tokens if self.tokens is not None else fallback_tokens
        size = tokens * self.target_cell / 2 / GIB
        return tokens, f"KV Cache is allocated. #tokens: {tokens}, K size: {size:.2f} GB, V size: {size:.2f} GB"


def _weights(t: dict, tp: int) -> float:
    h, inter, vocab = int(t["hidden_size"]), int(t["intermediate_size"]), int(t["vocab_size"])
    layers, interval = int(t["num_hidden_layers"]), int(t["full_attention_interval"])
    heads, kv = int(t["num_attention_heads"]), int(t.get("num_key_value_heads") or t["num_attention_heads"])
    hd = int(t.get("head_dim") or h // heads)
    full = sum(1 for i in range(layers) if (i + 1) % interval == 0)
    gate = 2 if t.get("attn_output_gate") else 1
    attn = (h * heads * hd * gate + 2 * h * kv * hd + heads * hd * h) / tp
    nk, nv = int(t["linear_num_key_heads"]), int(t["linear_num_value_heads"])
    dk, dv = int(t["linear_key_head_dim"]), int(t["linear_value_head_dim"])
    gdn = (h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + (2 * nk * dk + nv * dv) * 4 + nv * dv * h) / tp
    mlp = 3 * h * inter / tp
    embed = vocab * h * (1 if t.get("tie_word_embeddings") else 2) / tp
    rotary = int(t.get("max_position_embeddings") or 0) * int(hd * float(t.get("partial_rotary_factor") or 1)) * 4
    return (embed + full * (attn + mlp) + (layers - full) * (gdn + mlp)) * 2 + rotary


def _vision(config: dict, tp: int) -> float:
    v = config.get("vision_config") or {}
    h = int(v.get("hidden_size") or 0)
    if not h or not str((config.get("architectures") or [""])[0]).endswith("ForConditionalGeneration"):
        return 0.0
    inter, depth, merge = (
        int(v.get("intermediate_size") or 4 * h),
        int(v.get("depth") or 0),
        int(v.get("spatial_merge_size") or 2),
    )
    out = int(v.get("out_hidden_size") or h)
    merged = h * merge * merge
    params = depth * (4 * h * h + 2 * h * inter) + merged * merged + merged * out
    params += int(v.get("num_position_embeddings") or 0) * h + 3 * 2 * 16 * 16 * h
    return params * 2 / tp


def _draft_weights(draft: dict | None, tp: int) -> float:
    if not draft:
        return 0.0
    h, layers = int(draft["hidden_size"]), int(draft["num_hidden_layers"])
    heads = int(draft["num_attention_heads"])
    kv, hd = int(draft.get("num_key_value_heads") or heads), int(draft.get("head_dim") or h // heads)
    per_layer = (2 * h * heads * hd + 2 * h * kv * hd + 3 * h * int(draft["intermediate_size"])) / tp
    features = len((draft.get("dflash_config") or {}).get("target_layer_ids") or [0] * layers)
    return (layers * per_layer + features * h * h) * 2
