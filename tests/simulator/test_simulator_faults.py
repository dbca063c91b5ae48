"""Every SGLANG_SIM_FAULT mode, as a real process: HTTP answers, timings, log lines, exit status."""

import http.client
import signal
import socket
import time

import pytest
from simulator_harness import FAST

SIGKILL = -signal.SIGKILL  # Popen's view of "killed by SIGKILL" (a shell says 137, systemd 9/KILL)


@pytest.mark.parametrize(
    ("fault", "extra", "last_line", "also"),
    [
        (
            "crash_on_start",
            [],
            "KeyError: 'model.layers.0.linear_attn.dt_bias'",
            "sglang/srt/model_executor/model_runner.py",
        ),
        (
            "not_enough_memory",
            ["--mem-fraction-static", "0.88"],
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: mem_fraction_static=0.88",
            "sglang/srt/model_executor/pool_configurator.py",
        ),
        (
            # sglang 0.5.17's wording of the same failure, as the H200 run logged it.
            "kv_cache_too_small",
            ["--mem-fraction-static", "0.0005"],
            "If using speculative decoding, draft weights are now counted.",
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005. "
            "Raise --mem-fraction-static above",
        ),
        ("cuda_oom", [], "Open an issue on GitHub", "Exception: Capture cuda graph failed: CUDA out of memory."),
        (
            "cuda_oom",
            ["--disable-cuda-graph"],
            "torch.OutOfMemoryError: CUDA out of memory.",
            "sglang/srt/mem_cache/memory_pool.py",
        ),
        ("cuda_error", [], "Compile with `TORCH_USE_CUDA_DSA`", "RuntimeError: CUDA error: an illegal memory access"),
    ],
)
def test_start_time_fault_logs_scheduler_traceback_then_ends_with_sigkill(start_sim, fault, extra, last_line, also):
    sim = start_sim(extra, env={**FAST, "SGLANG_SIM_FAULT": fault}, spec=True)
    assert sim.wait_exit(10) == SIGKILL
    elapsed = sim.elapsed()
    err = sim.stderr
    assert 0.4 <= elapsed < 4, f"fault fires after SGLANG_SIM_FAULT_AFTER_S=0.5, took {elapsed:.2f} s"
    assert "TP0] Scheduler hit an exception: Traceback (most recent call last):" in err
    assert "sglang/srt/managers/scheduler.py" in err and also in err
    assert last_line in err
    assert err.rstrip().endswith("Received sigquit from a child process. It usually means the child failed.")
    assert "Load weight begin" in err
    assert "ready to roll" not in err and "Uvicorn running" not in err


def test_crash_on_start_never_opens_the_port(start_sim):
    sim = start_sim(env={"SGLANG_SIM_FAULT": "crash_on_start", "SGLANG_SIM_FAULT_AFTER_S": "1.0"})
    seen_open = False
    while sim.proc.poll() is None:
        seen_open = seen_open or sim.port_open()
        time.sleep(0.05)
    assert sim.proc.returncode == SIGKILL and not seen_open


def test_crash_on_first_generation_drops_the_connection_and_dies_by_sigkill(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "crash_on_first_generation"}, spec=True)
    sim.wait_ready(10)
    assert sim.http("GET", "/health")[0] == 200  # healthy until a real generation arrives
    with pytest.raises((http.client.HTTPException, ConnectionError)):
        sim.generate(timeout=5)
    assert sim.wait_exit(5) == SIGKILL
    err = sim.stderr
    assert "Scheduler hit an exception: Traceback" in err
    assert "torch/nn/modules/module.py" in err and "_wrapped_call_impl" in err
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in err


def test_wedged_engine_hangs_generation_while_models_answers_and_health_turns_503(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "wedged", "SGLANG_SIM_HEALTH_TIMEOUT_S": "1.5"}, spec=True)
    sim.wait_ready(10)
    with pytest.raises(socket.timeout):
        sim.generate(timeout=1.0)
    tic = time.monotonic()
    assert sim.http("GET", "/v1/models", timeout=1)[0] == 200
    assert time.monotonic() - tic < 0.5
    assert sim.http("GET", "/ready", timeout=1)[0] == 200
    with pytest.raises(socket.timeout):
        sim.http("GET", "/server_info", timeout=1.0)
    tic = time.monotonic()
    assert sim.http("GET", "/health", timeout=5)[0] == 503
    assert 1.3 <= time.monotonic() - tic < 3.5
    assert "Health check failed. Server couldn't get a response from detokenizer for last 1.5 seconds" in sim.stderr
    assert sim.proc.poll() is None


def test_wedged_engine_does_not_drain_on_sigterm_while_requests_hang(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "wedged"})
    sim.wait_ready(10)
    with pytest.raises(socket.timeout):
        sim.generate(timeout=0.5)
    sim.proc.send_signal(signal.SIGTERM)
    time.sleep(1.0)
    assert sim.proc.poll() is None, "sglang keeps draining a request the scheduler never finishes"
    assert "Gracefully exiting... Remaining number of requests 1" in sim.stderr


def test_abort_fault_returns_abort_finish_reason_and_no_tokens(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "abort"})
    sim.wait_ready(10)
    status, body = sim.generate()
    assert status == 200
    assert body["meta_info"]["finish_reason"]["type"] == "abort"
    assert body["meta_info"]["completion_tokens"] == 0
    chat = sim.http("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})[1]
    assert chat["choices"][0]["finish_reason"] == "abort"


def test_empty_output_fault_returns_zero_completion_tokens(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "empty_output"}, spec=True)
    sim.wait_ready(10)
    status, body = sim.generate()
    assert status == 200
    assert body["meta_info"]["completion_tokens"] == 0 and body["output_ids"] == [] and body["text"] == ""
    assert body["meta_info"]["finish_reason"]["type"] == "stop"


def test_empty_text_fault_still_returns_tokens(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "empty_text"}, spec=True)
    sim.wait_ready(10)
    body = sim.generate(max_new_tokens=32)[1]
    assert body["text"] == ""
    assert body["meta_info"]["completion_tokens"] == 32 and len(body["output_ids"]) == 32
    assert body["meta_info"]["finish_reason"]["type"] == "length"


def test_scheduler_death_ends_with_sigkill_after_ready_line(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "scheduler_death", "SGLANG_SIM_DEATH_GRACE_S": "0.5"}, spec=True)
    ready_s = sim.wait_ready(10)
    assert sim.generate(timeout=2)[0] == 200  # serves until the scheduler dies
    crash_s = sim.wait_log("Subprocess scheduler_0 (pid=", 5)
    assert sim.wait_exit(5) == SIGKILL
    end_s = sim.elapsed()
    err = sim.stderr
    assert 0.4 <= crash_s - ready_s < 2.5, f"crash {crash_s - ready_s:.2f} s after ready (FAULT_AFTER_S=0.5)"
    assert 0.4 <= end_s - crash_s < 2.5, f"tree gone {end_s - crash_s:.2f} s after the crash line (grace 0.5)"
    assert "crashed with exit code -9. Triggering SIGQUIT for cleanup..." in err
    assert err.index("ready to roll") < err.index("Subprocess scheduler_0")


def test_scheduler_death_hangs_generation_between_crash_and_kill(start_sim):
    sim = start_sim(
        env={**FAST, "SGLANG_SIM_FAULT": "scheduler_death", "SGLANG_SIM_FAULT_AFTER_S": "0.1"}
    )  # default grace: 3 s from the crash line to SIGKILL
    sim.wait_log("Subprocess scheduler_0", 10)
    assert sim.http("GET", "/v1/models", timeout=1)[0] == 200
    with pytest.raises(socket.timeout):
        sim.generate(timeout=0.5)
    assert sim.wait_exit(5) == SIGKILL


def test_spec_mismatch_reports_another_algorithm_in_server_info(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "spec_mismatch"}, spec=True)
    sim.wait_ready(10)
    assert sim.http("GET", "/get_server_info")[1]["speculative_algorithm"] == "EAGLE"
    assert sim.generate()[0] == 200


def test_low_acceptance_reports_accept_length_near_one(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "low_acceptance"}, spec=True)
    sim.wait_ready(10)
    meta = sim.generate(max_new_tokens=16)[1]["meta_info"]
    assert 1.0 <= meta["spec_accept_length"] < 1.2
    assert meta["spec_verify_ct"] >= 13 and meta["completion_tokens"] == 16


def test_a_wedge_and_an_accept_length_collapse_can_be_injected_after_a_good_start(start_sim):
    sim = start_sim(
        spec=True, env={"SGLANG_SIM_LOAD_S": "0.2", "SGLANG_SIM_WARMUP_S": "0.2", "SGLANG_SIM_HEALTH_TIMEOUT_S": "1"}
    )
    sim.wait_ready()
    status, body = sim.generate()
    assert status == 200 and body["meta_info"]["spec_accept_length"] > 3
    sim.proc.send_signal(signal.SIGUSR2)
    sim.wait_log("fault low_acceptance injected", 2)
    status, body = sim.generate()
    assert status == 200 and body["meta_info"]["spec_accept_length"] < 1.2
    sim.proc.send_signal(signal.SIGUSR1)
    sim.wait_log("fault wedged injected", 2)
    with pytest.raises(TimeoutError):
        sim.generate(timeout=1)
    assert sim.http("GET", "/v1/models")[0] == 200
