"""The stability window: good only after staying up, with the same invocation and a second generation.

Driven by the fake clock, unit states and sglang of test_readiness.py.
"""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import settle
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import WatchState
from test_readiness import HANG, generated, healthy_server, make

SCHEDULER_DEATH_LOG = (
    "[2026-05-09 07:35:20] The server is fired up and ready to roll!\n"
    "[2026-05-09 07:35:22] Subprocess scheduler_0 (pid=4245) crashed with exit code -9. "
    "Triggering SIGQUIT for cleanup...\n"
)
READY_AT = 12.0  # healthy_server: load 10 s + warm-up 2 s


def unit(invocation="inv1", restarts=0, alive=True, restarted=False):
    detail = {"name": "sglang.service", "invocation_id": invocation, "n_restarts": restarts}
    if restarted:
        return WatchState(False, restarted=True, description="unit sglang.service restarted", detail=detail)
    if not alive:
        return WatchState(False, dead=True, description="unit sglang.service is failed/failed", detail=detail)
    return WatchState(True, description="unit sglang.service is active/running", detail=detail)


def run_window(states, settle_s=30.0, behaviour=None, log=lambda t: ""):
    readiness, clock, sglang, _ = make(behaviour or healthy_server(), states=states, log=log)
    first = readiness.run()
    assert first["ready"] is True
    ready_at = clock()
    return settle.extend(readiness, first, settle_s), ready_at, sglang


# -- the decision ---------------------------------------------------------------------------------
GOOD = {
    "settle_s": 30.0,
    "stayed_up_s": 30.2,
    "alive": True,
    "invocation_id": "inv1",
    "last_invocation_id": "inv1",
    "n_restarts": 0,
    "second_probe": {"ok": True, "completion_tokens": 16},
}


def test_a_release_that_stayed_up_and_answered_again_is_good():
    good, reason = settle.window_verdict(GOOD)
    assert good is True
    assert reason.startswith("stayed up 30.2s after ready")


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        (
            {"alive": False, "stayed_up_s": 2.1},
            "the server went down 2.1s after ready, within the 30s stability window",
        ),
        ({"last_invocation_id": "inv2"}, "the unit was restarted (invocation inv1 -> inv2)"),
        ({"n_restarts": 2}, "systemd restarted the unit 2 time(s) within the 30s stability window"),
        ({"stayed_up_s": 12.0}, "the window ended after 12.0s of 30s"),
        ({"second_probe": None}, "no second generation was answered"),
        (
            {"second_probe": {"ok": False, "error": "timeout"}},
            "the second generation, 30s after ready, failed: timeout",
        ),
    ],
)
def test_a_window_that_saw_a_problem_is_not_good(changes, reason):
    good, text = settle.window_verdict(dict(GOOD, **changes))
    assert good is False
    assert reason in text


# -- the window on a readiness run ----------------------------------------------------------------
def test_a_stable_server_is_ready_after_the_window_and_a_second_generation():
    result, ready_at, sglang = run_window(lambda t: unit())
    assert result["ready"] is True
    window = result["settle"]
    assert window["ok"] is True
    assert 30.0 <= window["stayed_up_s"] <= 31.5
    assert (window["invocation_id"], window["last_invocation_id"], window["n_restarts"]) == ("inv1", "inv1", 0)
    assert window["second_probe"]["completion_tokens"] == 16
    generations = [t for t, method, path, _ in sglang.calls if (method, path) == ("POST", "/generate")]
    assert len(generations) == 2
    assert generations[1] - generations[0] >= 30.0
    assert result["time_to_ready_s"] == pytest.approx(ready_at, abs=0.01)


def test_an_engine_dying_two_seconds_after_ready_fails_in_the_window_with_the_logged_class():
    def states(t):
        return unit() if t < READY_AT + 3 else unit(alive=False)

    result, _, _ = run_window(states, log=lambda t: SCHEDULER_DEATH_LOG if t >= READY_AT + 2 else "")
    assert result["ready"] is False
    assert result["failed_in_phase"] == "settling"
    assert result["failure_class"] == "scheduler_died"
    assert result["settle"]["ok"] is False
    assert result["settle"]["alive"] is False
    assert result["settle"]["stayed_up_s"] < 5
    assert result["reason"].startswith("the server went down")
    assert result["first_ready_s"] is not None


def test_a_restart_during_the_window_is_a_restart_loop_by_its_cause():
    def states(t):
        if t < READY_AT + 5:
            return unit()
        return unit(invocation="inv2", restarts=1, restarted=True)

    result, _, _ = run_window(states, log=lambda t: SCHEDULER_DEATH_LOG if t >= READY_AT + 2 else "")
    assert result["ready"] is False
    assert result["failure_class"] == "restart_loop"
    assert result["cause_class"] == "scheduler_died"
    assert result["settle"]["last_invocation_id"] == "inv2"
    assert result["settle"]["n_restarts"] == 1


def test_a_second_generation_that_hangs_fails_the_window_as_probe_failed():
    first = healthy_server()

    def behaviour(t):
        answers = first(t)
        if t >= READY_AT + 10:
            answers[("POST", "/generate")] = HANG
        return answers

    result, _, _ = run_window(lambda t: unit(), settle_s=10.0, behaviour=behaviour)
    assert result["ready"] is False
    assert result["failure_class"] == "probe_failed"
    assert result["failed_in_phase"] == "settling"
    assert result["settle"]["second_probe"]["error"] == "timeout"


def test_a_second_generation_without_tokens_fails_the_window():
    first = healthy_server()

    def behaviour(t):
        answers = first(t)
        if t >= READY_AT + 10:
            answers[("POST", "/generate")] = (0.2, 200, generated(tokens=0))
        return answers

    result, _, _ = run_window(lambda t: unit(), settle_s=10.0, behaviour=behaviour)
    assert result["failure_class"] == "probe_failed"
    assert "no_tokens" in result["reason"] or "completion_tokens=0" in result["reason"]


def test_no_window_leaves_the_result_as_it_is():
    readiness, _, _, _ = make(healthy_server(), states=lambda t: unit())
    first = readiness.run()
    assert settle.extend(readiness, first, 0) is first


def test_a_result_that_is_not_ready_gets_no_window():
    readiness, _, sglang, _ = make(healthy_server(), states=lambda t: unit(alive=False))
    first = readiness.run()
    assert first["ready"] is False
    assert settle.extend(readiness, first, 30) is first
    assert sglang.paths("POST") == []
