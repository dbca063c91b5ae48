"""Failures of the mission's model, replayed from the real sglang 0.5.17 logs of the H200 (issue 19).

The logs are in tests/unit/fixtures/sglang-0.5.17-h200-hybrid/, byte for byte as the servers wrote
them (tests/device/run-h200-hybrid and envelope_runs.py; records in
tests/device/records/2026-12-01-h200-hybrid/). Each death goes through the readiness state machine
(fake clock, a watcher that reads the real log) and must get its class from what killed the
process, with the hint of that class; the memory classes are the ones the ladder may step on.
"""

import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness
from support.log_replay import Clock, DeadAfterOnePoll, Refused

REPO = pathlib.Path(__file__).resolve().parents[5]
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "sglang-0.5.17-h200-hybrid"
DEFAULTS = REPO / "roles" / "sglang_service" / "defaults" / "main.yml"


def verdict(name):
    text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
    clock = Clock()
    return Readiness(DeadAfterOnePoll(text), Refused(), Params(), clock=clock, sleep=clock.sleep).run()


# (log, class, the exception line that killed the process)
CASES = [
    ("text_dflash.log", "dflash_unsupported_target",
     "ValueError: Model Qwen3_5ForCausalLM implements neither set_dspark_layers_to_capture"),
    ("27b-text-dflash.log", "dflash_unsupported_target",
     "ValueError: Model Qwen3_5ForCausalLM implements neither set_dspark_layers_to_capture"),
    ("mamba_zero.log", "mamba_cache_oom",
     "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
     "Computed max_mamba_cache_size=0"),
    ("mamba_too_small.log", "mamba_cache_oom",
     "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests."),
    ("27b-dflash-mem0.60.log", "mamba_cache_oom",
     "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. "
     "Computed max_mamba_cache_size=-3"),
    ("gpu_index_missing.log", "gpu_not_visible",
     "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available."),
    ("gpu_uuid_missing.log", "gpu_not_visible",
     "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available."),
    ("corrupt_weights.log", "model_corrupt",
     "SafetensorError: Error while deserializing header: incomplete metadata, file not fully covered"),
    ("draft_mismatch.log", "draft_mismatch", "ValueError: DFLASH target_hidden feature dim mismatch."),
    ("tp2_one_gpu.log", "tp_exceeds_gpus", "torch.AcceleratorError: CUDA error: invalid device ordinal"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "failure_class", "exception"), CASES, ids=[c[0] for c in CASES])
def test_each_real_death_of_the_hybrid_runs_gets_its_class(name, failure_class, exception):
    result = verdict(name)
    assert result["ready"] is False
    assert result["failure_class"] == failure_class, (result["failure_class"], result.get("exception_line"))
    assert exception in result["exception_line"]
    assert result["hint"] == fc.hint_for(failure_class)
    assert "\x1b" not in result["journal"]


def test_every_fixture_has_a_case():
    assert {p.name for p in FIXTURES.glob("*.log")} == {c[0] for c in CASES}


def test_the_hybrid_memory_wordings_were_taken_for_the_kv_cache_before():
    """The state-cache refusals also say "increase --mem-fraction-static": the KV row must not win."""
    for name in ("mamba_too_small.log", "mamba_zero.log"):
        text = (FIXTURES / name).read_text(encoding="utf-8", errors="replace")
        assert "increase --mem-fraction-static" in text
        assert fc.classify(text).failure_class == "mamba_cache_oom"


def test_a_missing_gpu_index_and_a_missing_uuid_die_the_same_way():
    a = verdict("gpu_index_missing.log")
    b = verdict("gpu_uuid_missing.log")
    assert a["failure_class"] == b["failure_class"] == "gpu_not_visible"
    assert a["failed_in_phase"] == b["failed_in_phase"]


def test_the_ladder_steps_on_the_state_cache_class_and_not_on_the_others():
    """mamba_cache_oom is a memory class a smaller envelope fixes; the others are not."""
    text = DEFAULTS.read_text(encoding="utf-8")
    block = text.split("sglang_service_ladder_failure_classes:", 1)[1].split("\n\n", 1)[0]
    ladder = [line.strip()[2:] for line in block.splitlines() if line.strip().startswith("- ")]
    assert "mamba_cache_oom" in ladder
    for name in ("dflash_unsupported_target", "gdn_kernel_error", "gpu_not_visible", "model_corrupt",
                 "draft_mismatch", "tp_exceeds_gpus", "mamba_pingpong"):  # fmt: skip
        assert name not in ladder
