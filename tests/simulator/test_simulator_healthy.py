"""The healthy path: closed port while loading, 503 while warming, the ready line, sglang's shapes."""

import http.client
import signal
import time

import pytest
from simulator_harness import FAST

KEY = {"Authorization": "Bearer s3cret"}


@pytest.fixture(scope="module")
def spec_sim(module_launcher):
    """DFLASH + api key, fast timings, one process for the read-only endpoint tests."""
    sim = module_launcher.start(["--api-key", "s3cret", "--served-model-name", "qwen3.6-27b"], env=FAST, spec=True)
    sim.wait_ready(10)
    return sim


@pytest.fixture(scope="module")
def plain_sim(module_launcher):
    sim = module_launcher.start(["--disable-cuda-graph", "--context-length", "4096"], env=FAST)
    sim.wait_ready(10)
    return sim


def test_default_start_closed_port_then_503_then_ready_in_under_3_s(start_sim):
    sim = start_sim(spec=True)  # default timings: 0.5 s loading, 0.5 s warmup
    statuses = []
    closed_until = None
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and "ready to roll" not in sim.stderr:
        if not sim.port_open():
            assert closed_until is None or not statuses, "port closed again after it opened"
        else:
            closed_until = closed_until or sim.elapsed()
            statuses.append(sim.http("GET", "/health", timeout=2)[0])
            if statuses[-1] == 200:  # ready: on a loaded machine the log line can arrive after the answer
                break
        time.sleep(0.05)
    ready_s = sim.wait_ready(1)
    assert closed_until is not None and closed_until >= 0.4, "port must stay closed while loading (0.5 s)"
    # 503 while warming up, and 200 only as the last answer (then the ready line must follow)
    assert 503 in statuses and set(statuses[:-1]) <= {503} and statuses[-1] in {200, 503}, (
        f"/health while warming: {statuses}"
    )
    assert ready_s < 3.0, f"start to ready took {ready_s:.2f} s"
    assert sim.http("GET", "/health")[0] == 200
    print(f"\nmeasured: port open at {closed_until:.2f} s, ready line at {ready_s:.2f} s after launch")


def test_idle_process_stays_under_60_mb_rss(spec_sim):
    for _ in range(5):
        assert spec_sim.generate(headers=KEY)[0] == 200
    time.sleep(0.2)
    status = open(f"/proc/{spec_sim.proc.pid}/status").read()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    assert rss_kb < 60 * 1024, f"VmRSS {rss_kb} kB"
    print(f"\nmeasured: idle VmRSS {rss_kb / 1024:.1f} MB")


def test_load_progress_and_cuda_graph_lines_are_logged_before_ready(spec_sim):
    log = spec_sim.stderr
    order = [
        "Load weight begin. avail mem=",
        "Loading safetensors checkpoint shards: 100% Completed",
        "Load weight end. elapsed=",
        "KV Cache is allocated.",
        "Capture cuda graph begin.",
        "Capture cuda graph end.",
        "INFO:     Uvicorn running on http://127.0.0.1:",
        "The server is fired up and ready to roll!",
    ]
    positions = [log.index(line) for line in order]
    assert positions == sorted(positions)
    assert "TP0] Load weight begin." in log  # scheduler lines carry the rank like sglang's
    assert "TEST DOUBLE" in log


def test_disable_cuda_graph_skips_capture_and_warns_it_is_deprecated(plain_sim):
    log = plain_sim.stderr
    assert "Capture cuda graph" not in log
    assert "'--disable-cuda-graph' is deprecated" in log


def test_generate_has_sglang_shape_with_spec_metrics(spec_sim):
    status, body = spec_sim.generate("Say hi.", 16, headers=KEY)
    assert status == 200
    meta = body["meta_info"]
    assert body["text"].startswith("Hello from the sglang engine simulator")
    assert len(body["output_ids"]) == 16
    assert meta["finish_reason"] == {"type": "length", "length": 16}
    assert meta["completion_tokens"] == 16 and meta["prompt_tokens"] > 0
    assert {"id", "cached_tokens", "e2e_latency"} <= set(meta)
    assert meta["spec_verify_ct"] == 5 and meta["spec_accept_length"] == pytest.approx(3.2)
    assert 0 < meta["spec_accept_rate"] < 1


def test_generate_is_deterministic_for_a_prompt(spec_sim):
    one = spec_sim.generate("What is 2+2?", 24, headers=KEY)[1]
    two = spec_sim.generate("What is 2+2?", 24, headers=KEY)[1]
    other = spec_sim.generate("Name a colour.", 24, headers=KEY)[1]
    assert (one["text"], one["output_ids"]) == (two["text"], two["output_ids"])
    assert one["output_ids"] != other["output_ids"]


def test_long_generation_stops_at_eos_with_stop_finish_reason(plain_sim):
    status, body = plain_sim.generate("Tell a story.", 200)
    assert status == 200
    assert body["meta_info"]["finish_reason"]["type"] == "stop"
    assert 0 < body["meta_info"]["completion_tokens"] < 200


def test_generate_without_speculative_algorithm_has_no_spec_metrics(plain_sim):
    meta = plain_sim.generate()[1]["meta_info"]
    assert "spec_verify_ct" not in meta and "spec_accept_length" not in meta


def test_generate_beyond_context_length_is_a_400(plain_sim):
    status, body = plain_sim.generate("hi", 5000)
    assert status == 400
    assert "maximum context length of 4096 tokens" in body["error"]["message"]


def test_chat_completions_answers_in_openai_shape(spec_sim):
    status, body = spec_sim.http(
        "POST",
        "/v1/chat/completions",
        {"model": "qwen3.6-27b", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4},
        headers=KEY,
    )
    assert status == 200
    assert body["object"] == "chat.completion"
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["message"]["content"]
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 4
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + 4


def test_chat_completions_requires_json_content_type(spec_sim):
    conn = http.client.HTTPConnection("127.0.0.1", spec_sim.port, timeout=5)
    conn.request("POST", "/v1/chat/completions", body=b"{}", headers={**KEY, "content-type": "text/plain"})
    resp = conn.getresponse()
    assert resp.status == 400 and b"Only 'application/json' is allowed" in resp.read()
    conn.close()


def test_api_key_is_enforced_except_on_health_and_ready(spec_sim):
    assert spec_sim.generate()[0] == 401
    assert spec_sim.http("GET", "/v1/models") == (401, {"error": "Unauthorized"})
    assert spec_sim.http("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert spec_sim.http("GET", "/v1/models", headers=KEY)[0] == 200
    assert spec_sim.http("GET", "/health")[0] == 200
    assert spec_sim.http("GET", "/ready")[0] == 200


def test_models_and_model_info_name_the_served_model(spec_sim, model_dirs):
    status, models = spec_sim.http("GET", "/v1/models", headers=KEY)
    assert status == 200 and models["object"] == "list"
    card = models["data"][0]
    assert card["id"] == "qwen3.6-27b" and card["owned_by"] == "sglang" and card["max_model_len"] == 262144
    info = spec_sim.http("GET", "/get_model_info", headers=KEY)[1]
    assert info["model_path"] == model_dirs["target"] and info["architectures"] == ["Qwen3NextForCausalLM"]
    assert spec_sim.http("GET", "/v1/models/nope", headers=KEY)[0] == 404


@pytest.mark.parametrize("path", ["/get_server_info", "/server_info"])
def test_server_info_echoes_args_and_a_simulator_version(spec_sim, path):
    status, info = spec_sim.http("GET", path, headers=KEY)
    assert status == 200
    assert info["speculative_algorithm"] == "DFLASH"
    assert info["speculative_num_draft_tokens"] == 16
    assert info["port"] == spec_sim.port and info["served_model_name"] == "qwen3.6-27b"
    assert info["version"] == "0.5.23-sim"
    assert info["api_key"] == "<redacted>" and "s3cret" not in str(info)


def test_only_the_deprecated_server_info_path_warns_in_the_log(spec_sim):
    # sglang 0.5.23 logs this warning on every /get_server_info call and none on /server_info.
    warning = "Endpoint '/get_server_info' is deprecated and will be removed in a future version."
    before = spec_sim.logs.count(warning)
    assert spec_sim.http("GET", "/server_info", headers=KEY)[0] == 200
    spec_sim.wait_log('"GET /server_info HTTP/1.1" 200', 5)
    assert spec_sim.logs.count(warning) == before
    assert spec_sim.http("GET", "/get_server_info", headers=KEY)[0] == 200
    spec_sim.wait_log('"GET /get_server_info HTTP/1.1" 200', 5)
    assert spec_sim.logs.count(warning) == before + 1


def test_unknown_path_is_404_and_wrong_method_405(plain_sim):
    assert plain_sim.http("GET", "/nope")[0] == 404
    assert plain_sim.http("GET", "/generate")[0] == 405


def test_sigterm_shuts_down_cleanly_with_exit_0(start_sim):
    sim = start_sim(env=FAST)
    sim.wait_ready(10)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(5) == 0
    assert "SIGTERM received" in sim.stderr and "Finished server process" in sim.stderr


def test_sigterm_while_loading_exits_0_at_once(start_sim):
    sim = start_sim(env={"SGLANG_SIM_LOAD_S": "30"})
    sim.wait_log("Init torch distributed begin.", 5)
    sim.proc.send_signal(signal.SIGTERM)
    assert sim.wait_exit(3) == 0
    assert sim.elapsed() < 5 and not sim.port_open()


def test_slow_start_keeps_the_port_closed_for_the_load_time(start_sim):
    sim = start_sim(env={"SGLANG_SIM_LOAD_S": "2.5", "SGLANG_SIM_WARMUP_S": "0.1"})
    time.sleep(1.8)
    assert not sim.port_open()
    assert "Load weight begin" in sim.stderr and "ready to roll" not in sim.stderr
    opened = sim.wait_port(5)
    assert 2.3 <= opened < 4.5
