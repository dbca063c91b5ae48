"""Fixtures every scenario's testinfra tests share (imported by each scenario's conftest)."""

import pytest
from lab_snapshot import controller_reports, snapshot


@pytest.fixture(scope="module")
def key(host):
    """The lab's API key (inventory/group_vars/lab), so the snapshot's generation is authorised."""
    return host.ansible.get_variables()["sglang_service_api_key"]


@pytest.fixture(scope="module")
def lab(host, key):
    """One snapshot of the host: unit, files, users, HTTP answers (molecule/shared/lab_snapshot.py)."""
    return snapshot(host, key=key)


@pytest.fixture(scope="module")
def report(host):
    """The deploy report the scenario wrote on the controller for this host."""
    return controller_reports()[host.backend.get_hostname()]
