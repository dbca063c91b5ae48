# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a model's ``config.json`` says about its architecture. Pure functions, stdlib only.

One owner for "is this target dense or hybrid": the deploy plan's capability check (patch sets
declare the architectures they serve) and the envelope planner both call ``architecture_of``.

- ``dense``: every layer is attention (Qwen3, Llama, ...).
- ``hybrid_gdn``: attention layers interleaved with Gated-DeltaNet (linear attention / recurrent
  state) layers, such as Qwen3.5 / Qwen3.6 (``model_type`` ``qwen3_5``, text config ``qwen3_5_text``)
  and Qwen3-Next. sglang lays the layers out from ``full_attention_interval``.

A multimodal config keeps the language model under ``text_config``; both levels are read.
"""

from __future__ import annotations

DENSE = "dense"
HYBRID_GDN = "hybrid_gdn"
ARCHITECTURES = (DENSE, HYBRID_GDN)

# model_type values whose layers are hybrid (GDN + attention), at the top or in text_config.
HYBRID_MODEL_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text", "qwen3_next")
# Keys only a hybrid (linear-attention) config carries.
HYBRID_KEYS = (
    "full_attention_interval",
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
# layer_types values of a linear-attention (recurrent) layer.
LINEAR_LAYER_TYPES = ("linear_attention", "gated_deltanet", "mamba", "linear")


def _levels(config: dict) -> list[dict]:
    levels = [config] if isinstance(config, dict) else []
    text = config.get("text_config") if isinstance(config, dict) else None
    if isinstance(text, dict):
        levels.append(text)
    return levels


def text_config(config: dict) -> dict:
    """The text backbone's config: ``text_config`` when the checkpoint nests it, else the config."""
    nested = config.get("text_config") if isinstance(config, dict) else None
    return nested if isinstance(nested, dict) and nested else (config if isinstance(config, dict) else {})


def architecture_reasons(config: dict) -> list[str]:
    """Why ``config`` is hybrid (each a short ``key=value`` phrase); [] for a dense model."""
    reasons: list[str] = []
    for level, name in zip(_levels(config), ("", "text_config.")):
        model_type = str(level.get("model_type") or "")
        if model_type in HYBRID_MODEL_TYPES:
            reasons.append(f"{name}model_type={model_type}")
        for key in HYBRID_KEYS:
            if level.get(key) not in (None, "", 0):
                reasons.append(f"{name}{key}={level.get(key)}")
        layer_types = level.get("layer_types")
        if isinstance(layer_types, list):
            linear = sorted({str(t) for t in layer_types if str(t) in LINEAR_LAYER_TYPES})
            if linear:
                reasons.append(f"{name}layer_types has {', '.join(linear)}")
    return reasons


def architecture_of(config: dict) -> str:
    """``dense`` or ``hybrid_gdn`` for a model's parsed ``config.json``.

    Hybrid when a level (the top or ``text_config``) has a hybrid ``model_type``, a linear-attention
    key (``full_attention_interval``, ``linear_num_value_heads``, ...) or linear layers in
    ``layer_types``. A draft's ``layer_types`` of sliding and full attention layers stays dense.
    """
    return HYBRID_GDN if architecture_reasons(config) else DENSE
