"""fail_fast, every host: a first deploy that crashed on start (lab1) or wedged (wedged1) leaves the unit stopped,
disabled and unrecorded."""

from scenario_fixtures import last_good


def test_failed_first_deploy_leaves_the_unit_stopped_and_disabled(lab_host):
    service = lab_host.service("sglang")
    assert not service.is_running
    assert not service.is_enabled
    assert service.systemd_properties["ActiveState"] in ("inactive", "failed")
    assert not lab_host.socket("tcp://127.0.0.1:30000").is_listening
    assert not lab_host.process.filter(user="sglang"), "no process of the service user is left"


def test_failed_first_deploy_records_no_last_good_release(lab_host):
    assert last_good(lab_host) is None
