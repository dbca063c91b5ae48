"""Filter specdec.sglang.gateway_workers: one worker per replica of every worker host, or an error naming why."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specdec.sglang.plugins.filter.gateway_workers import FilterModule


def _fact(address, *, port=30000, replicas=(), gpus=(), tp_size=1, unit_name="sglang"):
    return {
        "_sglang_gateway_worker": {
            "address": address,
            "gpus": list(gpus),
            "tp_size": str(tp_size),  # facts set from templates may arrive as strings
            "port": str(port),
            "unit_name": unit_name,
            "replicas": list(replicas),
        }
    }


gateway_workers = FilterModule().filters()["gateway_workers"]


def test_single_replica_hosts_give_one_worker_each_at_their_port():
    hostvars = {"lab1": _fact("10.88.0.2"), "lab2": _fact("10.88.0.3", port=30001)}
    workers = gateway_workers(["lab1", "lab2"], hostvars)
    assert [(w["host"], w["unit"], w["url"]) for w in workers] == [
        ("lab1", "sglang", "http://10.88.0.2:30000"),
        ("lab2", "sglang", "http://10.88.0.3:30001"),
    ]


def test_a_host_with_replicas_gives_one_worker_per_replica():
    hostvars = {"ct200": _fact("fd00::1", replicas=[{"name": "a"}, {"name": "b", "port": 31000}], gpus=["0", "1"])}
    assert [w["url"] for w in gateway_workers(["ct200"], hostvars)] == [
        "http://[fd00::1]:30000",
        "http://[fd00::1]:31000",
    ]


def test_a_host_that_was_not_read_and_a_bad_replica_list_are_refused_together():
    hostvars = {
        "lab1": _fact("192.0.2.1", replicas=[{"name": "a", "port": 30000}, {"name": "b", "port": 30000}]),
        "lab2": {},
    }
    with pytest.raises(AnsibleFilterError) as error:
        gateway_workers(["lab1", "lab2"], hostvars)
    message = str(error.value)
    assert "host(s) lab2 of the worker group were not read" in message
    assert "lab1: sglang_service_replicas: port 30000 is used by a, b" in message
