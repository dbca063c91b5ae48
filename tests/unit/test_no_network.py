"""The unit tier's network guard (tests/unit/conftest.py): loopback is allowed, anything else fails."""

import socket

import pytest


def test_a_connection_off_this_machine_fails_the_test():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(AssertionError, match=r"192\.0\.2\.1.*move it to tests/contract/"):
            sock.connect(("192.0.2.1", 443))  # TEST-NET-1: never routed, refused before any packet


def test_loopback_connections_still_work():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        with socket.create_connection(server.getsockname(), timeout=5) as client:
            accepted, _ = server.accept()
            client.sendall(b"ping")
            assert accepted.recv(4) == b"ping"
            accepted.close()
