# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""systemd unit state: ``systemctl show`` through an injected command runner, parsed.

``UnitWatcher`` turns successive states into the readiness verdict inputs: alive,
dead (failed / inactive / exited / deactivating), restarted (NRestarts grew, the main
PID or the invocation changed, or systemd is in ``auto-restart``), and reads the
journal of the start it watches.

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import time

from ansible_collections.specdec.sglang.plugins.module_utils._readiness.journal import (
    JournalReader,
    traceback_complete,
    unit_end_seen,
)

SHOW_PROPERTIES = (
    "Id",
    "LoadState",
    "ActiveState",
    "SubState",
    "Result",
    "NRestarts",
    "MainPID",
    "ExecMainPID",
    "ExecMainStatus",
    "ExecMainCode",
    "InvocationID",
    "InactiveExitTimestampMonotonic",
    "ActiveEnterTimestampMonotonic",
    "ExecMainStartTimestampMonotonic",
    "ExecMainExitTimestampMonotonic",
)

# CLD_* codes systemd reports in ExecMainCode.
_EXIT_CODES = {"1": "exited", "2": "killed", "3": "dumped", "4": "trapped", "5": "stopped", "6": "continued"}


def show_command(unit):
    return ["systemctl", "show", unit, "--no-pager", "--property=" + ",".join(SHOW_PROPERTIES)]


def parse_show(text):
    """``Key=Value`` lines -> dict (values kept as strings)."""
    props = {}
    for line in (text or "").splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            props[key.strip()] = value.strip()
    return props


def _int(value, default=0):
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


class UnitState:
    """One parsed ``systemctl show``."""

    def __init__(self, unit, props):
        self.unit = unit
        self.props = props
        self.load_state = props.get("LoadState", "")
        self.active_state = props.get("ActiveState", "")
        self.sub_state = props.get("SubState", "")
        self.result = props.get("Result", "")
        self.n_restarts = _int(props.get("NRestarts"))
        self.main_pid = _int(props.get("MainPID")) or _int(props.get("ExecMainPID"))
        self.exec_main_pid = _int(props.get("ExecMainPID"))
        self.exec_main_status = _int(props.get("ExecMainStatus"))
        code = props.get("ExecMainCode", "")
        self.exec_main_code = _EXIT_CODES.get(code, code)
        self.invocation_id = props.get("InvocationID", "")
        self.exit_monotonic_us = _int(props.get("ExecMainExitTimestampMonotonic"))
        self.start_monotonic_us = (
            _int(props.get("InactiveExitTimestampMonotonic"))
            or _int(props.get("ExecMainStartTimestampMonotonic"))
            or _int(props.get("ActiveEnterTimestampMonotonic"))
        )

    @property
    def not_found(self):
        return self.load_state in ("not-found", "bad-setting", "error", "masked")

    @property
    def auto_restart(self):
        return self.sub_state == "auto-restart"

    @property
    def dead(self):
        """The main process is gone (and systemd is not restarting it)."""
        if self.auto_restart:
            return False
        if self.active_state in ("failed", "inactive", "deactivating"):
            return True
        return self.sub_state in ("exited", "dead", "failed")

    def start_epoch(self, now_epoch=None, now_monotonic=None):
        """Wall-clock epoch of this start, from systemd's monotonic stamp (None if unknown)."""
        if not self.start_monotonic_us:
            return None
        now_epoch = time.time() if now_epoch is None else now_epoch
        now_monotonic = time.monotonic() if now_monotonic is None else now_monotonic
        return now_epoch - (now_monotonic - self.start_monotonic_us / 1e6)

    def describe(self):
        text = "unit %s is %s/%s" % (self.unit, self.active_state or "?", self.sub_state or "?")
        if self.dead or self.auto_restart:
            text += " (main process %s, status %d" % (self.exec_main_code or "?", self.exec_main_status)
            if self.result and self.result != "success":
                text += ", result %s" % self.result
            text += ")"
        return text

    def as_dict(self):
        return {
            "name": self.unit,
            "load_state": self.load_state,
            "active_state": self.active_state,
            "sub_state": self.sub_state,
            "result": self.result,
            "n_restarts": self.n_restarts,
            "main_pid": self.main_pid,
            "exec_main_status": self.exec_main_status,
            "exec_main_code": self.exec_main_code,
            "invocation_id": self.invocation_id,
        }


def read_unit_state(unit, run_command):
    """Run ``systemctl show`` through ``run_command(argv) -> (rc, out, err)``; UnitState."""
    rc, out, err = run_command(show_command(unit))
    if rc != 0:
        raise RuntimeError(
            "expected `systemctl show %s` to succeed, it exited %d: %s; "
            "this host may not run systemd: use pid/pidfile and log_file instead" % (unit, rc, (err or out).strip())
        )
    return UnitState(unit, parse_show(out))


class WatchState:
    """What a watcher saw in one poll."""

    def __init__(
        self, alive, *, dead=False, restarted=False, not_started=False, description="", detail=None, exited_at=None
    ):
        self.alive = alive
        # CLOCK_MONOTONIC seconds when the main process exited, where the watcher knows it.
        self.exited_at = exited_at
        self.dead = dead
        self.restarted = restarted
        self.not_started = not_started
        self.description = description
        self.detail = detail or {}


class UnitWatcher:
    """Watches one systemd unit across polls; reads the journal of the start it first saw."""

    kind = "unit"

    def __init__(self, unit, run_command, journal=None, waiter=None):
        self.unit = unit
        # An ExitWaiter (process_state): every poll points it at the live main PID.
        self.waiter = waiter
        self._run = run_command
        self.journal = journal or JournalReader(run_command)
        self.first = None
        self.last = None
        self.restart_detail = None

    def poll(self):
        watch = self._poll()
        if self.waiter is not None:
            if watch.alive and self.last is not None and self.last.main_pid:
                self.waiter.watch(self.last.main_pid)
            elif not watch.alive:
                self.waiter.dead()
        return watch

    def _poll(self):
        state = read_unit_state(self.unit, self._run)
        first = self.first
        if first is None:
            self.first = first = state
        self.last = state
        detail = state.as_dict()
        if state.not_found:
            return WatchState(
                False,
                dead=True,
                not_started=True,
                description="unit %s is %s" % (self.unit, state.load_state),
                detail=detail,
            )
        exited_at = state.exit_monotonic_us / 1e6 if state.exit_monotonic_us else None
        if state.auto_restart:
            self.restart_detail = "systemd is restarting it (sub-state auto-restart, NRestarts=%d)" % state.n_restarts
            return WatchState(False, restarted=True, description=state.describe(), detail=detail, exited_at=exited_at)
        changes = []
        if state.n_restarts > first.n_restarts:
            changes.append("NRestarts %d -> %d" % (first.n_restarts, state.n_restarts))
        if first.main_pid and state.main_pid and state.main_pid != first.main_pid:
            changes.append("main PID %d -> %d" % (first.main_pid, state.main_pid))
        if first.invocation_id and state.invocation_id and state.invocation_id != first.invocation_id:
            changes.append("invocation %s -> %s" % (first.invocation_id, state.invocation_id))
        if changes:
            self.restart_detail = ", ".join(changes)
            return WatchState(
                False,
                restarted=True,
                description="unit %s restarted: %s" % (self.unit, self.restart_detail),
                detail=detail,
            )
        if state.dead:
            never = state.active_state == "inactive" and not state.invocation_id and not state.exec_main_pid
            return WatchState(
                False,
                dead=True,
                not_started=never,
                description=state.describe(),
                detail=detail,
                exited_at=exited_at,
            )
        return WatchState(True, description=state.describe(), detail=detail)

    def started_ago(self, now_monotonic=None):
        """Seconds since systemd started the watched invocation (its monotonic stamp), or None."""
        ref = self.first
        if ref is None or not ref.start_monotonic_us:
            return None
        now_monotonic = time.monotonic() if now_monotonic is None else now_monotonic
        return max(0.0, now_monotonic - ref.start_monotonic_us / 1e6)

    @staticmethod
    def log_settled(text):
        """journald may lag a death: the log is complete once systemd's end lines are in it and the
        last traceback of the process's output has its exception line."""
        return unit_end_seen(text) and traceback_complete(text)

    def sync_log(self):
        """Make journald process everything written so far (``journalctl --sync``); False if it could not."""
        return self.journal.sync()

    def read_log(self, tail_lines=None):
        """Journal of the watched start (the first invocation seen), oldest first."""
        ref = self.first or self.last
        if ref is None:
            return ""
        return self.journal.read(
            unit=self.unit,
            invocation_id=ref.invocation_id or None,
            since_epoch=ref.start_epoch(),
            tail_lines=tail_lines,
        )
