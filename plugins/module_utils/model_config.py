# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a model's config.json says about its architecture (pure, stdlib only).

``architecture_of(config)`` is the one answer to "dense or hybrid Gated-DeltaNet": sglang
0.5.17 builds its layer layout for the Qwen3-Next / Qwen3.5 family from
``full_attention_interval`` (``layer_types`` is parsed and dropped), with the GDN state sized
from the ``linear_*`` fields; a multimodal checkpoint keeps those in ``text_config``.
"""

from __future__ import annotations

# model_type values of sglang 0.5.17's hybrid GDN config classes (configs/qwen3_next.py, qwen3_5.py).
HYBRID_GDN_MODEL_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")


def text_config(config: dict) -> dict:
    """The text backbone's config: ``text_config`` when the checkpoint nests it, else the config."""
    nested = config.get("text_config") if isinstance(config, dict) else None
    return nested if isinstance(nested, dict) and nested else (config if isinstance(config, dict) else {})


def architecture_of(config: dict) -> str:
    """``hybrid_gdn`` for a Gated-DeltaNet hybrid (Qwen3-Next / Qwen3.5 layout), else ``dense``."""
    text = text_config(config)
    model_types = {str(text.get("model_type") or ""), str((config or {}).get("model_type") or "")}
    has_gdn_fields = (
        int(text.get("full_attention_interval") or 0) > 0 and int(text.get("linear_num_value_heads") or 0) > 0
    )
    if has_gdn_fields or (model_types & set(HYBRID_GDN_MODEL_TYPES) and text.get("full_attention_interval")):
        return "hybrid_gdn"
    return "dense"
