"""fail_fast: a crash on start of a first deploy leaves the unit stopped, disabled, unrecorded."""


def test_failed_first_deploy_leaves_the_unit_stopped_and_disabled(lab):
    assert lab["show"]["ActiveState"] in ("inactive", "failed")
    assert lab["show"]["UnitFileState"] == "disabled"
    assert lab["listening"].strip() == ""


def test_failed_first_deploy_records_no_last_good_release(lab):
    assert lab["last_good"] is None


def test_the_report_names_the_exception_the_traceback_ends_with(report):
    # sglang logs it as "[<time> TP0] Scheduler hit an exception: Traceback (most recent call last):"
    assert "Traceback (most recent call last):" in report["traceback"].splitlines()[0]
    last_line = report["traceback"].strip().splitlines()[-1]
    assert report["exception_line"] == last_line
    assert report["attempts"][-1]["exception_line"] == last_line
