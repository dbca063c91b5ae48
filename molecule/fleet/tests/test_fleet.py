"""fleet: serial batches of one, max_fail_percentage 0: the failed first batch stops the deploy."""

import pytest


def test_failed_first_batch_host_is_stopped(host, lab):
    if host.backend.get_hostname() != "specdec-fleet-lab1":
        pytest.skip("first batch only")
    assert lab["show"]["ActiveState"] in ("inactive", "failed")
    assert lab["unit_file"]["exists"]


def test_second_batch_host_was_never_deployed(host, lab):
    if host.backend.get_hostname() != "specdec-fleet-lab2":
        pytest.skip("second batch only")
    assert not lab["unit_file"]["exists"]
    assert lab["releases"] == []
    assert not lab["user"]["exists"]
