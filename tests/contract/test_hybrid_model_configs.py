"""Contract: the device's tiny hybrid pair and the 27B geometry parse with sglang 0.5.17's own config code.

The configs are build_tiny_models.py's (the one owner of the device models' geometry): the tiny
pair of build_hybrid_pair and the real 27B geometry of the dummy-weight runs. They go through the
real sglang 0.5.17 files (Qwen3_5Config and its text / vision configs, the GDN state shapes of
mamba_utils, the DFlash draft-config parser of dflash_utils) on the transformers sglang 0.5.17 pins
(5.12.1, fetched by scripts/fetch-transformers into .cache/: ~160 MB and ~40 s once; no torch),
in a subprocess (tests/contract/sglang_config_probe.py says what it stands in for). The state bytes
per request are checked against what sglang printed on the H200 for the same configs.
"""

import json
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "device"))
import build_tiny_models as btm  # noqa: E402  (plain dicts: no torch needed)

TRANSFORMERS = "5.12.1"  # sglang 0.5.17's pin
PROBE = REPO / "tests" / "contract" / "sglang_config_probe.py"
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "sglang-0.5.17-h200-hybrid"
MIB = 1 << 20


@pytest.fixture(scope="module")
def transformers_site(transformers_site_of):
    return transformers_site_of(TRANSFORMERS)


@pytest.fixture(scope="module")
def parse(sglang_tree, transformers_site):
    tree = sglang_tree("0.5.17")

    def run(target, draft=None, tp=1):
        proc = subprocess.run(
            [sys.executable, str(PROBE), str(tree), str(tp)],
            input=json.dumps({"target": target, "draft": draft}), capture_output=True, text=True,
            env={"PYTHONPATH": str(transformers_site), "PATH": "/usr/bin:/bin"}, timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)

    return run


def logged_mamba_per_req_mib(name):
    """sglang's own 'mamba_cache_per_req=N MB' from a real H200 log."""
    text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
    return float(re.search(r"mamba_cache_per_req=([\d.]+) MB", text).group(1))


def test_the_tiny_hybrid_pair_parses_in_the_real_layout(parse):
    got = parse(btm.hybrid_target_config(), btm.hybrid_draft_config())
    assert got["transformers"] == TRANSFORMERS
    target = got["target"]
    assert (target["class"], target["text_class"], target["vision_class"]) == (
        "Qwen3_5Config", "Qwen3_5TextConfig", "Qwen3_5VisionConfig",
    )  # fmt: skip
    assert target["text_model_type"] == "qwen3_5_text"
    # full_attention_interval 4: [3 x GDN + 1 attention] twice
    assert target["full_attention_layer_ids"] == [3, 7]
    assert target["linear_layer_ids"] == [0, 1, 2, 4, 5, 6]
    assert target["attn_output_gate"] is True and target["partial_rotary_factor"] == 0.25
    assert target["rope_scaling"]["mrope_section"] == [11, 11, 10] and target["rope_scaling"]["mrope_interleaved"]
    # GDN state of the real model's heads: 48 value heads x 128 x 128 fp32; conv over q, k (16 x 128) and v
    assert target["temporal_shape"] == [48, 128, 128] and target["ssm_dtype"] == "float32"
    assert target["conv_shape"] == [[2 * 16 * 128 + 48 * 128, 3]] and target["conv_dtype"] == "bfloat16"
    assert round(target["mamba_cache_per_req"] / MIB, 2) == logged_mamba_per_req_mib("mamba_zero.log")
    draft = got["draft"]
    assert draft["architectures"] == ["DFlashDraftModel"]
    assert draft["layer_types"] == ["sliding_attention", "full_attention"]
    assert draft["sliding_window"] is not None
    assert draft["target_layer_ids"] == btm.HY_TARGET_LAYER_IDS
    assert all(i <= btm.HY_LAYERS - 2 for i in draft["target_layer_ids"])
    assert draft["block_size"] == btm.HY_BLOCK_SIZE and draft["mask_token_id"] == btm.HY_MASK_TOKEN_ID


def test_the_27b_geometry_parses_and_its_state_is_what_the_h200_logged(parse):
    conditional, causal, draft = btm.real_27b_configs()
    got = parse(conditional, draft)
    assert len(got["target"]["full_attention_layer_ids"]) == 16 and len(got["target"]["linear_layer_ids"]) == 48
    # "mamba_cache_per_req=146.81 MB" in the real 27B logs (card cut to 96 GB, dummy weights)
    assert round(got["target"]["mamba_cache_per_req"] / MIB, 2) == logged_mamba_per_req_mib("27b-dflash-mem0.60.log")
    assert got["draft"]["target_layer_ids"] == [1, 16, 31, 46, 61]
    assert got["draft"]["layer_types"] == ["sliding_attention"] * 4 + ["full_attention"]
    assert got["draft"]["block_size"] == 16 and got["draft"]["mask_token_id"] == 248070
    text_only = parse(causal)["target"]
    assert text_only["class"] == text_only["text_class"] == "Qwen3_5TextConfig"
    assert text_only["mamba_cache_per_req"] == got["target"]["mamba_cache_per_req"]


def test_tensor_parallel_splits_the_gdn_heads_as_sglang_does(parse):
    one = parse(btm.hybrid_target_config(), tp=1)["target"]
    two = parse(btm.hybrid_target_config(), tp=2)["target"]
    assert two["temporal_shape"] == [24, 128, 128]
    assert two["mamba_cache_per_req"] * 2 == one["mamba_cache_per_req"]


def test_a_draft_that_points_past_the_target_is_refused_by_sglangs_parser(parse, sglang_tree):
    bad = dict(btm.hybrid_draft_config(), dflash_config=dict(btm.hybrid_draft_config()["dflash_config"]))
    bad["dflash_config"]["target_layer_ids"] = [1, 3, btm.HY_LAYERS]
    with pytest.raises(AssertionError, match="out-of-range layer id"):
        parse(btm.hybrid_target_config(), bad)
