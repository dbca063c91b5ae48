"""The unit tier runs with no network: a connection to anything but this machine fails the test.

Tests that need the real sglang source (downloaded by scripts/fetch-sglang) belong in tests/contract/;
the `sglang_source_tree` fixture exists only there.
"""

import ipaddress
import socket

import pytest
from ansible.module_utils.common import warnings


class NetworkUsedInUnitTest(AssertionError):
    pass


def _is_local(family, address):
    if family == getattr(socket, "AF_UNIX", object()):
        return True
    host = address[0] if isinstance(address, tuple) else address
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """Refuse connections to non-loopback addresses for the duration of every unit test."""
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guard(real):
        def connect(self, address):
            if not _is_local(self.family, address):
                raise NetworkUsedInUnitTest(f"unit test tried to reach {address!r}; move it to tests/contract/")
            return real(self, address)

        return connect

    monkeypatch.setattr(socket.socket, "connect", guard(real_connect))
    monkeypatch.setattr(socket.socket, "connect_ex", guard(real_connect_ex))


@pytest.fixture(autouse=True)
def fresh_module_warnings():
    """Each test starts with ansible's process-wide warning and deprecation lists empty.

    A module's warn() lands in a module-level collection that exit_json() reports; in a real run
    every module is its own process, so one test's warnings must not show up in the next one's result.
    """
    for name in ("_global_warnings", "_global_deprecations"):
        getattr(warnings, name).clear()  # a list up to 2.18, a dict from 2.19
    yield
