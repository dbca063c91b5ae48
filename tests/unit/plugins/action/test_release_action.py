"""sglang_release's judge and report run on the controller (issue 18.4): the module's own argument spec and
steps, no host; the start-to-verdict duration is taken on one clock (the host's start and verdict times)."""

from ansible_collections.specdec.sglang.plugins.action import sglang_release as action

COMMON = {"runtime_root": "/opt/sglang", "release_id": "r2", "ladder": ["full"], "envelopes": {"full": {}}}


def test_judge_runs_here_with_the_modules_validation():
    readiness = {"ready": False, "failure_class": "crashed_on_start", "verdict_epoch": 1700000003.04}
    out = action.run_on_controller(
        {
            **COMMON,
            "step": "judge",
            "envelope": "full",
            "readiness": readiness,
            "restarted": True,
            "started_at": "1700000000.0",
        }
    )
    assert out["step"] == "judge" and out["outcome"] == "failed" and out["changed"] is False
    assert out["attempt"]["start_to_verdict_s"] == 3.0  # both times from the host's clock


def test_judge_without_the_hosts_verdict_time_gives_no_duration():
    out = action.run_on_controller(
        {
            **COMMON,
            "step": "judge",
            "envelope": "full",
            "readiness": {"ready": False},
            "started_at": 1.0,
            "restarted": True,
        }
    )
    assert out["attempt"]["start_to_verdict_s"] is None


def test_report_runs_here():
    ready = {"envelope": "full", "ready": True}
    out = action.run_on_controller(
        {
            **COMMON,
            "step": "report",
            "envelope": "full",
            "host": "lab1",
            "readiness": {"ready": True},
            "attempts": [ready],
            "restarted": False,
        }
    )
    assert out["report"]["ok"] is True and out["report"]["time_to_ready_s"] is None


def test_a_bad_argument_fails_as_the_module_would():
    out = action.run_on_controller({**COMMON, "step": "judge", "started_at": "soon"})
    assert out["failed"] is True and "started_at" in out["msg"]


def test_host_steps_are_not_run_here():
    assert set(action.CONTROLLER_STEPS) == {"judge", "report"}
