"""architecture_of: one answer to "dense or hybrid" from a config.json."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan.model_config import (
    architecture_of,
    architecture_reasons,
)

QWEN36_27B = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "text_config": {
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 64,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
    },
    "vision_config": {"depth": 27},
}
DFLASH_DRAFT = {
    "architectures": ["DFlashDraftModel"],
    "model_type": "qwen3",
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    "sliding_window": 2048,
}
DENSE_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 4}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        pytest.param(QWEN36_27B, "hybrid_gdn", id="qwen3.6-27b-multimodal"),
        pytest.param(QWEN36_27B["text_config"], "hybrid_gdn", id="qwen3.6-text-config-alone"),
        pytest.param({"model_type": "qwen3_next"}, "hybrid_gdn", id="qwen3-next-model-type"),
        pytest.param({"model_type": "llama", "full_attention_interval": 4}, "hybrid_gdn", id="interval-key"),
        pytest.param(
            {"model_type": "x", "layer_types": ["linear_attention", "full_attention"]}, "hybrid_gdn", id="layer-types"
        ),
        pytest.param(DENSE_QWEN3, "dense", id="dense-qwen3"),
        pytest.param(DFLASH_DRAFT, "dense", id="draft-sliding-and-full-is-dense"),
        pytest.param({}, "dense", id="empty"),
    ],
)
def test_architecture_of(config, expected):
    assert architecture_of(config) == expected


def test_reasons_name_the_keys_that_made_it_hybrid():
    reasons = architecture_reasons(QWEN36_27B)
    assert "model_type=qwen3_5" in reasons
    assert "text_config.full_attention_interval=4" in reasons
    assert architecture_reasons(DENSE_QWEN3) == []
