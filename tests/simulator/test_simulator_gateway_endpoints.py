"""What SGLang's gateway (smg) asks of a worker, answered the way sglang answers it.

smg 1.13.0 registering an HTTP worker asks /health, /v1/models, /server_info, /model_info, then polls
/v1/loads (its load monitor) and /metrics, and proxies /generate and /v1/chat/completions, streamed or not
(observed against the simulator; sglang's own routes in sglang/srt/entrypoints/http_server.py and
v1_loads.py).
"""

import http.client
import json

import pytest
from simulator_harness import FAST

KEY = {"Authorization": "Bearer gw-key", "Content-Type": "application/json"}


@pytest.fixture(scope="module")
def sim(module_launcher):
    sim = module_launcher.start(["--api-key", "gw-key", "--served-model-name", "qm", "--tp-size", "2"], env=FAST)
    sim.wait_ready(10)
    return sim


def _events(sim, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=10)
    conn.request("POST", path, body=json.dumps(body), headers=KEY)
    resp = conn.getresponse()
    raw = resp.read().decode()
    conn.close()
    events = [line[len("data: ") :] for line in raw.split("\n\n") if line.startswith("data: ")]
    return resp.status, resp.getheader("content-type"), events


def test_v1_loads_reports_the_schedulers_load_as_sglang_does(sim):
    status, data = sim.http("GET", "/v1/loads", headers=KEY)
    assert status == 200
    assert set(data) == {"timestamp", "version", "accelerator", "num_accelerators", "loads"}
    assert data["num_accelerators"] == 2
    (load,) = data["loads"]
    assert load["dp_rank"] == 0 and load["num_running_reqs"] == 0 and load["max_running_requests"] > 0


def test_streamed_chat_completion_sends_role_content_finish_usage_and_done(sim):
    body = {
        "model": "qm",
        "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 6,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, content_type, events = _events(sim, "/v1/chat/completions", body)
    assert status == 200 and content_type == "text/event-stream"
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    # the same text as the unstreamed answer
    _, whole = sim.http("POST", "/v1/chat/completions", body={**body, "stream": False}, headers=KEY)
    assert text == whole["choices"][0]["message"]["content"] and text


def test_streamed_chat_without_usage_option_has_no_usage_chunk(sim):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "stream": True}
    status, _, events = _events(sim, "/v1/chat/completions", body)
    chunks = [json.loads(e) for e in events[:-1]]
    assert status == 200 and events[-1] == "[DONE]"
    assert all(c["choices"] for c in chunks) and {c["usage"] for c in chunks} == {None}


def test_every_route_smg_registers_a_worker_with_answers(sim):
    for path in ("/health", "/v1/models", "/server_info", "/model_info", "/v1/loads"):
        assert sim.http("GET", path, headers=KEY)[0] == 200, path
