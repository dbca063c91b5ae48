"""fail_fast: a crash on start of a first deploy leaves the unit stopped, disabled, unrecorded."""

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


def test_the_report_names_the_exception_the_traceback_ends_with(report):
    # sglang logs it as "[<time> TP0] Scheduler hit an exception: Traceback (most recent call last):"
    assert "Traceback (most recent call last):" in report["traceback"].splitlines()[0]
    last_line = report["traceback"].strip().splitlines()[-1]
    assert report["exception_line"] == last_line
    assert report["attempts"][-1]["exception_line"] == last_line
