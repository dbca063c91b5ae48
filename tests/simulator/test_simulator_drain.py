"""Drain on SIGTERM, like sglang: the main process finishes every generation in flight (streamed ones
too) before it exits, answering /health 503 meanwhile. The scheduler is a child process: SIGTERM to it
as well (systemd's KillMode=control-group) drops the generations instead."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from sglang_engine_simulator.server import _SCHEDULER_PROGRAM

SLOW = {"SGLANG_SIM_TOKENS_PER_S": "40", "SGLANG_SIM_LOAD_S": "0.2", "SGLANG_SIM_WARMUP_S": "0.2"}
STREAMS = 4


def stream(port, outcome, first_chunk):
    """One streamed /generate of 64 tokens: outcome gets 'complete' (final chunk + [DONE]) or 'failed: ...'."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        body = {"text": "Say hi.", "sampling_params": {"max_new_tokens": 64}, "stream": True}
        conn.request("POST", "/generate", body=json.dumps(body), headers={"content-type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("content-type") == "text/event-stream"
        last, done = None, False
        for raw in resp:
            line = raw.strip()
            if not line.startswith(b"data: "):
                continue
            if line == b"data: [DONE]":
                done = True
                break
            last = json.loads(line[6:])
            first_chunk.set()
        finish = (last or {}).get("meta_info", {}).get("finish_reason")
        if done and finish and last["meta_info"]["completion_tokens"] == 64:
            outcome.append("complete")
        else:
            outcome.append("failed: stream ended without [DONE] (last %r)" % (last or {}).get("meta_info"))
    except Exception as exc:  # every way a stream can die is an outcome
        outcome.append("failed: %r" % exc)
        first_chunk.set()


def start_streams(sim):
    outcomes, threads = [], []
    for _ in range(STREAMS):
        first = threading.Event()
        thread = threading.Thread(target=stream, args=(sim.port, outcomes, first), daemon=True)
        thread.start()
        assert first.wait(5), sim.logs
        threads.append(thread)
    return outcomes, threads


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as handle:
        return [int(p) for p in handle.read().split()]


def test_sigterm_to_the_main_process_drains_every_streamed_generation(start_sim):
    sim = start_sim(env=SLOW)
    sim.wait_ready()
    scheduler = children(sim.proc.pid)
    assert len(scheduler) == 1
    outcomes, threads = start_streams(sim)
    sim.proc.send_signal(signal.SIGTERM)  # KillMode=mixed: the main process only
    time.sleep(0.2)
    assert sim.http("GET", "/health")[0] == 503  # draining: a load balancer stops sending here
    for thread in threads:
        thread.join(10)
    assert outcomes == ["complete"] * STREAMS, sim.logs
    assert sim.wait_exit(5) == 0
    assert "Draining requests and shutting down" in sim.logs
    assert "Health check request received during shutdown. Returning 503." in sim.logs
    with pytest.raises(FileNotFoundError):
        os.stat("/proc/%d/cmdline" % scheduler[0])  # the main process ended its scheduler after the drain


def test_sigterm_to_the_whole_group_drops_the_generations(start_sim):
    sim = start_sim(env=SLOW)
    sim.wait_ready()
    scheduler = children(sim.proc.pid)
    outcomes, threads = start_streams(sim)
    for pid in [sim.proc.pid, *scheduler]:  # KillMode=control-group: every process at once
        os.kill(pid, signal.SIGTERM)
    for thread in threads:
        thread.join(10)
    assert len(outcomes) == STREAMS
    assert all(o.startswith("failed") for o in outcomes), outcomes
    assert sim.wait_exit(5) == 0


def test_the_scheduler_child_dies_with_a_killed_main_process(start_sim):
    sim = start_sim(env=SLOW)
    sim.wait_ready()
    scheduler = children(sim.proc.pid)[0]
    sim.stop()  # SIGKILL
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _running(scheduler):
        time.sleep(0.05)
    assert not _running(scheduler)


def test_the_scheduler_child_ends_when_its_main_process_died_before_it_started():
    """The child checks the pid the main process handed it. Read with getppid() at its start, it would be
    1 after the main process died first (a simulator ended right after its ready line) and it would
    never end. The main process is stood in for by a pid this child is not the child of."""
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True, text=True
    )
    orphan = subprocess.Popen([sys.executable, "-c", _SCHEDULER_PROGRAM, gone.stdout.strip()])
    own = subprocess.Popen([sys.executable, "-c", _SCHEDULER_PROGRAM, str(os.getpid())])
    try:
        assert orphan.wait(timeout=5) == 0
        time.sleep(0.5)
        assert own.poll() is None  # its parent lives: it keeps running
    finally:
        for proc in (orphan, own):
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _running(pid):
    """Alive and not a zombie (an exited child waits in /proc until whoever adopted it reaps it)."""
    try:
        with open("/proc/%d/stat" % pid) as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_non_streamed_generation_in_flight_also_drains(start_sim):
    sim = start_sim(env=SLOW)
    sim.wait_ready()
    result = []
    thread = threading.Thread(target=lambda: result.append(sim.generate(max_new_tokens=64, timeout=10)))
    thread.start()
    time.sleep(0.3)
    sim.proc.send_signal(signal.SIGTERM)
    thread.join(10)
    status, body = result[0]
    assert status == 200 and body["meta_info"]["completion_tokens"] == 64
    assert sim.wait_exit(5) == 0


def test_metrics_are_served_like_sglang_only_with_enable_metrics(start_sim):
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415  (controller-only dependency)

    sim = start_sim(extra_args=["--enable-metrics"], env=SLOW, spec=True)
    sim.wait_ready()
    assert sim.generate(max_new_tokens=16)[0] == 200
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
    conn.request("GET", "/metrics")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("content-type").startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, s.labels.get("is_streaming")): s.value
        for family in text_string_to_metric_families(resp.read().decode())
        for s in family.samples
    }
    assert samples[("sglang:generation_tokens_total", "false")] == 16
    assert samples[("sglang:spec_accept_length", None)] > 3
    assert samples[("sglang:spec_verify_calls_total", None)] >= 1
    plain = start_sim(env=SLOW)
    plain.wait_ready()
    assert plain.http("GET", "/metrics")[0] == 404
