"""release.py: the record schema and its migration, restart, ladder, outcome, rollback, pruning, reports."""

import json

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._release import release

ENVELOPES = {
    "full": {"mem_fraction_static": 0.88, "context_length": 131072},
    "small": {"mem_fraction_static": 0.95, "context_length": 32768},
    "tiny": {"mem_fraction_static": 0.95, "context_length": 8192, "cuda_graph": False},
}
LADDER = ["full", "small", "tiny"]
MEMORY = ["oom_mem_fraction", "cuda_oom", "cuda_graph_capture"]

# What the service role wrote before the schema existed (release 0.2).
V1_RECORD = {
    "release_id": "r1",
    "previous_release_id": "r0",
    "unit": "sglang",
    "envelope": "small",
    "ladder": ["full", "small"],
    "envelopes": {"full": ENVELOPES["full"], "small": ENVELOPES["small"]},
    "base_url": "http://127.0.0.1:30000",
    "speculative_algorithm": "DFLASH",
    "served_model_name": "",
}


def record(**changes):
    return release.migrate(dict(V1_RECORD, **changes))


# -- the record -------------------------------------------------------------------------------
def test_a_v1_record_migrates_to_the_current_schema_keeping_its_fields():
    migrated = release.read_record(json.dumps(V1_RECORD))
    assert migrated["schema"] == release.SCHEMA_VERSION == 2
    assert {key: migrated[key] for key in V1_RECORD} == V1_RECORD
    assert migrated["settle"] == {}
    assert migrated["recorded_at"] is None


def test_a_minimal_v1_record_gets_defaults_for_what_it_lacks():
    migrated = release.read_record('{"release_id": "r1"}')
    assert migrated["previous_release_id"] == ""
    assert migrated["ladder"] == []
    assert migrated["envelopes"] == {}


def test_a_current_record_reads_back_what_was_written():
    written = release.new_record(
        None, release_id="r2", envelope="full", ladder=["full"], envelopes=ENVELOPES, recorded_at="2026-11-30T18:00:00Z"
    )
    text = release.dump_record(written)
    assert json.loads(text)["schema"] == 2
    assert release.read_record(text) == written


@pytest.mark.parametrize("text", [None, "", "  \n"])
def test_no_record_reads_as_none(text):
    assert release.read_record(text) is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "expected a JSON object, found list"),
        ('{"schema": 3, "release_id": "r1"}', "schema 3 is newer than this collection reads (2)"),
        ('{"schema": 0, "release_id": "r1"}', "schema 0 is unknown"),
        ('{"schema": "2", "release_id": "r1"}', "expected an integer schema"),
        ('{"schema": true, "release_id": "r1"}', "expected an integer schema"),
        ('{"schema": 2, "release_id": ""}', "expected a non-empty release_id"),
        ('{"release_id": "r1", "ladder": "full"}', "expected ladder to be a list"),
        ('{"release_id": "r1", "envelopes": []}', "expected envelopes to be a dict"),
    ],
)
def test_unreadable_records_fail_with_a_message_naming_the_file(text, message):
    with pytest.raises(release.RecordError) as error:
        release.read_record(text, "/opt/sglang/state/last_good/deploy.json")
    assert message in str(error.value)
    assert "/opt/sglang/state/last_good/deploy.json" in str(error.value)


def test_a_new_record_names_the_release_before_it_as_previous():
    new = release.new_record(
        record(), release_id="r2", envelope="full", ladder=LADDER, envelopes=ENVELOPES, recorded_at="t"
    )
    assert (new["release_id"], new["previous_release_id"]) == ("r2", "r1")
    assert new["envelopes"] == ENVELOPES
    assert new["ladder"] == LADDER


def test_a_redeploy_of_the_same_release_keeps_the_previous_one():
    new = release.new_record(
        record(), release_id="r1", envelope="full", ladder=LADDER, envelopes=ENVELOPES, recorded_at="t"
    )
    assert new["previous_release_id"] == "r0"


def test_a_first_record_has_no_previous_release_and_keeps_the_window():
    settle = {"ok": True, "stayed_up_s": 30.2}
    new = release.new_record(
        None, release_id="r1", envelope="full", ladder=["full"], envelopes=ENVELOPES, recorded_at="t", settle=settle
    )
    assert new["previous_release_id"] == ""
    assert new["settle"] == settle
    assert new["envelopes"] == {"full": ENVELOPES["full"]}


# -- first envelope and restart -----------------------------------------------------------------
def test_the_ladder_starts_at_the_recorded_envelope_when_nothing_changed():
    good = record(ladder=LADDER, envelopes=ENVELOPES, envelope="small")
    assert release.first_envelope_index(good, release_id="r1", ladder=LADDER, envelopes=ENVELOPES) == 1


@pytest.mark.parametrize(
    ("good", "release_id", "ladder", "envelopes"),
    [
        (None, "r1", LADDER, ENVELOPES),  # first deploy
        ("same", "r2", LADDER, ENVELOPES),  # another release
        ("same", "r1", ["small", "tiny"], ENVELOPES),  # another ladder
        ("same", "r1", LADDER, dict(ENVELOPES, small={"mem_fraction_static": 0.9})),  # changed settings
        ("gone", "r1", LADDER, ENVELOPES),  # recorded envelope not on the ladder
    ],
)
def test_the_ladder_starts_at_its_head_when_anything_changed(good, release_id, ladder, envelopes):
    recorded = {
        None: None,
        "same": record(ladder=LADDER, envelopes=ENVELOPES, envelope="small"),
        "gone": record(ladder=LADDER, envelopes=ENVELOPES, envelope="huge"),
    }[good]
    assert release.first_envelope_index(recorded, release_id=release_id, ladder=ladder, envelopes=envelopes) == 0


SAME = {"unit": "a", "good_unit": "a", "env": "b", "good_env": "b", "config": "c", "good_config": "c"}


def decide(**changes):
    args = dict(requested=False, active_state="active", current_release="r1", sha256=dict(SAME), release_id="r1")
    args.update(changes)
    good = args.pop("good", record())
    return release.restart_decision(good, **args)


def test_an_active_service_running_the_recorded_deploy_is_not_restarted():
    assert decide() == (False, [])


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"requested": True}, "configuration changed"),
        ({"active_state": "failed"}, "service is failed"),
        ({"active_state": ""}, "service is unknown"),
        ({"current_release": "r0"}, "current is r0"),
        ({"current_release": ""}, "current is unset"),
        ({"release_id": "r2", "current_release": "r2"}, "release r2 is not the recorded good release"),
        ({"good": None}, "release r1 is not the recorded good release"),
        ({"sha256": dict(SAME, unit="x")}, "unit file differs from the last good copy"),
        ({"sha256": dict(SAME, unit="", good_unit="")}, "unit file differs from the last good copy"),
        ({"sha256": dict(SAME, env="x")}, "env file differs from the last good copy"),
        ({"sha256": dict(SAME, good_config="")}, "config file differs from the last good copy"),
    ],
)
def test_the_service_restarts_for_each_reason(changes, reason):
    restart, reasons = decide(**changes)
    assert restart is True
    assert reason in reasons


# -- one attempt --------------------------------------------------------------------------------
READY = {"ready": True, "phase": "ready", "time_to_ready_s": 2.5, "settle": {"ok": True}}


def failed(failure_class, cause_class=None, **extra):
    return dict(
        {
            "ready": False,
            "failed": True,
            "phase": "failed",
            "failed_in_phase": "loading",
            "failure_class": failure_class,
            "cause_class": cause_class or failure_class,
            "reason": "unit sglang.service is failed/failed",
            "exception_line": "RuntimeError: Not enough memory.",
            "hint": "raise --mem-fraction-static",
        },
        **extra,
    )


def judge(readiness, envelope="full", **extra):
    args = dict(
        envelope=envelope,
        ladder=LADDER,
        settings=ENVELOPES[envelope],
        ladder_classes=MEMORY,
        restarted=True,
        start_to_verdict_s=3.2,
    )
    args.update(extra)
    return release.judge_attempt(readiness, **args)


def test_a_ready_attempt_is_the_outcome_ready():
    attempt, outcome = judge(READY)
    assert outcome == "ready"
    assert attempt["ready"] is True
    assert (attempt["failure_class"], attempt["cause_class"]) == ("", "")
    assert attempt["settle"] == {"ok": True}
    assert attempt["start_to_verdict_s"] == 3.2


@pytest.mark.parametrize("cause", MEMORY)
def test_a_memory_failure_moves_to_the_next_envelope(cause):
    attempt, outcome = judge(failed(cause))
    assert outcome == "next_envelope"
    assert attempt["cause_class"] == cause
    assert attempt["exception_line"] == "RuntimeError: Not enough memory."
    assert release.next_envelope(LADDER, "full") == "small"


def test_a_restart_loop_caused_by_memory_moves_on_by_its_cause():
    attempt, outcome = judge(failed("restart_loop", "cuda_oom"))
    assert outcome == "next_envelope"
    assert (attempt["failure_class"], attempt["cause_class"]) == ("restart_loop", "cuda_oom")


def test_a_memory_failure_on_the_last_envelope_fails():
    _, outcome = judge(failed("oom_mem_fraction"), envelope="tiny")
    assert outcome == "failed"
    assert release.next_envelope(LADDER, "tiny") is None


@pytest.mark.parametrize("failure_class", ["crashed_on_start", "scheduler_died", "wedged", "probe_failed", "timeout"])
def test_any_other_failure_fails_without_walking_the_ladder(failure_class):
    attempt, outcome = judge(failed(failure_class))
    assert outcome == "failed"
    assert attempt["failure_class"] == failure_class


def test_a_failure_in_the_stability_window_fails_with_its_phase():
    readiness = failed("restart_loop", "scheduler_died", failed_in_phase="settling", settle={"ok": False})
    attempt, outcome = judge(readiness)
    assert outcome == "failed"
    assert attempt["phase"] == "settling"
    assert attempt["settle"] == {"ok": False}


def test_a_module_error_without_a_class_is_a_module_error():
    attempt, outcome = judge({"failed": True, "msg": "async task did not complete"})
    assert outcome == "failed"
    assert attempt["failure_class"] == attempt["cause_class"] == "module_error"
    assert attempt["reason"] == "async task did not complete"


def test_check_mode_counts_a_snapshot_as_ready_unless_it_failed():
    assert judge({"ready": False, "phase": "up"}, check_mode=True)[1] == "ready"
    assert judge(failed("crashed_on_start"), check_mode=True)[1] == "failed"


def test_an_attempt_without_a_restart_has_no_start_to_verdict_time():
    attempt, _ = judge(READY, restarted=False)
    assert attempt["restarted"] is False
    assert attempt["start_to_verdict_s"] is None


# -- rollback -----------------------------------------------------------------------------------
def test_the_rollback_returns_to_the_recorded_release_on_disk():
    assert release.rollback_target(record(), available=["r0", "r1", "r2"]) == ("r1", True)


def test_a_recorded_release_no_longer_on_disk_is_named_but_not_restored():
    assert release.rollback_target(record(), available=["r2"]) == ("r1", False)


def test_a_first_deploy_has_no_rollback_target():
    assert release.rollback_target(None, available=["r2"]) == ("", False)


def test_rollback_playbook_goes_to_the_previous_good_release():
    assert release.choose_release(record(), requested="", available=["r1", "r0"], complete=["r1", "r0"]) == ("r0", "")


def test_rollback_playbook_takes_a_named_release_even_the_serving_one():
    assert release.choose_release(record(), requested="r1", available=["r1", "r0"], complete=["r1", "r0"]) == ("r1", "")


@pytest.mark.parametrize(
    ("good", "requested", "available", "message"),
    [
        (None, "", ["r1"], "no release to roll back to"),
        (record(previous_release_id=""), "", ["r1"], "names no previous good release (serving: 'r1')"),
        (record(), "", ["r1"], "release 'r0' is not on disk. Releases on disk, newest first: r1."),
        (record(), "r9", [], "release 'r9' is not on disk. Releases on disk, newest first: none."),
        (record(previous_release_id="r1"), "", ["r1"], "release 'r1' is already the one serving"),
    ],
)
def test_rollback_playbook_refuses_with_a_message(good, requested, available, message):
    target, error = release.choose_release(good, requested=requested, available=available, complete=available)
    assert target == ""
    assert message in error


@pytest.mark.parametrize("requested", ["r0", ""])
def test_rollback_playbook_refuses_an_incomplete_release_naming_the_complete_ones(requested):
    target, error = release.choose_release(
        record(), requested=requested, available=["r2", "r1", "r0"], complete=["r2", "r1"]
    )
    assert target == ""
    assert "release 'r0' is incomplete: it has no .complete" in error
    assert "Complete releases, newest first: r2, r1." in error


def test_rollback_playbook_takes_a_complete_release_among_incomplete_ones():
    assert release.choose_release(record(), requested="r2", available=["r3", "r2", "r0"], complete=["r2"]) == ("r2", "")


# -- the build decision -------------------------------------------------------------------------
def test_a_complete_release_is_not_rebuilt():
    assert release.build_decision("r2", complete=True, current_release="r2") == (False, "")
    assert release.build_decision("r2", complete=True, current_release="r1") == (False, "")


def test_an_incomplete_release_is_rebuilt():
    assert release.build_decision("r2", complete=False, current_release="r1") == (True, "")
    assert release.build_decision("r2", complete=False, current_release="") == (True, "")


def test_the_incomplete_release_current_points_to_is_never_rebuilt_in_place():
    build, error = release.build_decision("r1", complete=False, current_release="r1")
    assert build is False
    assert "release r1 has no .complete" in error and "never rebuilt in place" in error
    assert "sglang_rollback_release" in error


def test_the_complete_marker_lives_in_the_one_release_directory():
    assert release.complete_marker("/srv/sglang", "abc") == release.release_dir("/srv/sglang", "abc") + "/.complete"


# -- pruning ------------------------------------------------------------------------------------
RELEASES = [("r0", 100.0), ("r3", 400.0), ("r1", 200.0), ("r2", 300.0), ("r4", 500.0)]


def test_pruning_keeps_the_newest_releases():
    assert release.prune(RELEASES, keep=3, protected=["r4"]) == ["r1", "r0"]


def test_pruning_never_removes_a_protected_release():
    assert release.prune(RELEASES, keep=2, protected=["r4", "r0", "r1"]) == ["r2"]


def test_pruning_keeps_at_least_one_release():
    assert release.prune(RELEASES, keep=0, protected=[]) == ["r3", "r2", "r1", "r0"]


# -- reports ------------------------------------------------------------------------------------
PROBE = {"completion_tokens": 16, "latency_s": 0.4, "tokens_per_s": 40.0, "spec_accept_length": 3.1}
SERVER_READY = dict(READY, probe=PROBE, server={"version": "0.5.23", "speculative_algorithm": "DFLASH"})
CONTEXT = {"gpus": ["GPU-1"], "tp_size": 1, "speculative_algorithm": "DFLASH", "base_url": "http://127.0.0.1:30000"}
STABLE = {"stayed_up_s": 30.1, "invocation_id": "inv1", "n_restarts": 0, "second_probe": {"ok": True}}


def success(attempts, restarted=True, readiness=None):
    return release.success_report(
        readiness or SERVER_READY,
        host="lab1",
        unit="sglang.service",
        release_id="r2",
        previous_release_id="r1",
        attempts=attempts,
        restarted=restarted,
        versions={"torch": "2.11.0"},
        envelope="small",
        envelope_settings=ENVELOPES["small"],
        context=CONTEXT,
    )


def test_the_success_report_and_its_summary():
    report = success([{"envelope": "full"}, {"envelope": "small"}], readiness=dict(SERVER_READY, settle=STABLE))
    assert report["ok"] is True
    assert report["changed"] is True
    assert report["versions"] == {"sglang": "0.5.23", "torch": "2.11.0"}
    assert (report["probe_completion_tokens"], report["spec_accept_length"]) == (16, 3.1)
    lines = release.success_summary(report)
    assert lines[0] == "sglang.service on lab1 serves release r2 (restarted)"
    assert lines[1] == "versions: sglang 0.5.23, torch 2.11.0"
    assert lines[2] == "GPUs: GPU-1; tp 1; DFLASH"
    assert lines[3].endswith(" after 1 memory failure(s)")
    assert "16 tokens in 0.4 s" in lines[4]
    assert lines[5] == "stable: up 30.1 s after ready, invocation inv1, 0 restart(s), second probe ok"
    assert "attempts" not in release.without_attempts(report)


def test_an_unchanged_deploy_reports_no_restart_and_no_window():
    report = success([{"envelope": "small"}], restarted=False, readiness={"ready": True, "probe": PROBE, "settle": {}})
    assert report["changed"] is False
    assert report["versions"]["sglang"] == "unknown"
    assert report["speculative_algorithm"] == "DFLASH"
    lines = release.success_summary(report)
    assert lines[0].endswith("(unchanged, not restarted)")
    assert len(lines) == 5


TRACEBACK = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nRuntimeError: boom'


def failure(rollback, target="r1", readiness=None, attempts=None):
    readiness = readiness or failed("crashed_on_start", traceback=TRACEBACK, exception_line="RuntimeError: boom")
    attempts = attempts or [judge(readiness)[0]]
    return release.failure_report(
        readiness,
        host="lab1",
        unit="sglang.service",
        release_id="r2",
        previous_release_id="r1",
        attempts=attempts,
        target=target,
        rollback=rollback,
    )


def test_the_failure_report_holds_the_exception_line_and_the_traceback():
    report = failure(dict(READY, probe=PROBE))
    assert report["ok"] is False
    assert report["exception_line"] == "RuntimeError: boom" == TRACEBACK.splitlines()[-1]
    assert report["traceback"] == TRACEBACK
    assert (report["failure_class"], report["phase"]) == ("crashed_on_start", "loading")
    assert report["rollback"]["attempted"] is True
    assert report["rollback"]["ready"] is True
    assert report["rollback"]["state"] == "release r1 serves again (generation verified: 16 tokens in 0.4 s)"
    message = release.failure_message(report)
    assert message.splitlines()[0] == (
        "sglang_service: release r2 failed on lab1: crashed_on_start (phase loading, 3.2 s after the start)"
    )
    assert "exception: RuntimeError: boom" in message
    assert message.endswith("traceback:\n" + TRACEBACK)
    assert "attempts: full: crashed_on_start" in message


def test_the_failure_message_names_a_cause_other_than_the_class():
    readiness = failed("restart_loop", "scheduler_died", failed_in_phase="settling")
    report = failure(dict(READY, probe=PROBE), readiness=readiness)
    assert "restart_loop (cause scheduler_died, phase settling," in release.failure_message(report)


def test_a_failed_rollback_is_reported_with_its_class():
    report = failure(failed("crashed_on_start"))
    assert report["rollback"]["ready"] is False
    assert report["rollback"]["state"] == (
        "rollback to release r1 FAILED: crashed_on_start: unit sglang.service is failed/failed"
    )


def test_a_first_deploy_failure_says_the_unit_is_left_stopped():
    report = failure(None, target="")
    assert report["rollback"]["attempted"] is False
    assert report["rollback"]["state"] == "no last good release: sglang.service left stopped and disabled"


def test_a_good_release_missing_from_disk_is_said_so():
    report = failure(None, target="r1")
    assert (
        report["rollback"]["state"] == "last good release r1 is not on disk: sglang.service left stopped and disabled"
    )


def test_a_failure_without_a_traceback_has_no_traceback_lines():
    readiness = failed("wedged", exception_line=None)
    report = failure(None, target="", readiness=readiness)
    message = release.failure_message(report)
    assert "traceback:" not in message
    assert "exception:" not in message
    assert report["exception_line"] == ""
