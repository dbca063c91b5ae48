"""dies_after_ready: a release that dies 2 s after its first good answer is never recorded as good."""

import time

from lab_snapshot import snapshot


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


def test_the_last_good_release_is_still_release_1(lab, report):
    assert lab["last_good"]["release_id"] == report["previous_release_id"]
    assert lab["last_good"]["release_id"] != report["release_id"]
    assert lab["current"] == f"/opt/sglang/releases/{report['previous_release_id']}"
    assert "SGLANG_SIM_FAULT" not in lab["env_file"]["content"]


def test_fifteen_seconds_later_release_1_serves_with_no_restarts(host, key, lab):
    time.sleep(15)
    later = snapshot(host, key=key)
    assert later["show"]["ActiveState"] == "active"
    assert later["show"]["NRestarts"] == "0"
    assert later["show"]["MainPID"] == lab["show"]["MainPID"] != "0"
    answer = later["generate_with_key"]
    assert answer["status"] == 200
    assert answer["body"]["meta_info"]["completion_tokens"] == 8
