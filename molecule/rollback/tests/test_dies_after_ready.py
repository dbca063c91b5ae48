"""rollback, dies1: a release that dies 2 s after its first good answer is never recorded as good."""

import time

import pytest
from lab_snapshot import snapshot
from scenario_fixtures import current, last_good, unit_properties

testinfra_hosts = ["ansible://specdec-rollback-dies1"]


def test_the_deploy_failed_in_the_stability_window_after_a_good_first_answer(report):
    assert report["ok"] is False
    assert report["phase"] == "settling"
    assert report["cause_class"] == "scheduler_died"
    window = report["settle"]
    assert window["ok"] is False
    assert window["stayed_up_s"] < window["settle_s"] == 10
    attempt = report["attempts"][-1]
    assert (attempt["ready"], attempt["phase"]) == (False, "settling")


def test_the_rollback_proved_release_1_with_its_own_window(report):
    assert report["rollback"]["release_id"] == report["previous_release_id"] != ""
    assert report["rollback"]["ready"] is True
    assert report["rollback"]["settle"]["ok"] is True
    assert report["rollback"]["settle"]["n_restarts"] == 0


@pytest.fixture(scope="module")
def first_look(lab_host):
    """The unit's properties when the tests start (right after converge)."""
    return unit_properties(lab_host)


def test_the_last_good_release_is_still_release_1(lab_host, report, first_look):
    record = last_good(lab_host)
    assert record["release_id"] == report["previous_release_id"]
    assert record["release_id"] != report["release_id"]
    assert current(lab_host) == f"/opt/sglang/releases/{report['previous_release_id']}"
    assert not lab_host.file("/etc/sglang/sglang.env").contains("SGLANG_SIM_FAULT")


def test_fifteen_seconds_later_release_1_serves_with_no_restarts(lab_host, key, first_look):
    time.sleep(15)
    later = unit_properties(lab_host)
    assert later["ActiveState"] == "active"
    assert later["NRestarts"] == "0"
    assert later["MainPID"] == first_look["MainPID"] != "0"
    answer = snapshot(lab_host, key=key)["generate_with_key"]
    assert answer["status"] == 200
    assert answer["body"]["meta_info"]["completion_tokens"] == 8
