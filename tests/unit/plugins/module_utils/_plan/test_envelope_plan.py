"""Envelope planner: sglang 0.5.17's memory rule from config.json, per envelope, dense and hybrid, TP 1 and 2."""

import json
import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan import envelope_plan as ep
from ansible_collections.specdec.sglang.plugins.module_utils._plan.model_config import architecture_of, text_config

REPO = pathlib.Path(__file__).resolve().parents[5]
MODELS = REPO / "tests" / "unit" / "fixtures" / "models"
GIB = 1 << 30


def load(name: str) -> dict:
    path = MODELS / name / "config.json"
    if not path.is_file():
        pytest.fail(f"fixture missing: {path}")
    return json.loads(path.read_text())


TARGET = load("qwen3.6-27b")
DRAFT = load("qwen3.6-27b-dflash")
DENSE = load("qwen3-dense-8b")


def gpus(free_gib: float, n: int = 2, total_gib: float = 95.59) -> list:
    return [{"memory_total_mb": total_gib * 1024, "memory_free_mb": free_gib * 1024} for _ in range(n)]


def env(**kw) -> dict:
    base = {"context_length": 131072, "mem_fraction_static": 0.88, "max_running_requests": 16, "cuda_graph": True}
    base.update(kw)
    return base


def test_architecture_reads_the_nested_text_config():
    assert architecture_of(TARGET) == "hybrid_gdn"
    assert text_config(TARGET)["num_hidden_layers"] == 64
    assert architecture_of(DENSE) == "dense"
    assert architecture_of(DRAFT) == "dense"
    flat = dict(text_config(TARGET), architectures=["Qwen3_5ForCausalLM"])
    assert architecture_of(flat) == "hybrid_gdn"


def test_hybrid_kv_counts_only_the_full_attention_layers():
    geo = ep.target_geometry(TARGET)
    assert (geo["full_layers"], geo["linear_layers"]) == (16, 48)
    # 16 layers x 4 KV heads x 256 x (K + V) x 2 bytes = 64 KiB; TP 2 halves the heads
    assert ep.kv_cell_bytes(geo, 1) == 65536
    assert ep.kv_cell_bytes(geo, 2) == 32768
    # KV heads are replicated, never below one per rank
    assert ep.kv_cell_bytes(geo, 8) == 16 * 1 * 512 * 2


def test_mamba_state_per_request_is_ssm_plus_conv_split_over_tp():
    geo = ep.target_geometry(TARGET)
    one = ep.mamba_per_request(geo, 1)
    assert one["ssm"] == 48 * 48 * 128 * 128 * 4  # 151 MB, the context document's number
    assert one["conv"] == 48 * (2 * 16 * 128 + 48 * 128) * 3 * 2
    two = ep.mamba_per_request(geo, 2)
    assert two["ssm"] * 2 == one["ssm"] and two["conv"] * 2 == one["conv"]
    assert ep.mamba_per_request(ep.target_geometry(DENSE), 1)["total"] == 0


def test_weights_split_over_tp_and_the_vision_tower_counts_for_the_real_class():
    geo = ep.target_geometry(TARGET)
    w1, w2 = ep.target_weight_bytes(geo, 1), ep.target_weight_bytes(geo, 2)
    assert 0.49 < w2 / w1 < 0.51
    text_only = ep.target_geometry(dict(text_config(TARGET), architectures=["Qwen3_5ForCausalLM"]))
    assert 0.3 * GIB < w1 - ep.target_weight_bytes(text_only, 1) < 1.5 * GIB
    draft = ep.draft_geometry(DRAFT)
    # no embedding / lm_head in a DFlash draft; fc (5 x 5120 -> 5120) is replicated on every rank
    d1, d2 = ep.draft_weight_bytes(draft, 1), ep.draft_weight_bytes(draft, 2)
    assert 2.5 * GIB < d1 < 4 * GIB
    assert d2 > d1 / 2


def test_dense_target_without_draft_fits_and_fills_the_pool():
    plan = ep.plan_envelope(DENSE, None, gpus(95.0, 1), 1, env(context_length=32768))
    assert plan["fits"] and plan["architecture"] == "dense"
    assert plan["mamba_slots"] is None and plan["mamba_ssm_gb"] == 0
    rest = plan["available_after_load_gb"] - plan["slack_gb"]
    assert plan["kv_tokens"] == int(rest * GIB // plan["kv_cell_bytes"])
    assert plan["max_running_requests"] == 16


def test_dflash_draft_scales_the_kv_cell_like_sglang():
    plan = ep.plan_envelope(DENSE, DRAFT, gpus(95.0, 1), 1, env(context_length=32768, algorithm="DFLASH"))
    target_cell = ep.kv_cell_bytes(ep.target_geometry(DENSE), 1)
    assert plan["kv_cell_bytes"] == -(-target_cell * (36 + 5) // 36)
    assert plan["draft_kv_gb"] > 0 and plan["draft_weights_gb"] > 0


def test_mem_fraction_rule_refuses_with_sglangs_wording_and_minimum():
    plan = ep.plan_envelope(DENSE, None, gpus(20.0, 1), 1, env(context_length=4096, mem_fraction_static=0.5))
    assert not plan["fits"]
    assert plan["error_class"] == "oom_mem_fraction"
    assert "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.5." in plan["error"]
    assert f"{plan['min_viable_mem_fraction']:.4f}" in plan["error"]
    assert plan["min_mem_fraction"] is not None and plan["min_mem_fraction"] > 0.5
    ok = ep.plan_envelope(
        DENSE, None, gpus(20.0, 1), 1, env(context_length=4096, mem_fraction_static=plan["min_mem_fraction"])
    )
    assert ok["fits"]


def test_hybrid_dflash_snapshots_per_draft_token_decide_tp1_versus_tp2():
    """The field's 'full' DFLASH envelope with the radix cache off: 17 x 16 ssm snapshots do not fit TP 1."""
    e = env(algorithm="DFLASH", num_draft_tokens=16)
    tp1 = ep.plan_envelope(TARGET, DRAFT, gpus(95.0, 1), 1, e, disable_radix_cache=True)
    assert not tp1["fits"] and tp1["error_class"] == "oom_mem_fraction"
    assert tp1["min_mem_fraction"] is None  # no fraction can hold 16 requests' snapshots on one 95 GB card
    tp2 = ep.plan_envelope(TARGET, DRAFT, gpus(95.0, 2), 2, e, disable_radix_cache=True)
    assert tp2["fits"] and tp2["mamba_slots"] == 16
    per = ep.mamba_per_request(ep.target_geometry(TARGET), 2)
    assert tp2["intermediate_ssm_gb"] == pytest.approx(48 * 17 * 16 * per["ssm_layer"] / GIB)
    # chain verify keeps deduplicated conv windows: D + K - 2 columns
    assert tp2["intermediate_conv_gb"] == pytest.approx(48 * 17 * per["conv_dim"] * (16 + 2) * 2 / GIB)


def test_ddtree_snapshot_pool_is_sized_for_the_tree_budget():
    chain = ep.plan_envelope(
        TARGET, DRAFT, gpus(95.0, 2), 2, env(max_running_requests=2, algorithm="DFLASH"), disable_radix_cache=True
    )
    tree = ep.plan_envelope(
        TARGET,
        DRAFT,
        gpus(95.0, 2),
        2,
        env(max_running_requests=2, algorithm="DDTREE", num_draft_tokens=64),
        disable_radix_cache=True,
    )
    assert tree["draft_tokens"] == 64 and chain["draft_tokens"] == 16
    assert tree["intermediate_ssm_gb"] == pytest.approx(4 * chain["intermediate_ssm_gb"])
    assert tree["kv_tokens"] < chain["kv_tokens"]
    # tree budget 0 is the patch set's default: 2 x block size
    assert ep.draft_tokens_of({"algorithm": "DDTREE", "num_draft_tokens": 0}, ep.draft_geometry(DRAFT)) == 32


def test_radix_cache_on_caps_requests_by_the_mamba_ratio():
    plan = ep.plan_envelope(TARGET, DRAFT, gpus(95.0, 1), 1, env(algorithm="DFLASH"))
    ratio = ep.mamba_ratio(ep.target_geometry(TARGET), False)
    assert ratio == 5  # Qwen3_5ForConditionalGeneration: extra_buffer with the overlap schedule
    assert plan["fits"] and plan["capped_by_mamba"]
    assert plan["max_running_requests"] == plan["mamba_slots"] // ratio < 16
    assert any("capped to" in w for w in plan["warnings"])


def test_hybrid_state_errors_use_sglangs_wordings():
    # the text class (no vision tower, no extra_buffer: mamba ratio 3), 8 layers
    small = dict(text_config(TARGET), architectures=["Qwen3_5ForCausalLM"])
    small.update(num_hidden_layers=8, hidden_size=512, intermediate_size=1024, vocab_size=1000)
    # almost no room: the mamba solve gives no slot
    plan = ep.plan_envelope(
        small, DRAFT, gpus(3.6, 1), 1, env(context_length=1024, mem_fraction_static=0.05, algorithm="DFLASH")
    )
    assert plan["error_class"] == "hybrid_state_no_memory"
    assert plan["error"].startswith(
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache."
    )
    # the radix cache on, few slots: max_mamba_cache_size // ratio == 0
    plan = ep.plan_envelope(small, None, gpus(0.46, 1), 1, env(context_length=1024, mem_fraction_static=0.9))
    assert plan["mamba_slots"] is not None and 0 < plan["mamba_slots"] < 3
    assert plan["error_class"] == "hybrid_state_too_small"
    assert "state cache is too small to serve any requests" in plan["error"]


def test_pool_smaller_than_one_context_does_not_fit_even_though_sglang_starts():
    plan = ep.plan_envelope(DENSE, None, gpus(20.0, 1), 1, env(context_length=40960, mem_fraction_static=0.83))
    assert plan["error"] is None and plan["kv_tokens"] < 40960
    assert not plan["fits"] and "fewer than one request of context_length 40960" in plan["reasons"][0]


def test_the_ladder_reports_the_first_fit_and_a_table_with_the_numbers():
    ladder = [
        dict(env(algorithm="DFLASH"), name="full"),
        dict(env(context_length=32768, max_running_requests=4, algorithm="DFLASH"), name="small"),
    ]
    result = ep.plan_ladder(TARGET, DRAFT, gpus(95.0, 1), 1, ladder, disable_radix_cache=True)
    assert result["fitting"] == ["small"] and result["first_fit"] == "small"
    lines = result["table"].splitlines()
    assert lines[0].startswith("envelope") and lines[1].startswith("full") and " NO " in lines[1]
    assert "Loaded weights leave no GPU memory" in lines[1]
    assert str(result["plans"][1]["kv_tokens"]) in lines[2]


def test_tp_uses_the_smallest_free_gpu_and_refuses_too_few_gpus():
    mixed = [{"memory_total_mb": 97887, "memory_free_mb": 90000}, {"memory_total_mb": 97887, "memory_free_mb": 60000}]
    plan = ep.plan_envelope(TARGET, None, mixed, 2, env())
    assert plan["pre_load_gb"] == pytest.approx(60000 / 1024)
    with pytest.raises(ep.PlanError, match="tp_size=2 needs 2 GPUs, 1 selected"):
        ep.plan_envelope(TARGET, None, mixed[:1], 2, env())


def test_configs_without_the_fields_are_refused_by_name():
    with pytest.raises(ep.PlanError, match="has no 'num_hidden_layers'"):
        ep.target_geometry({"architectures": ["X"], "hidden_size": 8})
    with pytest.raises(ep.PlanError, match=r"needs the draft's config\.json"):
        ep.plan_envelope(TARGET, None, gpus(95.0, 1), 1, env(algorithm="DFLASH"))


def test_launch_flags_change_the_plan_like_they_change_sglang():
    assert ep.launch_options(["--disable-radix-cache", "--mamba-full-memory-ratio=0.5"]) == {
        "disable_radix_cache": True,
        "disable_overlap_schedule": False,
        "mamba_full_memory_ratio": 0.5,
    }
    assert ep.launch_options(["--chunked-prefill-size 4096"])["chunked_prefill_size"] == 4096
    with pytest.raises(ep.PlanError, match="--mamba-full-memory-ratio 'lots' is not a number"):
        ep.launch_options(["--mamba-full-memory-ratio", "lots"])
    # the overlap schedule off drops the extra_buffer ping-pong: 3 slots per request instead of 5
    assert ep.mamba_ratio(ep.target_geometry(TARGET), False, disable_overlap_schedule=True) == 3


def test_role_envelopes_keep_the_ladder_order_and_the_tree_budget():
    envelopes = {"a": {"mem_fraction_static": 0.9, "environment": {"X": "1"}}, "b": {"mem_fraction_static": 0.8}}
    out = ep.role_envelopes(envelopes, ["b", "a"], "DDTREE", num_draft_tokens=16, ddtree_budget=0)
    assert [e["name"] for e in out] == ["b", "a"]
    assert out[0]["num_draft_tokens"] == 0 and out[0]["algorithm"] == "DDTREE"  # 0: 2 x block, resolved later
    assert "environment" not in out[1]
    with pytest.raises(ep.PlanError, match="names 'c', which sglang_service_envelopes does not define"):
        ep.role_envelopes(envelopes, ["c"], "DFLASH")
