# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A process without systemd (containers, a GPU box started by hand): pid / pidfile and a log file.

``ProcessWatcher`` gives the same verdict inputs as the unit watcher: alive, dead
(no such process, or a zombie), restarted (the pidfile names another live process, or
the pid now belongs to a process started later). Liveness comes from ``/proc``
(``proc_root`` is injectable for tests); the log is the tail of ``log_file``.

``ExitWaiter`` is the readiness loop's sleep, event-driven where the host allows it: it
holds a pidfd (Linux >= 5.3, Python >= 3.9) on the process the watcher last saw alive and
returns as soon as that process exits, instead of at the end of the poll interval. Without
pidfd support it is a plain sleep (the polling fallback).

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import os
import select
import time

from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import WatchState

# Read at most this much of the end of a log file (the result is bounded again later).
LOG_READ_MAX_BYTES = 8 * 1024 * 1024


def read_pidfile(path):
    """The pid in ``path`` (first token), or None when missing / empty / not a number."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            token = handle.read().strip().split()
    except OSError:
        return None
    if not token:
        return None
    try:
        pid = int(token[0])
    except ValueError:
        return None
    return pid if pid > 0 else None


def process_stat(pid, proc_root="/proc"):
    """(state letter, start time in clock ticks) from /proc/<pid>/stat, or None if gone."""
    try:
        with open(os.path.join(proc_root, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
            raw = handle.read()
    except OSError:
        return None
    # comm may hold spaces and parentheses: fields restart after the last ')'.
    rest = raw[raw.rfind(")") + 1 :].split()
    if len(rest) < 20:
        return None
    return rest[0], rest[19]


def read_log_tail(path, max_bytes=LOG_READ_MAX_BYTES):
    """The last ``max_bytes`` of a log file as text, starting at a line boundary ('' if absent)."""
    if not path:
        return ""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            start = max(0, size - max_bytes)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    if start > 0:
        newline = text.find("\n")
        text = text[newline + 1 :] if newline >= 0 else text
    return text


class ExitWaiter:
    """A sleep that ends when the watched process exits (pidfd), else after ``seconds``.

    ``watch(pid)`` points it at the process a watcher saw alive; ``dead()`` tells it the
    watcher has seen the death, after which it is a plain sleep again (the readiness loop's
    journal settle re-reads keep their pace). Between the exit and the watcher noticing it
    (systemd may need a moment to reap), waits are cut to ``fast_s``. Call it like
    ``time.sleep``. ``pidfd_open``, ``poller`` and ``sleep`` are injectable for tests.
    """

    def __init__(self, sleep=time.sleep, pidfd_open=None, poller=None, fast_s=0.02):
        self._sleep = sleep
        self._pidfd_open = pidfd_open if pidfd_open is not None else getattr(os, "pidfd_open", None)
        self._poller = poller if poller is not None else getattr(select, "poll", None)
        self.fast_s = fast_s
        self.pid = None
        self._fd = None
        self.exited = False
        self.events = 0

    @property
    def event_driven(self):
        return self._fd is not None

    def watch(self, pid):
        """Wait on ``pid`` from now on (no-op for the same pid; falls back to sleeping on error)."""
        if not pid or pid == self.pid:
            return
        self.close()
        self.pid = pid
        self.exited = False
        if self._pidfd_open is None or self._poller is None:
            return
        try:
            self._fd = self._pidfd_open(pid)
        except (OSError, AttributeError):
            self._fd = None

    def dead(self):
        """The watcher saw the death: plain sleeps from now on (until ``watch`` of a new pid)."""
        self.close()
        self.exited = False

    def close(self):
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self._fd = None
        self.pid = None

    def __call__(self, seconds):
        if self.exited:
            self._sleep(min(seconds, self.fast_s))
            return
        if self._fd is None:
            self._sleep(seconds)
            return
        poll = self._poller()
        poll.register(self._fd, select.POLLIN)
        if poll.poll(max(0, int(seconds * 1000))):
            self.exited = True
            self.events += 1


class ProcessWatcher:
    """Watches a pid (fixed) or a pidfile (re-read every poll) and reads ``log_file``.

    With ``waiter`` (an ``ExitWaiter``), every poll points it at the live process and tells
    it when the process is dead.
    """

    kind = "process"

    def __init__(self, pid=None, pidfile=None, log_file=None, proc_root="/proc", waiter=None):
        if not pid and not pidfile:
            raise ValueError("ProcessWatcher needs pid or pidfile")
        self.pid = pid
        self.pidfile = pidfile
        self.log_file = log_file
        self.proc_root = proc_root
        self.first_pid = None
        self.first_start = None
        self.last = {}
        self.restart_detail = None
        self.waiter = waiter

    def _current_pid(self):
        if self.pidfile:
            return read_pidfile(self.pidfile)
        return self.pid

    def poll(self):
        state = self._poll()
        if self.waiter is not None:
            if state.alive:
                self.waiter.watch(self.last.get("pid"))
            else:
                self.waiter.dead()
        return state

    def _poll(self):
        pid = self._current_pid()
        stat = process_stat(pid, self.proc_root) if pid else None
        state = stat[0] if stat else None
        alive = stat is not None and state not in ("Z", "X", "x")
        detail = {
            "pid": pid,
            "pidfile": self.pidfile,
            "state": state,
            "alive": alive,
            "log_file": self.log_file,
        }
        self.last = detail
        if self.first_pid is None and alive:
            self.first_pid, self.first_start = pid, stat[1]
        if self.first_pid is None:
            what = "pidfile %s names no live process" % self.pidfile if self.pidfile else "process %s is gone" % pid
            if pid and state in ("Z", "X", "x"):
                what = "process %s exited (zombie)" % pid
            return WatchState(False, dead=True, description=what, detail=detail)
        if pid and pid != self.first_pid and alive:
            self.restart_detail = "pid %d -> %d (pidfile %s)" % (self.first_pid, pid, self.pidfile)
            return WatchState(
                False, restarted=True, description="process restarted: " + self.restart_detail, detail=detail
            )
        if pid == self.first_pid and alive and stat[1] != self.first_start:
            self.restart_detail = "pid %d was reused by a new process" % pid
            return WatchState(
                False, restarted=True, description="process restarted: " + self.restart_detail, detail=detail
            )
        if not alive:
            if pid and state in ("Z", "X", "x"):
                what = "process %s exited (zombie)" % pid
            elif pid and pid != self.first_pid:
                what = "process %d is gone (pidfile now names %d, not running)" % (self.first_pid, pid)
            else:
                what = "process %s is gone" % (pid or self.first_pid)
            return WatchState(False, dead=True, description=what, detail=detail)
        return WatchState(True, description="process %d is running (state %s)" % (pid, state), detail=detail)

    def started_ago(self):
        """Seconds since the watched process started (``/proc`` start time against the uptime), or None."""
        if self.first_start is None:
            return None
        try:
            with open(os.path.join(self.proc_root, "uptime"), encoding="ascii") as handle:
                uptime = float(handle.read().split()[0])
            ticks = os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None
        return max(0.0, uptime - int(self.first_start) / float(ticks))

    @staticmethod
    def log_settled(text):
        """A log file is written by the process itself: nothing lags its death."""
        return True

    @staticmethod
    def sync_log():
        """Nothing to sync: what the process wrote to its log file is readable once it is dead."""
        return True

    def read_log(self, tail_lines=None):
        text = read_log_tail(self.log_file)
        if tail_lines:
            lines = text.splitlines()
            text = "\n".join(lines[-tail_lines:])
        return text
