"""rollback: after release 2 failed, release 1 serves again with its own unit and environment."""


def test_report_names_both_releases(report):
    assert report["ok"] is False
    assert report["release_id"] != report["previous_release_id"]
    assert report["previous_release_id"] != ""
    assert report["rollback"]["release_id"] == report["previous_release_id"]
    assert report["rollback"]["ready"] is True
    assert report["rollback"]["probe"]["completion_tokens"] > 0


def test_release_1_serves_again(lab, report):
    assert lab["current"] == f"/opt/sglang/releases/{report['previous_release_id']}"
    assert lab["show"]["ActiveState"] == "active"
    assert lab["last_good"]["release_id"] == report["previous_release_id"]
    answer = lab["generate_with_key"]
    assert answer["status"] == 200
    assert answer["body"]["meta_info"]["completion_tokens"] == 8


def test_release_1_runs_with_its_own_environment_file(lab):
    assert "SGLANG_SIM_FAULT" not in lab["env_file"]["content"]
    assert lab["env_file"]["mode"] == 0o600


def test_both_releases_stay_on_disk(lab, report):
    assert report["release_id"] in lab["releases"]
    assert report["previous_release_id"] in lab["releases"]
