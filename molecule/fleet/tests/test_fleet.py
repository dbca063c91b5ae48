"""fleet: serial batches of one, max_fail_percentage 0: the failed first batch stops the deploy."""

import pytest

FIRST_BATCH, SECOND_BATCH = "specdec-fleet-lab1", "specdec-fleet-lab2"


def test_each_host_is_where_its_batch_left_it(host, lab):
    name = host.backend.get_hostname()
    if name == FIRST_BATCH:
        # deployed, failed readiness, left stopped with its unit for the diagnosis
        assert lab["show"]["ActiveState"] in ("inactive", "failed")
        assert lab["unit_file"]["exists"]
    elif name == SECOND_BATCH:
        # the failed first batch stopped the play: nothing was ever deployed here
        assert not lab["unit_file"]["exists"]
        assert lab["releases"] == []
        assert not lab["user"]["exists"]
    else:
        pytest.fail(f"unexpected host {name} in the fleet scenario")
