"""fleet: serial batches of one, max_fail_percentage 0: the failed first batch stops the deploy."""

import pytest
from scenario_fixtures import releases

FIRST_BATCH, SECOND_BATCH = "specdec-fleet-lab1", "specdec-fleet-lab2"


def test_each_host_is_where_its_batch_left_it(host, lab_host):
    name = host.backend.get_hostname()
    unit_file = lab_host.file("/etc/systemd/system/sglang.service")
    if name == FIRST_BATCH:
        # deployed, failed readiness, left stopped with its unit for the diagnosis
        assert not lab_host.service("sglang").is_running
        assert unit_file.is_file
    elif name == SECOND_BATCH:
        # the failed first batch stopped the play: nothing was ever deployed here
        assert not unit_file.exists
        assert releases(lab_host) == []
        assert not lab_host.user("sglang").exists
    else:
        pytest.fail(f"unexpected host {name} in the fleet scenario")
