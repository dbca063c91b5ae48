"""port_owner: /proc/net/tcp{,6} inodes -> the holding pid -> inside or outside the watched tree."""

import os
import socket
import subprocess
import sys

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._host import port_owner

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"


def row(sl, local, state, inode):
    return "%4d: %s 00000000:0000 %s 00000000:00000000 00:00000000 00000000   997        0 %d 1 0 100 0\n" % (
        sl,
        local,
        state,
        inode,
    )


class FakeProc:
    def __init__(self, tcp="", tcp6="", processes=None):
        self.files = {"net/tcp": HEADER + tcp, "net/tcp6": HEADER + tcp6}
        self.fds = {}
        for pid, (ppid, comm, cmd, sockets) in (processes or {}).items():
            self.files["%d/stat" % pid] = "%d (%s) S %d 1 1 0 -1\n" % (pid, comm, ppid)
            self.files["%d/cmdline" % pid] = "\0".join(cmd) + "\0"
            self.fds[pid] = {str(3 + i): "socket:[%d]" % s for i, s in enumerate(sockets)}
            self.fds[pid]["0"] = "/dev/null"

    def read(self, path):
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def listdir(self, path):
        if path == "":
            return [str(p) for p in self.fds] + ["net", "self"]
        pid = int(path.split("/")[0])
        if pid not in self.fds:
            raise FileNotFoundError(path)
        return list(self.fds[pid])

    def readlink(self, path):
        pid, _, fd = path.split("/")
        return self.fds[int(pid)][fd]


# 0x7530 = 30000
LISTEN_30000 = row(0, "0100007F:7530", "0A", 4242)
ESTABLISHED_30000 = row(1, "0100007F:7530", "01", 5151)


def test_parser_reads_port_state_and_inode_of_ipv4_and_ipv6_rows():
    rows = port_owner.parse_net_tcp(HEADER + LISTEN_30000 + row(1, "00000000000000000000000001000000:1F90", "0A", 7))
    assert [(r["local_port"], r["state"], r["inode"]) for r in rows] == [(30000, "0A", 4242), (8080, "0A", 7)]


def test_a_free_port_is_free_and_connections_are_not_listeners():
    proc = FakeProc(tcp=ESTABLISHED_30000, processes={10: (1, "sglang", ["python3"], [5151])})
    assert port_owner.port_check(30000, 10, proc)["state"] == "free"


def test_a_listener_of_a_child_of_the_main_pid_is_own():
    proc = FakeProc(
        tcp6=row(0, "00000000000000000000000000000000:7530", "0A", 99),
        processes={
            100: (1, "python3", ["python3", "-m", "sglang.launch_server"], []),
            101: (100, "uvicorn", ["x"], [99]),
        },
    )
    assert port_owner.port_check(30000, 100, proc) == {"state": "own", "port": 30000, "pids": [101]}


def test_a_listener_outside_the_tree_is_foreign_naming_pid_and_command():
    proc = FakeProc(
        tcp=LISTEN_30000,
        processes={
            100: (1, "sglang", ["/opt/sglang/current/venv/bin/python3", "-m", "sglang.launch_server"], []),
            555: (1, "python3 (x)", ["python3", "-m", "http.server", "30000"], [4242]),
        },
    )
    result = port_owner.port_check(30000, 100, proc)
    assert result["state"] == "foreign"
    assert result["pid"] == 555
    assert result["command"] == "python3 -m http.server 30000"
    assert "held by pid 555 (python3 -m http.server 30000), not by the tree of pid 100" in result["reason"]


def test_a_foreign_holder_s_secret_flags_are_redacted_in_its_command():
    """Another SGLang server on the port: its --api-key must not reach the deploy's output."""
    secret = "sk-other-server-key"
    proc = FakeProc(
        tcp=LISTEN_30000,
        processes={
            555: (
                1,
                "python3",
                ["python3", "-m", "sglang.launch_server", "--api-key", secret, "--port", "30000"],
                [4242],
            )
        },
    )
    result = port_owner.port_check(30000, 100, proc)
    assert result["command"] == "python3 -m sglang.launch_server --api-key <redacted> --port 30000"
    assert secret not in repr(result)


def test_before_the_start_any_holder_is_foreign():
    proc = FakeProc(tcp=LISTEN_30000, processes={7: (1, "nc", ["nc", "-l", "30000"], [4242])})
    result = port_owner.port_check(30000, 0, proc)
    assert result["state"] == "foreign" and "not by nobody (the service is not running)" in result["reason"]


def test_a_listener_whose_holder_cannot_be_seen_is_unknown_not_foreign():
    proc = FakeProc(tcp=LISTEN_30000, processes={7: (1, "other", ["other"], [])})
    assert port_owner.port_check(30000, 7, proc)["state"] == "unknown"


@pytest.mark.parametrize("comm", ["a b", "weird) name", "(("])
def test_parent_is_read_after_the_last_parenthesis_of_comm(comm):
    proc = FakeProc(processes={5: (3, comm, ["x"], [])})
    assert port_owner.parent_of(5, proc) == 3


def test_the_real_proc_finds_this_process_listening_and_a_sibling_is_not_its_owner():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    try:
        port = sock.getsockname()[1]
        result = port_owner.port_check(port, os.getpid())
        assert result["state"] == "own" and os.getpid() in result["pids"]
        other = port_owner.port_check(port, child.pid)
        assert other["state"] == "foreign" and other["pid"] == os.getpid()
    finally:
        sock.close()
        child.kill()
        child.wait()
