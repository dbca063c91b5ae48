"""sglang_release_judge and sglang_release_report run on the controller (issue 18.4): the module's own argument
spec and code, no host; the start-to-verdict duration is taken on one clock (the host's start and verdict times)."""

import pathlib

import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._release import release_steps

REPO = pathlib.Path(__file__).resolve().parents[4]


def run_on_controller(args):
    args = dict(args)
    return release_steps.run_on_controller(args.pop("step"), args)


COMMON = {"runtime_root": "/opt/sglang", "release_id": "r2", "ladder": ["full"], "envelopes": {"full": {}}}


def test_judge_runs_here_with_the_modules_validation():
    readiness = {"ready": False, "failure_class": "crashed_on_start", "verdict_epoch": 1700000003.04}
    out = run_on_controller(
        {
            **COMMON,
            "step": "judge",
            "envelope": "full",
            "readiness": readiness,
            "restarted": True,
            "started_at": "1700000000.0",
        }
    )
    assert out["outcome"] == "failed" and out["changed"] is False
    assert out["attempt"]["start_to_verdict_s"] == 3.0  # both times from the host's clock


def test_judge_without_the_hosts_verdict_time_gives_no_duration():
    out = run_on_controller(
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
    out = run_on_controller(
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
    out = run_on_controller({**COMMON, "step": "judge", "started_at": "soon"})
    assert out["failed"] is True and "started_at" in out["msg"]


def test_only_judge_and_report_run_here_each_through_its_own_action_plugin():
    assert set(release_steps.CONTROLLER_OPERATIONS) == {"judge", "report"}
    actions = {path.stem for path in (REPO / "plugins" / "action").glob("sglang_release_*.py")}
    assert actions == {f"sglang_release_{op}" for op in release_steps.CONTROLLER_OPERATIONS}


def test_every_operation_is_a_module_of_the_release_action_group_with_the_shared_fragment():
    group = yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]["release"]
    assert sorted(group) == sorted(f"sglang_release_{op}" for op in release_steps.OPERATION_SPECS)
    for name in group:
        text = (REPO / "plugins" / "modules" / f"{name}.py").read_text()
        assert "  - specdec.sglang.release\n" in text, name  # the context options come from the doc fragment
        assert f'OPERATION = "{name.removeprefix("sglang_release_")}"' in text, name
