"""HTTP probe: per-call timeouts, bearer auth, and the judgement of a generation."""

import io
import json
import socket
import time
import urllib.error

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import http_probe

GOOD_NATIVE = {
    "text": " Hello there",
    "output_ids": [1, 2, 3, 4],
    "meta_info": {
        "id": "x",
        "finish_reason": {"type": "length", "length": 4},
        "prompt_tokens": 3,
        "completion_tokens": 4,
        "e2e_latency": 0.05,
        "spec_accept_length": 3.2,
        "spec_verify_ct": 2,
    },
}


class FakeResponse:
    def __init__(self, status, body):
        self.status = status
        self._body = body if isinstance(body, bytes) else json.dumps(body).encode()

    def getcode(self):
        return self.status

    def read(self):
        return self._body


class FakeOpenUrl:
    """Routes (method, path) to a body, an HTTP status, or an exception; records every call."""

    def __init__(self, routes):
        self.routes = routes
        self.calls = []

    def __call__(self, url, data=None, headers=None, method=None, timeout=None, **kwargs):
        path = url.split("://", 1)[1].split("/", 1)[1]
        self.calls.append(
            {"path": "/" + path, "method": method, "timeout": timeout, "headers": headers, "data": data, **kwargs}
        )
        answer = self.routes.get((method, "/" + path))
        if answer is None:
            raise urllib.error.HTTPError(url, 404, "Not Found", {}, io.BytesIO(b'{"detail":"Not Found"}'))
        if isinstance(answer, Exception):
            raise answer
        status, body = answer
        if status >= 400:
            raise urllib.error.HTTPError(url, status, "err", {}, io.BytesIO(json.dumps(body).encode()))
        return FakeResponse(status, body)


def prober(routes, **kwargs):
    fake = FakeOpenUrl(routes)
    return http_probe.Prober("http://127.0.0.1:30000/", fake, **kwargs), fake


def test_native_probe_succeeds_on_output_tokens():
    p, fake = prober({("POST", "/generate"): (200, GOOD_NATIVE)})
    outcome = p.generate()
    assert outcome.ok
    data = outcome.as_dict()
    assert data["completion_tokens"] == 4 and data["finish_reason"] == "length"
    assert data["spec_accept_length"] == 3.2 and data["spec_verify_ct"] == 2
    sent = json.loads(fake.calls[0]["data"])
    assert sent == {"text": "Say hi.", "sampling_params": {"max_new_tokens": 16, "temperature": 0.0}}
    assert fake.calls[0]["timeout"] == 60
    assert fake.calls[0]["headers"]["Content-Type"] == "application/json"
    assert fake.calls[0]["use_proxy"] is False


def test_empty_text_with_tokens_is_success_unless_text_is_required():
    body = dict(GOOD_NATIVE, text="")
    assert prober({("POST", "/generate"): (200, body)})[0].generate().ok
    p, _ = prober({("POST", "/generate"): (200, body)}, probe=http_probe.ProbeSettings(require_text=True))
    outcome = p.generate()
    assert not outcome.ok and outcome.error == "no_text"


def test_zero_completion_tokens_fails():
    body = {"text": "", "output_ids": [], "meta_info": {"finish_reason": {"type": "stop"}, "completion_tokens": 0}}
    outcome = prober({("POST", "/generate"): (200, body)})[0].generate()
    assert not outcome.ok and outcome.error == "no_tokens"


def test_tokens_counted_from_output_ids_when_meta_lacks_them():
    body = {"text": "", "output_ids": [5, 6], "meta_info": {"finish_reason": {"type": "length"}}}
    outcome = prober({("POST", "/generate"): (200, body)})[0].generate()
    assert outcome.ok and outcome.completion_tokens == 2


def test_abort_finish_reason_fails_even_with_tokens():
    body = dict(
        GOOD_NATIVE,
        meta_info=dict(GOOD_NATIVE["meta_info"], finish_reason={"type": "abort", "message": "Abort in waiting queue"}),
    )
    outcome = prober({("POST", "/generate"): (200, body)})[0].generate()
    assert not outcome.ok and outcome.error == "abort" and "Abort in waiting queue" in outcome.reason


def test_expect_regex_checks_the_text():
    settings = http_probe.ProbeSettings(expect_regex=r"[Hh]ello")
    assert prober({("POST", "/generate"): (200, GOOD_NATIVE)}, probe=settings)[0].generate().ok
    settings = http_probe.ProbeSettings(expect_regex=r"^Paris$")
    outcome = prober({("POST", "/generate"): (200, GOOD_NATIVE)}, probe=settings)[0].generate()
    assert not outcome.ok and outcome.error == "regex"


def test_http_error_is_reported_with_status_and_body_excerpt():
    p, _ = prober({("POST", "/generate"): (400, {"error": "x" * 2000})})
    outcome = p.generate()
    assert not outcome.ok and outcome.error == "http_status"
    data = outcome.as_dict()
    assert data["status"] == 400 and len(data["body"]) == http_probe.BODY_EXCERPT_BYTES


def test_timeout_refused_and_reset_are_told_apart():
    cases = {
        "timeout": socket.timeout("timed out"),
        "refused": urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
        "connection": ConnectionResetError(104, "Connection reset by peer"),
    }
    for kind, exc in cases.items():
        outcome = prober({("POST", "/generate"): exc})[0].generate()
        assert outcome.error == kind, kind
    assert prober({("GET", "/health"): urllib.error.URLError(socket.timeout("timed out"))})[0].health().error == (
        "timeout"
    )


def test_each_call_has_its_own_timeout():
    p, fake = prober({("GET", "/health"): (200, {}), ("GET", "/v1/models"): (200, {"data": []})})
    p.health()
    p.models()
    p.server_info()
    timeouts = {c["path"]: c["timeout"] for c in fake.calls}
    assert timeouts["/health"] == http_probe.HEALTH_TIMEOUT_S
    assert timeouts["/v1/models"] == http_probe.MODELS_TIMEOUT_S
    assert timeouts["/server_info"] == http_probe.SERVER_INFO_TIMEOUT_S


def test_server_info_asks_the_current_path_only():
    # sglang 0.5.23 warns in its log on every /get_server_info call: a server that has
    # /server_info is never asked the deprecated path.
    p, fake = prober(
        {
            ("GET", "/server_info"): (200, {"speculative_algorithm": "DFLASH"}),
            ("GET", "/get_server_info"): (200, {"speculative_algorithm": "EAGLE"}),
        }
    )
    result = p.server_info()
    assert result.ok and result.json()["speculative_algorithm"] == "DFLASH"
    assert [c["path"] for c in fake.calls] == ["/server_info"]


@pytest.mark.parametrize("missing", [404, 405])
def test_server_info_falls_back_to_the_deprecated_path_where_the_new_one_is_missing(missing):
    p, fake = prober(
        {
            ("GET", "/server_info"): (missing, {"detail": "Not Found"}),
            ("GET", "/get_server_info"): (200, {"speculative_algorithm": "DFLASH"}),
        }
    )
    result = p.server_info()
    assert result.ok and result.json()["speculative_algorithm"] == "DFLASH"
    assert [c["path"] for c in fake.calls] == ["/server_info", "/get_server_info"]


def test_server_info_does_not_fall_back_on_other_errors():
    p, fake = prober({("GET", "/server_info"): (401, {"detail": "bad key"})})
    assert p.server_info().status == 401
    assert [c["path"] for c in fake.calls] == ["/server_info"]


def test_api_key_is_a_bearer_token_and_never_in_results():
    secret = "sk-very-secret"
    body = {"detail": "bad key %s" % secret}
    p, fake = prober({("POST", "/generate"): (401, body)}, api_key=secret)
    outcome = p.generate()
    assert fake.calls[0]["headers"]["Authorization"] == "Bearer " + secret
    assert secret not in json.dumps(outcome.as_dict(secret))


def test_openai_probe_takes_the_model_from_v1_models_and_reads_usage():
    chat = {
        "choices": [{"message": {"role": "assistant", "content": "Hi"}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 8},
        "sglext": {"spec_tokens_details": {"spec_accept_length": 2.5, "spec_verify_ct": 3}},
    }
    routes = {
        ("GET", "/v1/models"): (200, {"data": [{"id": "qwen3.6-27b"}, {"id": "other"}]}),
        ("POST", "/v1/chat/completions"): (200, chat),
    }
    p, fake = prober(routes, probe=http_probe.ProbeSettings(api="openai", max_new_tokens=8))
    outcome = p.generate()
    assert outcome.ok and outcome.completion_tokens == 8 and outcome.spec_accept_length == 2.5
    sent = json.loads(fake.calls[-1]["data"])
    assert sent["model"] == "qwen3.6-27b" and sent["max_tokens"] == 8
    assert sent["messages"] == [{"role": "user", "content": "Say hi."}]


def test_openai_probe_uses_served_model_name_without_asking():
    chat = {"choices": [{"message": {"content": ""}, "finish_reason": "abort"}], "usage": {"completion_tokens": 0}}
    p, fake = prober(
        {("POST", "/v1/chat/completions"): (200, chat)},
        probe=http_probe.ProbeSettings(api="openai"),
        served_model_name="served",
    )
    outcome = p.generate()
    assert not outcome.ok and outcome.error == "abort"
    assert [c["path"] for c in fake.calls] == ["/v1/chat/completions"]


def test_non_json_body_is_a_bad_response():
    outcome = prober({("POST", "/generate"): (200, b"<html>proxy</html>")})[0].generate()
    assert not outcome.ok and outcome.error == "bad_response"


def test_probe_settings_reject_unknown_api():
    with pytest.raises(ValueError, match="native or openai"):
        http_probe.ProbeSettings(api="grpc")
    assert http_probe.ProbeSettings.from_dict({"timeout": None, "max_new_tokens": 4}).timeout == 60.0


def test_background_call_runs_off_the_caller_thread():
    gate = {"go": False}

    def slow():
        while not gate["go"]:
            time.sleep(0.01)
        return 42

    call = http_probe.BackgroundCall(slow)
    assert not call.done()
    gate["go"] = True
    for _ in range(200):
        if call.done():
            break
        time.sleep(0.01)
    assert call.done() and call.result() == 42


def test_background_call_reraises_errors():
    def boom():
        raise ValueError("bad")

    call = http_probe.BackgroundCall(boom)
    for _ in range(200):
        if call.done():
            break
        time.sleep(0.01)
    with pytest.raises(ValueError, match="bad"):
        call.result()
