"""The simulator's hybrid (Gated-DeltaNet) mode: sglang 0.5.17's pools, refusals and GDN fault, and agreement
with the collection's envelope planner on the same config.json and GPU memory."""

import json
import pathlib
import re
import shutil
import signal

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan import envelope_plan as ep
from simulator_harness import FAST

REPO = pathlib.Path(__file__).resolve().parents[2]
MODELS = REPO / "tests" / "unit" / "fixtures" / "models"
SIGKILL = -signal.SIGKILL
GPU_MB = 97887  # an RTX PRO 6000 Blackwell's 95.59 GiB, all free


@pytest.fixture(scope="module")
def hybrid_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hybrid")
    dirs = {}
    for name in ("qwen3.6-27b", "qwen3.6-27b-dflash"):
        shutil.copytree(MODELS / name, root / name)
        dirs[name] = str(root / name)
    text = json.loads((MODELS / "qwen3.6-27b" / "config.json").read_text())["text_config"]
    (root / "text-class").mkdir()
    (root / "text-class" / "config.json").write_text(json.dumps(dict(text, architectures=["Qwen3_5ForCausalLM"])))
    dirs["text-class"] = str(root / "text-class")
    return dirs


def launch(start_sim, dirs, extra, env=None, target="qwen3.6-27b"):
    args = [
        "--speculative-algorithm", "DFLASH",
        "--speculative-draft-model-path", dirs["qwen3.6-27b-dflash"],
        "--speculative-num-draft-tokens", "16",
        *extra,
    ]  # fmt: skip
    return start_sim(
        args, env={**FAST, "SGLANG_SIM_GPU_MEMORY_MB": str(GPU_MB), **(env or {})}, model_path=dirs[target]
    )


def planner(dirs, envelope, **kwargs):
    target = json.loads((pathlib.Path(dirs["qwen3.6-27b"]) / "config.json").read_text())
    draft = json.loads((pathlib.Path(dirs["qwen3.6-27b-dflash"]) / "config.json").read_text())
    gpus = [{"memory_total_mb": GPU_MB, "memory_free_mb": GPU_MB}]
    return ep.plan_envelope(target, draft, gpus, 1, dict(envelope, algorithm="DFLASH", num_draft_tokens=16), **kwargs)


def test_hybrid_start_logs_the_mamba_pools_and_agrees_with_the_planner(start_sim, hybrid_dirs):
    flags = ["--context-length", "131072", "--mem-fraction-static", "0.88", "--max-running-requests", "16"]
    sim = launch(start_sim, hybrid_dirs, flags)
    sim.wait_ready(10)
    err = sim.stderr
    plan = planner(hybrid_dirs, {"context_length": 131072, "mem_fraction_static": 0.88, "max_running_requests": 16})
    assert plan["error"] is None
    assert f"Mamba Cache is allocated. max_mamba_cache_size: {plan['mamba_slots']}, " in err
    assert "intermediate_ssm_state_cache size: " in err and "intermediate_conv_window_cache size: " in err
    # two implementations of sglang's rule (the planner's, the simulator's own): within 1%
    tokens = int(re.search(r"KV Cache is allocated\. #tokens: (\d+), ", err).group(1))
    assert abs(tokens - plan["kv_tokens"]) <= 0.01 * plan["kv_tokens"]
    cap = plan["max_running_requests"]
    assert f"max_running_requests is capped to {cap} by the mamba state cache" in err
    assert f"max_running_requests={cap}," in err
    status, body = sim.generate()
    assert status == 200 and body["meta_info"]["completion_tokens"] > 0


def test_hybrid_refusal_is_sglangs_and_the_planners(start_sim, hybrid_dirs):
    """TP 1, radix cache off: 17 x 16 per-draft-token ssm snapshots leave nothing for the KV cache."""
    flags = ["--mem-fraction-static", "0.88", "--max-running-requests", "16", "--disable-radix-cache"]
    sim = launch(start_sim, hybrid_dirs, flags)
    assert sim.wait_exit(10) == SIGKILL
    err = sim.stderr
    assert "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.88." in err
    assert "kv_cache_configurator.py" in err and "ready to roll" not in err
    plan = planner(
        hybrid_dirs,
        {"context_length": 131072, "mem_fraction_static": 0.88, "max_running_requests": 16},
        disable_radix_cache=True,
    )
    assert plan["error_class"] == "oom_mem_fraction" and not plan["fits"]


def test_hybrid_state_cache_wording_when_the_mamba_solve_gives_no_slot(start_sim, hybrid_dirs):
    sim = launch(start_sim, hybrid_dirs, ["--mem-fraction-static", "0.6", "--max-running-requests", "16"])
    assert sim.wait_exit(10) == SIGKILL
    assert "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache." in sim.stderr
    assert "Try: (1) reduce --max-running-requests" in sim.stderr
    plan = planner(hybrid_dirs, {"context_length": 131072, "mem_fraction_static": 0.6, "max_running_requests": 16})
    assert plan["error_class"] == "hybrid_state_no_memory"


def test_text_class_refuses_dflash_like_sglang_0517(start_sim, hybrid_dirs):
    sim = launch(start_sim, hybrid_dirs, ["--mem-fraction-static", "0.88"], target="text-class")
    assert sim.wait_exit(10) == SIGKILL
    assert (
        "ValueError: Model Qwen3_5ForCausalLM implements neither set_dspark_layers_to_capture nor "
        "set_dflash_layers_to_capture" in sim.stderr
    )
    # sglang sets up the attention backends after the memory pool: the pool lines come first
    assert sim.stderr.index("KV Cache is allocated") < sim.stderr.index("implements neither")


def test_gdn_kernel_fault_kills_the_scheduler_on_the_first_prefill(start_sim, hybrid_dirs):
    flags = ["--mem-fraction-static", "0.88", "--max-running-requests", "4", "--context-length", "32768"]
    sim = launch(start_sim, hybrid_dirs, flags, env={"SGLANG_SIM_FAULT": "gdn_kernel_fault"})
    sim.wait_ready(10)
    with pytest.raises(Exception):  # noqa: B017  (the connection drops: any of http.client's errors)
        sim.generate(timeout=5)
    assert sim.wait_exit(5) == SIGKILL
    assert "sglang/srt/layers/attention/fla/chunk.py" in sim.stderr
    assert "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered" in sim.stderr


def test_a_dense_config_keeps_the_dense_start(start_sim, model_dirs):
    sim = start_sim(env={**FAST, "SGLANG_SIM_GPU_MEMORY_MB": "1000"}, spec=True)
    sim.wait_ready(10)
    assert "Mamba Cache is allocated" not in sim.stderr
