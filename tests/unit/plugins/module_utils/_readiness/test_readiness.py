"""The readiness state machine, driven by a fake clock, fake unit states and a fake sglang.

Time never really passes here: ``FakeClock.sleep`` advances the clock, HTTP calls finish
when the fake clock reaches their latency, and a hanging call simply never finishes.
"""

import io
import json
import os
import socket
import urllib.error

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import http_probe
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import readiness as readiness_mod
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import ProcessWatcher
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import (
    WARMING_POLL_S,
    Params,
    Readiness,
)
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import UnitWatcher, WatchState

HANG = object()
REFUSED = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))

OOM_LOG = (
    "[2026-05-09 07:35:20 TP0] Load weight end. elapsed=0.05 s, type=Qwen3ForCausalLM\n"
    "[2026-05-09 07:35:21 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/v/sglang/srt/model_executor/pool_configurator.py", line 97, in __post_init__\n'
    "    raise RuntimeError(msg)\n"
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
    "Current value: mem_fraction_static=0.88\n"
    "[2026-05-09 07:35:21] Received sigquit from a child process. It usually means the child failed.\n"
)


def generated(tokens=16, finish="length", accept=3.2, text=" hi"):
    meta = {"finish_reason": {"type": finish}, "completion_tokens": tokens, "e2e_latency": 0.1}
    if accept is not None:
        meta.update(spec_accept_length=accept, spec_verify_ct=5)
    return {"text": text, "output_ids": list(range(tokens)), "meta_info": meta}


SERVER_INFO = {
    "version": "0.5.23",
    "speculative_algorithm": "DFLASH",
    "speculative_num_draft_tokens": 16,
    "api_key": "must-not-leak",
    "internal_states": [{"avg_spec_accept_length": 3.1}],
}


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += max(seconds, 1e-6)  # a real sleep always takes some time (no float-residue busy loops)


class FakeSglang:
    """A fake server: ``behaviour(t)`` gives, per (method, path), (latency_s, status, body) / HANG / an exception."""

    def __init__(self, clock, behaviour):
        self.clock = clock
        self.behaviour = behaviour
        self.calls = []

    def open_url(self, url, data=None, headers=None, method=None, timeout=None, **kwargs):
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        self.calls.append((self.clock(), method, path, timeout))
        self._latency = 0.01
        answer = self.behaviour(self.clock()).get((method, path), (0.01, 404, {"detail": "Not Found"}))
        if answer is HANG:
            self._latency = None
            raise socket.timeout("timed out")
        if isinstance(answer, Exception):
            raise answer
        latency, status, body = answer
        self._latency = latency
        payload = json.dumps(body).encode()
        if status >= 400:
            raise urllib.error.HTTPError(url, status, "err", {}, io.BytesIO(payload))

        class Response:
            def getcode(self):
                return status

            def read(self):
                return payload

        response = Response()
        response.status = status
        return response

    def paths(self, method=None):
        return [p for _, m, p, _ in self.calls if method is None or m == method]


class FakeTask:
    def __init__(self, clock, value, latency):
        self.clock = clock
        self.started = clock()
        self.value = value
        self.latency = latency

    def done(self):
        return self.latency is not None and self.clock() >= self.started + self.latency

    def result(self):
        return self.value

    def wait(self, timeout):
        """Like BackgroundCall.wait on the fake clock: returns as soon as the call has finished."""
        left = timeout if self.latency is None else min(timeout, max(self.started + self.latency - self.clock(), 0.0))
        self.clock.sleep(left)
        return self.done()


class FakeProber(http_probe.Prober):
    """The real prober's judgement, with calls finishing on the fake clock (or never: HANG)."""

    def __init__(self, clock, sglang, **kwargs):
        super().__init__("http://127.0.0.1:30000", sglang.open_url, clock=clock, **kwargs)
        self.fake_clock = clock
        self.sglang = sglang
        self.started = []

    def start(self, name, **kwargs):
        self.started.append((self.fake_clock(), name))
        value = getattr(self, name)(**kwargs)
        latency = self.sglang._latency
        if latency is not None and isinstance(value, http_probe.HttpResult):
            value.latency_s = latency  # the real prober measures the call; here the fake clock stood still
        return FakeTask(self.fake_clock, value, latency)


class FakeWatcher:
    """``states(t)`` -> WatchState; ``log(t)`` -> this start's log text."""

    kind = "unit"

    def __init__(self, clock, states, log=lambda t: ""):
        self.clock = clock
        self.states = states
        self.log = log
        self.polls = 0

    def poll(self):
        self.polls += 1
        return self.states(self.clock())

    def read_log(self, tail_lines=None):
        return self.log(self.clock())


def running(t=None):
    return WatchState(True, description="unit sglang.service is active/running", detail={"name": "sglang.service"})


def dead(description="unit sglang.service is failed/failed (main process killed, status 9)"):
    return WatchState(False, dead=True, description=description, detail={"name": "sglang.service"})


def healthy_server(load_s=10.0, warm_s=2.0, gen=None, info=SERVER_INFO):
    def behaviour(t):
        if t < load_s:
            return {("GET", "/health"): REFUSED, ("GET", "/v1/models"): REFUSED, ("POST", "/generate"): REFUSED}
        if t < load_s + warm_s:
            return {("GET", "/health"): (0.01, 503, {}), ("GET", "/v1/models"): (0.01, 200, {"data": []})}
        return {
            ("GET", "/health"): (0.05, 200, {}),
            ("GET", "/v1/models"): (0.002, 200, {"data": [{"id": "m"}]}),
            ("POST", "/generate"): gen if gen is not None else (0.4, 200, generated()),
            ("GET", "/server_info"): (0.02, 200, info),
        }

    return behaviour


def make(behaviour, states=running, log=lambda t: "", probe=None, api_key=None, **params):
    clock = FakeClock()
    sglang = FakeSglang(clock, behaviour)
    prober = FakeProber(clock, sglang, probe=probe or http_probe.ProbeSettings(), api_key=api_key)
    watcher = FakeWatcher(clock, states, log)
    params.setdefault("startup_timeout", 900)
    params.setdefault("poll_interval", 0.5)
    readiness = Readiness(watcher, prober, Params(api_key=api_key, **params), clock=clock, sleep=clock.sleep)
    return readiness, clock, sglang, watcher


# -- ready ---------------------------------------------------------------------------------------------


def test_healthy_start_is_ready_after_a_real_generation():
    readiness, _clock, sglang, _ = make(healthy_server(), expect_speculative_algorithm="dflash", min_accept_length=2)
    result = readiness.run()
    assert result["ready"] is True and result["phase"] == "ready" and result["failure_class"] is None
    assert 12.0 <= result["time_to_ready_s"] <= 13.5
    assert result["probe"]["completion_tokens"] == 16 and result["probe"]["ok"] is True
    assert result["server"]["speculative_algorithm"] == "DFLASH"
    assert result["server"]["avg_spec_accept_length"] == 3.1
    assert "api_key" not in result["server"]
    assert sglang.paths("POST") == ["/generate"]


def test_health_200_generation_and_server_info_run_back_to_back_not_a_poll_apart():
    readiness, _clock, sglang, _ = make(healthy_server(), poll_interval=0.5)
    result = readiness.run()
    assert result["ready"] is True
    first_200 = min(t for t, m, p, _ in sglang.calls if p == "/health" and t >= 12.0)
    generate_at = next(t for t, m, p, _ in sglang.calls if p == "/generate")
    info_at = next(t for t, m, p, _ in sglang.calls if p == "/server_info")
    # health answers in 0.05 s, the generation in 0.4 s, server info in 0.02 s: no poll interval between them
    assert generate_at - first_200 <= 0.06
    assert info_at - generate_at <= 0.41
    assert result["elapsed_s"] - first_200 <= 0.5


def test_health_is_still_polled_once_per_interval_while_refused():
    readiness, _clock, sglang, _ = make(healthy_server(), poll_interval=0.5)
    readiness.run()
    times = [t for t, m, p, _ in sglang.calls if p == "/health" and t < 10.0]
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert gaps and min(gaps) >= 0.5 - 1e-6 and max(gaps) <= 0.5 + 1e-6


def test_empty_text_with_tokens_is_ready():
    gen = (0.3, 200, generated(text=""))
    result = make(healthy_server(gen=gen))[0].run()
    assert result["ready"] is True and result["probe"]["text"] == ""


def test_slow_start_is_not_a_failure_and_reports_progress():
    progress = "Loading safetensors checkpoint shards:  75% Completed | 3/4"
    readiness, _, _, _watcher = make(healthy_server(load_s=600), log=lambda t: "Init\n" + progress + "\n")
    result = readiness.run()
    assert result["ready"] is True and result["time_to_ready_s"] > 600
    assert result["progress"] == progress


def test_slow_start_beyond_startup_timeout_is_timeout_with_progress():
    progress = "[TP0] Capture cuda graph begin. This can take up to several minutes."
    readiness, _clock, _, _ = make(healthy_server(load_s=10_000), log=lambda t: progress, startup_timeout=120)
    result = readiness.run()
    assert result["failure_class"] == "timeout" and result["failed_in_phase"] == "loading"
    assert 120 <= result["elapsed_s"] <= 121
    assert result["progress"] == progress and "Capture cuda graph begin" in result["reason"]


# -- death ---------------------------------------------------------------------------------------------


def test_crash_while_loading_fails_within_one_poll_with_class_exception_and_traceback():
    readiness, _clock, _, _ = make(
        healthy_server(load_s=100),
        states=lambda t: dead() if t >= 5.0 else running(),
        log=lambda t: OOM_LOG if t >= 5.0 else "",
    )
    result = readiness.run()
    assert result["ready"] is False and result["failure_class"] == "oom_mem_fraction"
    assert result["failed_in_phase"] == "loading"
    # one poll interval plus the journal settle re-read, never the deadline
    assert result["elapsed_s"] - 5.0 <= 0.5 + 0.65
    assert result["exception_line"].startswith("RuntimeError: Not enough memory.")
    assert "Traceback (most recent call last):" in result["traceback"]
    assert result["traceback"].rstrip().endswith("mem_fraction_static=0.88")
    assert result["hint"] and "--mem-fraction-static" in result["hint"]
    assert "Not enough memory" in result["reason"]


def test_death_without_a_known_signature_is_crashed_on_start():
    log = "Traceback (most recent call last):\n  File \"x\", line 1\nKeyError: 'model.layers.0.dt_bias'\n"
    readiness, _, _, _ = make(healthy_server(), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log)
    result = readiness.run()
    assert result["failure_class"] == "crashed_on_start"
    assert result["exception_line"] == "KeyError: 'model.layers.0.dt_bias'"


def test_journal_is_reread_until_it_stops_growing():
    # journald lags the death: the traceback appears 0.2 s after systemd reports the unit failed
    def log(t):
        return OOM_LOG if t >= 2.2 else OOM_LOG.split("Scheduler hit", maxsplit=1)[0]

    readiness, _, _, _ = make(healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=log)
    result = readiness.run()
    assert result["failure_class"] == "oom_mem_fraction"


def test_crash_during_a_hanging_generation_is_seen_within_one_poll():
    server = healthy_server(load_s=1, warm_s=0, gen=HANG)
    readiness, _clock, _sglang, _ = make(
        server,
        states=lambda t: dead() if t >= 8 else running(),
        log=lambda t: "RuntimeError: CUDA error: an illegal memory access\n",
    )
    result = readiness.run()
    assert result["failure_class"] == "cuda_error" and result["failed_in_phase"] == "probing"
    assert result["elapsed_s"] <= 8 + 0.5 + 0.65  # not the 60 s probe timeout


def test_restart_loop_is_detected_not_waited_out():
    restarted = WatchState(False, restarted=True, description="unit u restarted: NRestarts 0 -> 1")
    readiness, _, _, _ = make(
        healthy_server(load_s=1000), states=lambda t: restarted if t >= 3 else running(), log=lambda t: OOM_LOG
    )
    result = readiness.run()
    assert result["failure_class"] == "restart_loop"
    assert result["cause_class"] == "oom_mem_fraction"
    assert result["elapsed_s"] < 5
    assert "NRestarts 0 -> 1" in result["reason"]


def test_unit_never_started_is_not_started():
    never = WatchState(False, dead=True, not_started=True, description="unit nope.service is not-found")
    result = make(healthy_server(), states=lambda t: never)[0].run()
    assert result["failure_class"] == "not_started" and result["elapsed_s"] < 1


# -- wedged and probe failures -------------------------------------------------------------------------


def test_wedged_engine_is_never_ready():
    # /v1/models answers in 2 ms, /health never answers within its timeout, /generate never answers
    def behaviour(t):
        return {
            ("GET", "/health"): HANG,
            ("GET", "/v1/models"): (0.002, 200, {"data": [{"id": "m"}]}),
            ("POST", "/generate"): HANG,
            ("GET", "/server_info"): HANG,
        }

    readiness, _clock, sglang, _ = make(behaviour, probe=http_probe.ProbeSettings(timeout=30))
    result = readiness.run()
    assert result["ready"] is False and result["failure_class"] == "wedged"
    assert "/v1/models answered HTTP 200" in result["reason"]
    assert "POST /generate did not answer within 30s" in result["reason"]
    assert result["probe"]["error"] == "timeout"
    # /health given up after SLOW_HEALTH_503_S (1) + probe timeout (30) + slack, far from startup_timeout
    assert 31 <= result["elapsed_s"] <= 33
    assert "/server_info" not in sglang.paths()


@pytest.mark.parametrize("port_state", [None, "own"])  # no port check / the tree's own listener
def test_a_health_call_still_unanswered_after_a_second_hands_over_to_the_generation(port_state):
    """ "Starting" answers /health at once: one that hangs is the engine's own health generation."""

    def behaviour(t):
        return {
            ("GET", "/health"): HANG,
            ("POST", "/generate"): (0.4, 200, generated()),
            ("GET", "/server_info"): (0.02, 200, SERVER_INFO),
        }

    readiness, _clock, sglang, _ = make(behaviour, port=30000 if port_state else 0)
    if port_state:
        readiness.port_check = lambda port, root: {"state": port_state, "port": port, "reason": port_state}
    result = readiness.run()
    assert result["ready"] is True
    assert result["elapsed_s"] <= 1.0 + 0.5 + 0.4 + 0.1  # slow-health cut, one wait, the generation, info
    assert sglang.paths("GET").count("/health") == 1


def test_a_refused_health_reported_late_on_a_busy_host_keeps_loading_while_nothing_listens():
    """A loaded 2-core machine reported a refused /health after more than a second; nothing listened (the
    port check says free), so the engine was still loading: no generation is sent, the timeout says loading."""

    def behaviour(t):
        return {("GET", "/health"): REFUSED, ("POST", "/generate"): REFUSED}

    readiness, _clock, sglang, _ = make(behaviour, startup_timeout=8, port=30000)
    refused_at_once = readiness.prober._open_url

    def refused_late(url, **kwargs):
        try:
            return refused_at_once(url, **kwargs)
        finally:
            if url.endswith("/health"):
                sglang._latency = 2.5

    readiness.prober._open_url = refused_late
    checks = []
    readiness.port_check = lambda port, root: checks.append(port) or {"state": "free", "port": port, "reason": "free"}
    result = readiness.run()
    assert result["failure_class"] == "timeout" and result["failed_in_phase"] == "loading", result["reason"]
    assert sglang.paths("POST") == []
    assert checks and set(checks) == {30000}


def test_the_ready_moment_is_seen_within_the_warming_poll():
    """While /health answers 503 at once it is polled every WARMING_POLL_S, not every poll interval."""
    readiness, _clock, sglang, _ = make(healthy_server(load_s=10, warm_s=2), poll_interval=0.5)
    result = readiness.run()
    assert result["ready"] is True
    # warm until t=12; then /health 0.05 + generation 0.4 + server info 0.02, after at most one warming poll
    assert 12.47 <= result["time_to_ready_s"] <= 12.47 + WARMING_POLL_S + 0.01
    warming = [t for t, m, p, _ in sglang.calls if p == "/health" and 10 <= t < 12]
    gaps = [b - a for a, b in zip(warming, warming[1:])]
    assert gaps and max(gaps) <= WARMING_POLL_S + 0.011, gaps


def test_wedged_engine_whose_health_answers_503_slowly_is_probed_not_left_warming():
    # SGLANG_HEALTH_CHECK_TIMEOUT shorter than our health timeout: /health answers 503 after 3 s
    def behaviour(t):
        return {
            ("GET", "/health"): (3.0, 503, {}),
            ("GET", "/v1/models"): (0.002, 200, {"data": [{"id": "m"}]}),
            ("POST", "/generate"): HANG,
        }

    readiness, _clock, _, _ = make(behaviour, probe=http_probe.ProbeSettings(timeout=10))
    result = readiness.run()
    assert result["failure_class"] == "wedged"
    assert result["elapsed_s"] < 20


def test_fast_503_after_the_ready_line_is_probed_not_left_warming():
    def behaviour(t):
        return {
            ("GET", "/health"): (0.01, 503, {}),
            ("GET", "/v1/models"): (0.002, 200, {"data": [{"id": "m"}]}),
            ("POST", "/generate"): HANG,
        }

    log = "[2026-05-09 07:36:00] The server is fired up and ready to roll!\n"
    readiness, _clock, _, _ = make(behaviour, log=lambda t: log, probe=http_probe.ProbeSettings(timeout=10))
    result = readiness.run()
    assert result["failure_class"] == "wedged"
    assert result["elapsed_s"] < 20


def test_fast_503_before_the_ready_line_is_warm_up():
    readiness, _clock, _, _ = make(healthy_server(load_s=1, warm_s=120), log=lambda t: "Load weight end.")
    result = readiness.run()
    assert result["ready"] is True and result["time_to_ready_s"] >= 121


def test_wedged_after_health_200_too():
    result = make(healthy_server(load_s=0, warm_s=0, gen=HANG), probe=http_probe.ProbeSettings(timeout=10))[0].run()
    assert result["failure_class"] == "wedged" and result["failed_in_phase"] == "confirming"


@pytest.mark.parametrize(
    ("gen", "error"),
    [
        ((0.1, 200, generated(tokens=0, finish="abort", accept=None)), "abort"),
        ((0.1, 200, generated(tokens=0, finish="stop", accept=None)), "no_tokens"),
        ((0.1, 500, {"error": "internal"}), "http_status"),
    ],
)
def test_bad_generation_is_probe_failed_after_a_short_grace(gen, error):
    readiness, _clock, _, _ = make(healthy_server(load_s=0, warm_s=0, gen=gen))
    result = readiness.run()
    assert result["failure_class"] == "probe_failed" and result["probe"]["error"] == error
    assert result["failed_in_phase"] == "probing"
    assert result["elapsed_s"] < 4


def test_process_dying_right_after_a_failed_probe_is_a_crash_not_probe_failed():
    gen = (0.1, 500, {"error": "connection lost"})
    readiness, _, _, _ = make(
        healthy_server(load_s=0, warm_s=0, gen=gen),
        states=lambda t: dead() if t >= 1.2 else running(),
        log=lambda t: "RuntimeError: CUDA error: an illegal memory access was encountered\n",
    )
    result = readiness.run()
    assert result["failure_class"] == "cuda_error"


def test_regex_mismatch_is_probe_failed():
    probe = http_probe.ProbeSettings(expect_regex="Paris")
    result = make(healthy_server(load_s=0, warm_s=0), probe=probe)[0].run()
    assert result["failure_class"] == "probe_failed" and result["probe"]["error"] == "regex"


def test_generation_cut_by_the_deadline_is_timeout_not_wedged():
    readiness, _, _, _ = make(healthy_server(load_s=0, warm_s=0, gen=HANG), startup_timeout=20)
    result = readiness.run()
    assert result["failure_class"] == "timeout" and result["elapsed_s"] <= 22


# -- speculative checks --------------------------------------------------------------------------------


def test_wrong_speculative_algorithm_is_spec_mismatch():
    result = make(healthy_server(load_s=0, warm_s=0), expect_speculative_algorithm="DDTREE")[0].run()
    assert result["failure_class"] == "spec_mismatch" and "DDTREE" in result["reason"]


def test_no_speculative_algorithm_is_spec_mismatch():
    info = dict(SERVER_INFO, speculative_algorithm=None)
    result = make(healthy_server(load_s=0, warm_s=0, info=info), expect_speculative_algorithm="DFLASH")[0].run()
    assert result["failure_class"] == "spec_mismatch" and "none" in result["reason"]


def test_low_accept_length_is_low_acceptance():
    gen = (0.2, 200, generated(accept=1.05))
    result = make(healthy_server(load_s=0, warm_s=0, gen=gen), min_accept_length=2.0)[0].run()
    assert result["failure_class"] == "low_acceptance" and "1.05" in result["reason"]


def test_accept_length_falls_back_to_the_server_average():
    gen = (0.2, 200, generated(accept=None))
    info = dict(SERVER_INFO, internal_states=[{"avg_spec_accept_length": 1.2}])
    result = make(healthy_server(load_s=0, warm_s=0, gen=gen, info=info), min_accept_length=2.0)[0].run()
    assert result["failure_class"] == "low_acceptance"


def test_unreported_accept_length_is_a_warning_not_a_failure():
    gen = (0.2, 200, generated(accept=None))
    info = dict(SERVER_INFO, internal_states=[])
    result = make(healthy_server(load_s=0, warm_s=0, gen=gen, info=info), min_accept_length=2.0)[0].run()
    assert result["ready"] is True
    assert any("min_accept_length not checked" in w for w in result["notes"])


def test_server_info_hanging_fails_only_when_the_algorithm_must_be_checked():
    def behaviour(t):
        routes = healthy_server(load_s=0, warm_s=0)(t)
        routes[("GET", "/server_info")] = HANG
        return routes

    assert make(behaviour)[0].run()["ready"] is True
    result = make(behaviour, expect_speculative_algorithm="DFLASH")[0].run()
    assert result["failure_class"] == "probe_failed" and "server info" in result["reason"]


# -- secrets and check mode ----------------------------------------------------------------------------


def test_api_key_never_appears_in_the_result():
    secret = "sk-secret-123"
    gen = (0.1, 401, {"detail": "invalid key sk-secret-123"})
    log = "[x] server_args=ServerArgs(api_key='sk-secret-123')\nRuntimeError: boom sk-secret-123\n"
    result = make(healthy_server(load_s=0, warm_s=0, gen=gen), api_key=secret, log=lambda t: log)[0].run()
    assert result["failure_class"] == "probe_failed"
    assert secret not in json.dumps(result)


def test_snapshot_reports_without_waiting_or_generating():
    readiness, clock, sglang, _ = make(healthy_server(load_s=0, warm_s=100))
    result = readiness.snapshot()
    assert result["ready"] is False and result["phase"] == "warming"
    assert sglang.paths("POST") == [] and clock.now == 0
    assert "check mode" in result["reason"]


def test_snapshot_of_a_dead_unit_classifies_it():
    readiness, _, _, _ = make(healthy_server(), states=lambda t: dead(), log=lambda t: OOM_LOG)
    result = readiness.snapshot()
    assert result["failure_class"] == "oom_mem_fraction"


def test_journal_in_the_result_is_bounded():
    noise = "".join("noise line %d %s\n" % (i, "z" * 80) for i in range(5000))
    readiness, _, _, _ = make(
        healthy_server(load_s=100),
        states=lambda t: dead() if t >= 1 else running(),
        log=lambda t: noise + OOM_LOG,
        journal_max_bytes=4096,
    )
    result = readiness.run()
    assert result["journal_truncated"] is True
    assert len(result["journal"].encode()) <= 4096
    assert "Not enough memory" in result["journal"]


def test_death_to_verdict_is_measured_from_the_process_exit():
    def states(t):
        if t >= 5.0:
            return WatchState(False, dead=True, description="failed", detail={"name": "u"}, exited_at=4.9)
        return running()

    readiness, clock, _, _ = make(healthy_server(load_s=100), states=states, log=lambda t: OOM_LOG)
    result = readiness.run()
    assert result["unit"]["death_to_verdict_s"] == pytest.approx(clock.now - 4.9)
    assert result["unit"]["death_to_verdict_s"] < 1.5


def test_journal_is_awaited_until_systemds_end_lines_arrive():
    # journald has the traceback's first half and nothing new for a while; the rest and systemd's
    # own end lines come 1.2 s after the death was seen
    head = OOM_LOG.split("RuntimeError", maxsplit=1)[0]
    end = "sglang.service: Main process exited, code=killed, status=9/KILL\n"

    def log(t):
        return OOM_LOG + end if t >= 3.2 else head

    readiness, _, _, watcher = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=log
    )
    watcher.log_settled = lambda text: "Main process exited" in text
    result = readiness.run()
    assert result["exception_line"].startswith("RuntimeError: Not enough memory"), result["exception_line"]


def _lagging_journal(death_at, complete_at):
    """journald has half the traceback when the death is seen; the rest and systemd's end lines later."""
    head = OOM_LOG.split("RuntimeError", maxsplit=1)[0]
    end = "sglang.service: Main process exited, code=killed, status=9/KILL\n"
    return lambda t: OOM_LOG + end if t >= complete_at else head


def test_a_synced_journal_is_read_once_without_waiting():
    """``journalctl --sync`` returns once journald has processed the dead process's output: no settle wait."""
    synced = []
    readiness, clock, _, watcher = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=lambda t: OOM_LOG + "x"
    )
    watcher.log_settled = lambda text: True
    watcher.sync_log = lambda: synced.append(clock()) or True
    result = readiness.run()
    assert result["failure_class"] == "oom_mem_fraction"
    assert len(synced) == 1 and clock() == synced[0], "the verdict came without a sleep after the sync"


def test_a_sync_that_leaves_the_journal_incomplete_falls_back_to_waiting():
    log = _lagging_journal(death_at=2, complete_at=3.2)
    readiness, clock, _, watcher = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=log
    )
    watcher.log_settled = lambda text: "Main process exited" in text
    watcher.sync_log = lambda: True
    result = readiness.run()
    assert result["exception_line"].startswith("RuntimeError: Not enough memory"), result["exception_line"]
    assert clock() >= 3.2


def test_a_synced_journal_whose_last_traceback_is_cut_is_read_again_until_whole():
    """CI, 2026-11-30 (systemd 252): after the sync, systemd's end line was in the journal, in the middle
    of the final traceback, and the exception line came later. The watcher's own settle rule decides."""
    cut = OOM_LOG.split("RuntimeError: Not enough", maxsplit=1)[0]  # the frames, not the exception line
    end = "sglang.service: Main process exited, code=killed, status=9/KILL\n"

    def log(t):
        return cut + end + OOM_LOG[len(cut) :] if t >= 2.6 else cut + end

    readiness, _, _, watcher = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=log
    )
    watcher.log_settled = UnitWatcher.log_settled
    watcher.sync_log = lambda: True
    result = readiness.run()
    assert result["exception_line"].startswith("RuntimeError: Not enough memory"), result["exception_line"]
    assert result["failure_class"] == "oom_mem_fraction"
    assert result["journal"].rstrip().endswith(end.strip())


def test_a_failing_sync_is_a_note_and_the_journal_is_still_awaited():
    readiness, _, _, watcher = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 2 else running(), log=_lagging_journal(2, 3.2)
    )
    watcher.log_settled = lambda text: "Main process exited" in text

    def sync_log():
        raise OSError("journalctl: not found")

    watcher.sync_log = sync_log
    result = readiness.run()
    assert result["exception_line"].startswith("RuntimeError: Not enough memory")
    assert any("could not sync the journal" in note for note in result["notes"])


# -- deaths judged from the fatal end of the log; serving phase -------------------------------------

HARMONY_LINE = (
    "[2026-11-30 18:00:01] OpenAI Responses API (/v1/responses) disabled: openai-harmony is not installed "
    "(ModuleNotFoundError: No module named 'openai_harmony')"
)
SERVED_THEN_KILLED = "\n".join(
    [
        HARMONY_LINE,
        "[2026-11-30 18:00:05 TP0] Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16",
        "[2026-11-30 18:00:40] The server is fired up and ready to roll!",
        '[2026-11-30 18:00:41] INFO:     127.0.0.1:50000 - "POST /generate HTTP/1.1" 200 OK',
        "[2026-11-30 18:02:00] Subprocess scheduler_0 (pid=4242) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...",
    ]
)


def test_scheduler_killed_after_ready_is_scheduler_died_in_phase_serving():
    """The harmless ModuleNotFoundError logged at start must not hijack the verdict (issue 9)."""
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: SERVED_THEN_KILLED
    )
    result = readiness.run()
    assert result["failure_class"] == "scheduler_died"
    assert result["failed_in_phase"] == "serving"
    assert result["exception_line"].startswith("[2026-11-30 18:02:00] Subprocess scheduler_0")
    assert result["traceback"] is None


def test_scheduler_killed_while_our_generation_is_in_flight_is_still_phase_serving():
    """H200, 2026-11-30 (tests/device/readiness_real.py): the scheduler SIGKILLed, /health hangs, the loop
    hands over to the test generation after 1 s, then sglang's main process exits: phase serving, not probing."""

    def behaviour(t):
        return {("GET", "/health"): HANG, ("POST", "/generate"): HANG}

    readiness, _, _, _ = make(
        behaviour, states=lambda t: dead() if t >= 5.8 else running(), log=lambda t: SERVED_THEN_KILLED
    )
    result = readiness.run()
    assert result["failure_class"] == "scheduler_died"
    assert result["failed_in_phase"] == "serving"


def test_death_after_ready_with_nothing_fatal_logged_is_died_while_serving():
    log = "\n".join([HARMONY_LINE, "The server is fired up and ready to roll!"])
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log
    )
    result = readiness.run()
    assert result["failure_class"] == "died_while_serving" and result["failed_in_phase"] == "serving"


def test_a_traceback_survived_before_ready_does_not_decide_a_later_death():
    log = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in <module>',
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "[2026-11-30 18:00:05 TP0] Load weight end. type=Qwen3ForCausalLM",
            "[2026-11-30 18:00:06] The server is fired up and ready to roll!",
            "[2026-11-30 18:00:07] Subprocess scheduler_0 (pid=9) crashed with exit code -9.",
        ]
    )
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log
    )
    result = readiness.run()
    assert result["failure_class"] == "scheduler_died" and result["failed_in_phase"] == "serving"
    assert result["traceback"] is None


def test_kv_cache_wording_of_0_5_17_is_oom_mem_fraction():
    log = (
        "[2026-11-30 18:00:05 TP0] Load weight end. type=Qwen3ForCausalLM\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/sglang/srt/model_executor/model_runner.py", line 1, in init_memory_pool\n'
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005. "
        "Raise --mem-fraction-static above 0.001\n"
    )
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log
    )
    result = readiness.run()
    assert result["failure_class"] == "oom_mem_fraction"
    assert result["exception_line"].startswith("ValueError: Loaded weights leave no GPU memory")


def test_returned_log_has_no_ansi_and_collapsed_polls():
    polls = "\n".join('INFO:     127.0.0.1:%d - "GET /health HTTP/1.1" 503 Service Unavailable' % p for p in range(50))
    log = "\x1b[32mLoad weight end.\x1b[0m\n" + polls + "\nSubprocess scheduler_0 (pid=9) crashed with exit code -9.\n"
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log
    )
    result = readiness.run()
    assert "\x1b" not in result["journal"]
    assert "[49 more health-poll access lines: 50 x GET /health -> 503]" in result["journal"]
    assert result["journal"].count("GET /health") == 2  # the first line and the summary


# -- speculation evidence; time to ready from the process start -------------------------------------


def test_speculative_algorithm_without_evidence_in_the_probe_is_spec_mismatch():
    readiness, _, _, _ = make(
        healthy_server(gen=(0.2, 200, generated(accept=None))), expect_speculative_algorithm="DFLASH"
    )
    result = readiness.run()
    assert result["ready"] is False and result["failure_class"] == "spec_mismatch"
    assert "no speculative decoding" in result["reason"]


def test_speculation_evidence_is_a_verify_count_or_an_accept_length():
    assert readiness_mod.speculation_evidence({"spec_verify_ct": 31})
    assert readiness_mod.speculation_evidence({"spec_accept_length": 1.03})
    assert not readiness_mod.speculation_evidence({"spec_verify_ct": 0})
    assert not readiness_mod.speculation_evidence({})
    assert not readiness_mod.speculation_evidence(None)


def test_time_to_ready_counts_from_the_process_start_and_elapsed_from_the_module():
    readiness, _, _, watcher = make(healthy_server())
    watcher.kind = "process"
    watcher.started_ago = lambda: 30.0  # the process had been starting for 30 s when the module began
    result = readiness.run()
    assert result["time_to_ready_from"] == "process"
    assert 12.0 <= result["elapsed_s"] <= 13.5
    assert 42.0 <= result["time_to_ready_s"] <= 43.5


def test_time_to_ready_falls_back_to_the_module_start():
    result = make(healthy_server())[0].run()
    assert result["time_to_ready_from"] == "module"
    assert result["time_to_ready_s"] == result["elapsed_s"]


def test_a_rank_traceback_followed_by_another_ranks_progress_still_decides():
    """tp > 1: rank 1 may log progress after rank 0's traceback; the traceback still decides."""
    log = "\n".join(
        [
            "[2026-11-30 18:00:05 TP0] Load weight end. type=Qwen3ForCausalLM",
            "Traceback (most recent call last):",
            '  File "x.py", line 1, in init_memory_pool',
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005.",
            "[2026-11-30 18:00:06 TP1] Load weight end. type=Qwen3ForCausalLM",
        ]
    )
    readiness, _, _, _ = make(
        healthy_server(load_s=100), states=lambda t: dead() if t >= 1 else running(), log=lambda t: log
    )
    assert readiness.run()["failure_class"] == "oom_mem_fraction"


def test_a_process_watcher_knows_how_long_ago_its_process_started(tmp_path):
    """/proc/<pid>/stat start time (clock ticks since boot) against /proc/uptime (seconds since boot)."""
    ticks = os.sysconf("SC_CLK_TCK")
    (tmp_path / "4242").mkdir()
    fields = ["S"] + ["0"] * 18 + [str(100 * ticks)] + ["0"] * 10  # start time: 100 s after boot
    (tmp_path / "4242" / "stat").write_text("4242 (python3 -m sglang) " + " ".join(fields) + "\n")
    (tmp_path / "uptime").write_text("160.50 900.00\n")
    watcher = ProcessWatcher(pid=4242, proc_root=str(tmp_path))
    assert watcher.started_ago() is None  # nothing polled yet
    assert watcher.poll().alive
    assert watcher.started_ago() == pytest.approx(60.5)


def test_a_unit_watcher_knows_how_long_ago_systemd_started_it():
    show = "\n".join(
        [
            "LoadState=loaded",
            "ActiveState=active",
            "SubState=running",
            "MainPID=7",
            "ExecMainPID=7",
            "InvocationID=inv1",
            "InactiveExitTimestampMonotonic=5000000",
        ]
    )
    watcher = UnitWatcher("sglang.service", lambda argv: (0, show, ""))
    assert watcher.started_ago() is None
    watcher.poll()
    assert watcher.started_ago(now_monotonic=47.0) == pytest.approx(42.0)


# -- port ownership ---------------------------------------------------------------------------------------


def with_owner(port_check, states=None, **params):
    readiness, clock, sglang, _watcher = make(healthy_server(), states=states or running, port=30000, **params)
    readiness.port_check = port_check
    return readiness, clock, sglang


def unit_with_pid(pid):
    def states(t=None):
        return WatchState(True, description="unit sglang.service is active/running", detail={"main_pid": pid})

    return states


def test_a_foreign_listener_is_port_in_use_naming_pid_and_command_and_never_probed():
    calls = []

    def foreign(port, root):
        calls.append((port, root))
        return {
            "state": "foreign",
            "port": port,
            "pid": 555,
            "command": "python3 -m http.server 30000",
            "reason": "port 30000 is held by pid 555 (python3 -m http.server 30000), not by the tree of pid 42",
        }

    readiness, _clock, sglang = with_owner(foreign, states=unit_with_pid(42))
    result = readiness.run()
    assert result["ready"] is False and result["failure_class"] == "port_in_use"
    assert "pid 555 (python3 -m http.server 30000)" in result["reason"]
    assert result["port_owner"]["pid"] == 555
    assert result["hint"] and "another process holds the port" in result["hint"]
    assert calls == [(30000, 42)]
    assert sglang.paths("POST") == []  # the foreign server's answers were never judged as the release
    assert result["probe"] == {}


def test_the_own_listener_is_checked_once_and_the_start_is_ready():
    calls = []

    def own(port, root):
        calls.append(root)
        return {"state": "own", "port": port, "pids": [root]}

    readiness, _clock, _ = with_owner(own, states=unit_with_pid(42))
    result = readiness.run()
    assert result["ready"] is True
    assert result["port_owner"] == {"state": "own", "port": 30000, "pids": [42]}
    assert calls == [42]


def test_a_holder_that_cannot_be_seen_is_a_note_not_a_verdict():
    def unknown(port, root):
        return {"state": "unknown", "port": port, "reason": "port 30000 listens, its holder is not visible"}

    result = with_owner(unknown)[0].run()
    assert result["ready"] is True
    assert "port 30000 listens, its holder is not visible" in result["notes"]


def test_no_port_means_no_owner_check():
    readiness, _clock, _, _ = make(healthy_server())
    readiness.port_check = lambda port, root: pytest.fail("checked without a port")
    assert readiness.run()["ready"] is True


# -- openai probe with speculation ------------------------------------------------------------------------


def openai_server(native=None):
    chat = {
        "choices": [{"message": {"content": " hi"}, "finish_reason": "length"}],
        "usage": {"completion_tokens": 16},
    }
    base = healthy_server(gen=native if native is not None else (0.2, 200, generated()))

    def behaviour(t):
        routes = dict(base(t))
        if t >= 12.0:
            routes[("POST", "/v1/chat/completions")] = (0.3, 200, chat)
            routes[("GET", "/v1/models")] = (0.01, 200, {"data": [{"id": "m"}]})
        return routes

    return behaviour


def test_openai_probe_on_a_speculative_server_is_ready_with_one_native_call_as_evidence():
    readiness, _, sglang, _ = make(
        openai_server(),
        probe=http_probe.ProbeSettings(api="openai"),
        expect_speculative_algorithm="DFLASH",
        min_accept_length=2,
    )
    result = readiness.run()
    assert result["ready"] is True, result["reason"]
    assert sglang.paths("POST") == ["/v1/chat/completions", "/generate"]
    assert result["speculation_evidence"].startswith("one native POST /generate")
    assert "spec_verify_ct=5" in result["speculation_evidence"]
    assert result["probe"]["api"] == "openai"


def test_openai_probe_whose_native_call_shows_no_speculation_is_spec_mismatch():
    readiness, _, _, _ = make(
        openai_server(native=(0.2, 200, generated(accept=None))),
        probe=http_probe.ProbeSettings(api="openai"),
        expect_speculative_algorithm="DFLASH",
    )
    result = readiness.run()
    assert result["ready"] is False and result["failure_class"] == "spec_mismatch"
    assert "one native POST /generate sent to check: it shows no spec_verify_ct" in result["reason"]


def test_openai_accept_length_floor_is_checked_on_the_native_counters():
    readiness, _, _, _ = make(
        openai_server(native=(0.2, 200, generated(accept=1.05))),
        probe=http_probe.ProbeSettings(api="openai"),
        expect_speculative_algorithm="DFLASH",
        min_accept_length=2,
    )
    result = readiness.run()
    assert result["failure_class"] == "low_acceptance" and "1.05" in result["reason"]


def test_native_probe_names_its_own_answer_as_the_evidence():
    result = make(healthy_server(), expect_speculative_algorithm="DFLASH")[0].run()
    assert result["ready"] is True
    assert result["speculation_evidence"] == "the probe's answer: spec_verify_ct=5, spec_accept_length=3.2"
