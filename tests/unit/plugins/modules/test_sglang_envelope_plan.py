"""The sglang_envelope_plan module: config.json read on the host or handed on, the ladder planned or refused."""

import json
import pathlib

from ansible_collections.specdec.sglang.plugins.action import sglang_envelope_plan as action
from ansible_collections.specdec.sglang.plugins.modules import sglang_envelope_plan
from support.module_run import run_main, set_module_args

REPO = pathlib.Path(__file__).resolve().parents[4]
MODELS = REPO / "tests" / "unit" / "fixtures" / "models"
GPU = {"memory_total_mb": 97887, "memory_free_mb": 97247}
ENVELOPES = {
    "huge": {"context_length": 262144, "mem_fraction_static": 0.88, "max_running_requests": 16, "cuda_graph": True},
    "small": {
        "context_length": 32768,
        "mem_fraction_static": 0.95,
        "max_running_requests": 4,
        "cuda_graph": True,
        "environment": {"X": "1"},
    },
}


def args(**kw):
    base = {
        "model_path": str(MODELS / "qwen3.6-27b"),
        "draft_model_path": str(MODELS / "qwen3.6-27b-dflash"),
        "gpus": [GPU],
        "tp_size": 1,
        "envelopes": ENVELOPES,
        "ladder": ["huge", "small"],
        "speculative_algorithm": "DFLASH",
        "num_draft_tokens": 16,
    }
    base.update(kw)
    return base


def test_skips_what_cannot_fit_and_keeps_ladder_order(monkeypatch, capsys):
    set_module_args(monkeypatch, args())
    result = run_main(sglang_envelope_plan.main, capsys)
    assert result.get("failed") is not True
    assert (result["fitting"], result["skipped"], result["first_fit"]) == (["small"], ["huge"], "small")
    assert result["architecture"] == "hybrid_gdn"
    assert (
        result["table"][1].startswith("huge")
        and "fewer than one request of context_length 262144" in result["table"][1]
    )


def test_refuses_when_nothing_fits_with_the_table(monkeypatch, capsys):
    set_module_args(monkeypatch, args(ladder=["huge"]))
    result = run_main(sglang_envelope_plan.main, capsys)
    assert result["failed"] is True
    assert "no envelope of sglang_service_envelope_ladder=['huge'] fits the selected GPUs (tp_size=1)" in result["msg"]
    assert result["msg"].splitlines()[1].startswith("envelope")  # the table follows
    assert result["skipped"] == ["huge"]


def test_missing_config_names_the_variable(monkeypatch, capsys, tmp_path):
    set_module_args(monkeypatch, args(draft_model_path=str(tmp_path)))
    result = run_main(sglang_envelope_plan.main, capsys)
    assert result["failed"] is True
    assert result["msg"].startswith(f"sglang_service_draft_model_path={tmp_path}: cannot read {tmp_path}/config.json")


def test_extra_flags_change_the_plan(monkeypatch, capsys):
    set_module_args(monkeypatch, args(ladder=["small"], extra_flags=["--disable-radix-cache"]))
    off = run_main(sglang_envelope_plan.main, capsys)
    set_module_args(monkeypatch, args(ladder=["small"]))
    on = run_main(sglang_envelope_plan.main, capsys)
    assert off["plans"][0]["mamba_slots"] == 4  # one slot per request without the radix cache
    assert on["plans"][0]["mamba_slots"] > 4


def test_a_context_length_beyond_the_targets_max_position_embeddings_is_refused_before_planning(monkeypatch, capsys):
    too_long = {**ENVELOPES, "huge": {**ENVELOPES["huge"], "context_length": 262145}}
    set_module_args(monkeypatch, args(envelopes=too_long))
    result = run_main(sglang_envelope_plan.main, capsys)
    assert result["failed"] is True
    assert result["msg"] == (
        "envelope plan: sglang_service_envelopes.huge.context_length=262145 is above the target's"
        " text_config.max_position_embeddings=262144 (config.json of sglang_service_model_path); allowed: 0 (the"
        " model's own) to 262144"
    )


def test_with_the_configs_handed_on_the_plan_runs_on_the_controller_and_reads_no_file(tmp_path, monkeypatch, capsys):
    configs = {
        "target_config": json.loads((MODELS / "qwen3.6-27b" / "config.json").read_text()),
        "draft_config": json.loads((MODELS / "qwen3.6-27b-dflash" / "config.json").read_text()),
    }
    handed = args(model_path=str(tmp_path / "absent"), draft_model_path=str(tmp_path / "absent-too"), **configs)
    here = action.run_on_controller(handed)
    set_module_args(monkeypatch, args())
    on_host = run_main(sglang_envelope_plan.main, capsys)  # the same plan from the files
    assert here["fitting"] == on_host["fitting"] == ["small"] and here["table"] == on_host["table"]
    # a config not handed on: the module reads the files on the host (the action says so with None)
    assert action.run_on_controller({k: v for k, v in handed.items() if k != "draft_config"}) is None
    bad = action.run_on_controller({**handed, "tp_size": "two"})
    assert bad["failed"] is True and "tp_size" in bad["msg"]
