# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host lock of a deploy, rollback or stop: what to do with the lock file found on the host.

Pure functions (no I/O): the module reads the file, the clock, the boot id and checks pids, then asks
``decide``. The holder of a lock taken by a play is the ansible-playbook run (its run id, the
controller's host name and pid, the play), not the module process, which exits between tasks.
"""

from __future__ import annotations

import json

ACQUIRE = "acquire"  # no lock on the host: create it
OURS = "ours"  # this run already holds it (a later play of the same run)
WAIT = "wait"  # another live holder: wait and look again
REFUSE = "refuse"  # another live holder and the wait is over
TAKE_OVER = "take_over"  # the holder is gone (stale): replace the lock, and say so


def make_record(run_id, *, owner, controller_pid, play, started_at, boot_id, pid=0):
    """The lock file's content: who holds it, since when (epoch seconds), on which boot of the host.

    ``pid`` is a host-side holder's process (0 for a play, whose tasks' processes come and go)."""
    return {
        "run_id": str(run_id),
        "owner": str(owner),
        "controller_pid": int(controller_pid or 0),
        "play": str(play),
        "started_at": float(started_at),
        "boot_id": str(boot_id or ""),
        "pid": int(pid or 0),
    }


def dumps(record):
    return json.dumps(record, sort_keys=True) + "\n"


def parse(text):
    """The record in a lock file, or None when it is empty or not a record (being written, or damaged)."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not data.get("run_id"):
        return None
    try:
        return make_record(
            data["run_id"],
            owner=data.get("owner", ""),
            controller_pid=data.get("controller_pid", 0),
            play=data.get("play", ""),
            started_at=data.get("started_at", 0),
            boot_id=data.get("boot_id", ""),
            pid=data.get("pid", 0),
        )
    except (TypeError, ValueError):
        return None


def describe(record, now=None):
    """The holder in words, for a wait or a refusal."""
    if record is None:
        return "an unreadable lock (empty or damaged content)"
    text = "run %s of play '%s' from %s (controller pid %s)" % (
        record["run_id"],
        record["play"],
        record["owner"],
        record["controller_pid"],
    )
    if record["pid"]:
        text += ", host pid %s" % record["pid"]
    if now is not None:
        text += ", started %ds ago" % max(0, int(now - record["started_at"]))
    return text


def stale_reason(record, *, now, mtime, boot_id, max_age_s, pid_alive):
    """Why the lock's holder is gone, or "" while it may still be running."""
    if record is None:
        age = now - mtime
        if age > max_age_s:
            return "the unreadable lock is %ds old, more than the maximum age of %ds" % (age, max_age_s)
        return ""
    if record["boot_id"] and boot_id and record["boot_id"] != boot_id:
        return "the host rebooted since the lock was taken (boot id %s, now %s)" % (record["boot_id"], boot_id)
    if record["pid"] and not pid_alive(record["pid"]):
        return "its host process %s is no longer alive" % record["pid"]
    age = now - record["started_at"]
    if age > max_age_s:
        return "it was taken %ds ago, more than the maximum age of %ds" % (age, max_age_s)
    return ""


def decide(record, *, exists, run_id, now, mtime, boot_id, max_age_s, waited_s, timeout_s, pid_alive):
    """(action, reason): ACQUIRE, OURS, WAIT, REFUSE or TAKE_OVER for the lock found on the host.

    ``record`` is the parsed file (None when absent or unreadable), ``exists`` whether the file is there,
    ``pid_alive(pid)`` whether a host process runs, ``waited_s`` how long this run has waited already."""
    if not exists:
        return ACQUIRE, "no lock is held"
    if record is not None and record["run_id"] == run_id:
        return OURS, "this run holds the lock already"
    reason = stale_reason(record, now=now, mtime=mtime, boot_id=boot_id, max_age_s=max_age_s, pid_alive=pid_alive)
    if reason:
        return TAKE_OVER, "taking over the stale lock of %s: %s" % (describe(record, now), reason)
    if waited_s >= timeout_s:
        return REFUSE, "held by %s; waited %ds (timeout %ds)" % (describe(record, now), waited_s, timeout_s)
    return WAIT, "held by %s" % describe(record, now)


def release_action(record, exists, run_id):
    """(remove, reason) for a release: only the holder removes its lock."""
    if not exists:
        return False, "no lock is held"
    if record is None or record["run_id"] != run_id:
        return False, "the lock is not this run's: it is held by %s" % describe(record)
    return True, "released"
