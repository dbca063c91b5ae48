"""wedged: a server that lists models but never generates is not deployed."""

from scenario_fixtures import last_good


def test_wedged_first_deploy_is_stopped_and_disabled(lab_host):
    service = lab_host.service("sglang")
    assert not service.is_running
    assert not service.is_enabled
    assert service.systemd_properties["ActiveState"] in ("inactive", "failed")
    assert not lab_host.socket("tcp://127.0.0.1:30000").is_listening
    assert last_good(lab_host) is None
