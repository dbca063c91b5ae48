# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Who listens on a TCP port, and whether that is the watched process tree.

``/proc/net/tcp`` and ``/proc/net/tcp6`` list every socket with its local address, state and
inode; a process holds the listener when one of ``/proc/<pid>/fd/*`` links to
``socket:[<inode>]``. The watched tree is the root PID (the unit's main PID, or the watched
process) and every process whose parent chain (``/proc/<pid>/stat`` field 4) leads to it.

Everything reads through a ``Proc`` object (``read``, ``listdir``, ``readlink``), so the parser and
the judgement are unit tested with a fake ``/proc``. Reading another user's fds needs root (the
deploy runs with become); a listener whose holder cannot be seen is reported as unknown, never as
foreign.

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import os

from ansible_collections.specdec.sglang.plugins.module_utils._host import redact

FAILURE_CLASS = "port_in_use"
LISTEN = "0A"


class Proc:
    """The real /proc (tests pass a fake with the same three methods)."""

    def __init__(self, root="/proc"):
        self.root = root

    def read(self, path):
        with open(os.path.join(self.root, path), "rb") as handle:
            return handle.read().decode("utf-8", "replace")

    def listdir(self, path):
        return os.listdir(os.path.join(self.root, path))

    def readlink(self, path):
        return os.readlink(os.path.join(self.root, path))


def parse_net_tcp(text):
    """Rows of /proc/net/tcp{,6}: dicts with local_port, state (hex, 0A = LISTEN) and inode."""
    rows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or ":" not in fields[1]:
            continue
        try:
            port = int(fields[1].rsplit(":", 1)[1], 16)
            inode = int(fields[9])
        except ValueError:
            continue
        rows.append({"local": fields[1], "local_port": port, "state": fields[3].upper(), "inode": inode})
    return rows


def listening_inodes(port, proc):
    """Socket inodes listening on ``port`` (IPv4 and IPv6); inode 0 (no owner yet) left out."""
    found = set()
    for table in ("net/tcp", "net/tcp6"):
        try:
            text = proc.read(table)
        except OSError:
            continue
        for row in parse_net_tcp(text):
            if row["local_port"] == port and row["state"] == LISTEN and row["inode"]:
                found.add(row["inode"])
    return found


def _pids(proc):
    try:
        return sorted(int(name) for name in proc.listdir("") if name.isdigit())
    except OSError:
        return []


def socket_holders(inodes, proc):
    """{pid: set(inodes)} of processes with an fd on one of ``inodes``."""
    wanted = {"socket:[%d]" % inode: inode for inode in inodes}
    holders = {}
    if not wanted:
        return holders
    for pid in _pids(proc):
        try:
            fds = proc.listdir("%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                target = proc.readlink("%d/fd/%s" % (pid, fd))
            except OSError:
                continue
            if target in wanted:
                holders.setdefault(pid, set()).add(wanted[target])
    return holders


def parent_of(pid, proc):
    """The parent PID from /proc/<pid>/stat (the comm field may hold spaces and parentheses)."""
    try:
        text = proc.read("%d/stat" % pid)
    except OSError:
        return None
    rest = text[text.rfind(")") + 1 :].split()
    try:
        return int(rest[1])
    except (IndexError, ValueError):
        return None


def in_tree(pid, root, proc, limit=64):
    """Whether ``pid`` is ``root`` or one of its descendants."""
    seen = 0
    while pid and seen < limit:
        if pid == root:
            return True
        pid = parent_of(pid, proc)
        seen += 1
    return False


def command_of(pid, proc):
    """The command line of ``pid``, the values of its secret flags (``--api-key``, ``--hf-token``) redacted.

    It goes into the deploy's output and report: the holder of a port may be another SGLang server, whose
    command line carries its API key."""
    try:
        text = proc.read("%d/cmdline" % pid)
    except OSError:
        return ""
    return redact.scrub(" ".join(part for part in text.split("\0") if part))[0][:300]


def port_check(port, root_pid, proc=None):
    """Who holds ``port``, judged against the tree of ``root_pid`` (0/None: no process may hold it).

    Returns a dict: ``state`` is ``free`` (nobody listens), ``own`` (every holder is in the tree),
    ``foreign`` (a holder outside it: ``pid`` and ``command`` name the first) or ``unknown`` (a
    listener whose holder could not be seen).
    """
    proc = proc or Proc()
    inodes = listening_inodes(port, proc)
    if not inodes:
        return {"state": "free", "port": port}
    holders = socket_holders(inodes, proc)
    if not holders:
        return {"state": "unknown", "port": port, "reason": "port %d listens, its holder is not visible" % port}
    foreign = [pid for pid in sorted(holders) if not (root_pid and in_tree(pid, root_pid, proc))]
    if not foreign:
        return {"state": "own", "port": port, "pids": sorted(holders)}
    pid = foreign[0]
    command = command_of(pid, proc)
    owner = ("the tree of pid %d" % root_pid) if root_pid else "nobody (the service is not running)"
    return {
        "state": "foreign",
        "port": port,
        "pid": pid,
        "command": command,
        "reason": "port %d is held by pid %d (%s), not by %s" % (port, pid, command or "command unknown", owner),
    }
