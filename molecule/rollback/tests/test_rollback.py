"""rollback, lab1: after release 2 crashed on start, release 1 serves again with its own unit and environment."""

from scenario_fixtures import current, last_good, releases

testinfra_hosts = ["ansible://specdec-rollback-lab1"]


def test_report_names_both_releases(report):
    assert report["ok"] is False
    assert report["release_id"] != report["previous_release_id"]
    assert report["previous_release_id"] != ""
    assert report["rollback"]["release_id"] == report["previous_release_id"]
    assert report["rollback"]["ready"] is True
    assert report["rollback"]["probe"]["completion_tokens"] > 0


def test_release_1_serves_again(lab_host, lab, report):
    assert current(lab_host) == f"/opt/sglang/releases/{report['previous_release_id']}"
    assert lab_host.service("sglang").is_running
    assert last_good(lab_host)["release_id"] == report["previous_release_id"]
    answer = lab["generate_with_key"]
    assert answer["status"] == 200
    assert answer["body"]["meta_info"]["completion_tokens"] == 8


def test_release_1_runs_with_its_own_environment_file(lab_host):
    env = lab_host.file("/etc/sglang/sglang.env")
    assert not env.contains("SGLANG_SIM_FAULT")
    assert (env.user, env.mode) == ("root", 0o600)


def test_both_releases_stay_on_disk(lab_host, report):
    on_disk = releases(lab_host)
    assert report["release_id"] in on_disk
    assert report["previous_release_id"] in on_disk
