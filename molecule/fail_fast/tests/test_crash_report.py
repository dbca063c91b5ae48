"""fail_fast, the host whose server crashed on start: its report names the exception the traceback ends with."""

# testinfra runs this module's tests on this host only (the wedged host's report has no traceback).
testinfra_hosts = ["ansible://specdec-fail_fast-lab1"]


def test_the_report_names_the_exception_the_traceback_ends_with(report):
    # sglang logs it as "[<time> TP0] Scheduler hit an exception: Traceback (most recent call last):"
    assert "Traceback (most recent call last):" in report["traceback"].splitlines()[0]
    last_line = report["traceback"].strip().splitlines()[-1]
    assert report["exception_line"] == last_line
    assert report["attempts"][-1]["exception_line"] == last_line
