# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host lock of a deploy, rollback or stop: what to do with the lock file found on the host.

Pure functions (no I/O): the module reads the file, the clock, the boot id and checks pids, then asks
``decide``. The holder of a lock taken by a play is the ansible-playbook run (its run id, the
controller's identity, its ansible-playbook pid and that process's start, the play), not the module
process, which exits between tasks.

Whether a play's holder still runs is known only on the controller: the action plugin
``specdec.sglang.sglang_host_lock`` asks ``holder_liveness`` there (same controller identity: the pid
and its start token; another controller: nothing can be checked, only the lock's age or an explicit
break by the operator) and, for a dead holder, has the module take the lock over at once.
"""

from __future__ import annotations

import json

ACQUIRE = "acquire"  # no lock on the host: create it
OURS = "ours"  # this run already holds it (a later play of the same run)
WAIT = "wait"  # another live holder: wait and look again
REFUSE = "refuse"  # another live holder and the wait is over
TAKE_OVER = "take_over"  # the holder is gone (stale): replace the lock, and say so
HELD = "held"  # another holder, and the caller waits itself (the action plugin, which checks liveness)

# The holder's liveness, as the controller sees it.
ALIVE = "alive"  # same controller, its ansible-playbook process runs (same pid, same start)
DEAD = "dead"  # same controller, that process is gone (or the pid is now another process)
FOREIGN = "foreign"  # another controller (or an unreadable lock): nothing to check from here


def make_record(
    run_id, *, owner, controller_pid, play, started_at, boot_id, pid=0, controller="", controller_pid_start=""
):
    """The lock file's content: who holds it, since when (epoch seconds), on which boot of the host.

    ``controller`` is the controller's identity (``controller_identity``), ``controller_pid`` its
    ansible-playbook process and ``controller_pid_start`` that process's start token
    (``process_start_token``): together they say, on that controller, whether the holder still runs.
    ``pid`` is a host-side holder's process (0 for a play, whose tasks' processes come and go)."""
    return {
        "run_id": str(run_id),
        "owner": str(owner),
        "controller": str(controller or ""),
        "controller_pid": int(controller_pid or 0),
        "controller_pid_start": str(controller_pid_start or ""),
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
            controller=data.get("controller", ""),
            controller_pid_start=data.get("controller_pid_start", ""),
        )
    except (TypeError, ValueError):
        return None


def describe(record, now=None):
    """The holder in words, for a wait or a refusal."""
    if record is None:
        return "an unreadable lock (empty or damaged content)"
    text = "run %s of play '%s' from %s (controller pid %s%s)" % (
        record["run_id"],
        record["play"],
        record["owner"],
        record["controller_pid"],
        ", controller %s" % record["controller"] if record.get("controller") else "",
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


def _take_over(record, *, take_over_run_id, take_over_reason, break_lock, stale, now):
    """Why another run's lock is taken over (the said reason), or "" when it is not."""
    if take_over_run_id and record is not None and record["run_id"] == take_over_run_id:
        return "taking over the lock of %s: %s" % (describe(record, now), take_over_reason or "it is dead")
    if break_lock:
        return "breaking the lock of %s: the operator asked for it (sglang_service_lock_break)" % describe(record, now)
    reason = stale()
    if reason:
        return "taking over the stale lock of %s: %s" % (describe(record, now), reason)
    return ""


def decide(
    record,
    *,
    exists,
    run_id,
    now,
    mtime,
    boot_id,
    max_age_s,
    waited_s,
    timeout_s,
    pid_alive,
    take_over_run_id="",
    take_over_reason="",
    break_lock=False,
    wait=True,
):
    """(action, reason): ACQUIRE, OURS, WAIT, REFUSE, HELD or TAKE_OVER for the lock found on the host.

    ``record`` is the parsed file (None when absent or unreadable), ``exists`` whether the file is there,
    ``pid_alive(pid)`` whether a host process runs, ``waited_s`` how long this run has waited already.
    ``take_over_run_id``: the controller found that run dead (``take_over_reason`` says why); its lock,
    and only its lock, is taken over. ``break_lock``: the operator breaks any other holder's lock.
    ``wait`` False: a live holder gives HELD at once (the caller waits and looks again)."""
    if not exists:
        return ACQUIRE, "no lock is held"
    if record is not None and record["run_id"] == run_id:
        return OURS, "this run holds the lock already"
    reason = _take_over(
        record,
        take_over_run_id=take_over_run_id,
        take_over_reason=take_over_reason,
        break_lock=break_lock,
        stale=lambda: stale_reason(
            record, now=now, mtime=mtime, boot_id=boot_id, max_age_s=max_age_s, pid_alive=pid_alive
        ),
        now=now,
    )
    if reason:
        return TAKE_OVER, reason
    if not wait:
        return HELD, "held by %s" % describe(record, now)
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


# -- on the controller: who is this controller, and does the holder still run -----------------
def controller_identity(machine_id, pid_namespace, hostname=""):
    """One controller's identity: where a pid means the same process (its machine and pid namespace).

    Two runs with the same identity can check each other's ansible-playbook pid; an execution
    environment container (its own pid namespace) is another controller."""
    machine = (machine_id or "").strip() or "host-%s" % (hostname or "unknown")
    return "%s/pidns:%s" % (machine, pid_namespace or "?")


def process_start_token(boot_id, stat_text):
    """``<boot id>:<start time in clock ticks>`` of a process from its ``/proc/<pid>/stat``, or "".

    A pid names the same process only while both are equal: after a reboot or a reuse of the pid
    the token differs."""
    if not stat_text:
        return ""
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ')'.
    fields = stat_text.rsplit(")", 1)[-1].split()
    # After the name: state is field 3, start time field 22 -> index 19 of the rest.
    if len(fields) < 20:
        return ""
    return "%s:%s" % (boot_id or "", fields[19])


def holder_liveness(record, *, controller, pid_start):
    """(ALIVE | DEAD | FOREIGN, reason) of a lock's holder, seen from the controller ``controller``.

    ``pid_start(pid)`` is the start token of a process on this controller ("" when there is none)."""
    if record is None:
        return FOREIGN, "the lock is unreadable: its holder cannot be checked"
    if not record.get("controller") or record["controller"] != controller or not record["controller_pid"]:
        return FOREIGN, "it was taken from another controller (%s) whose processes cannot be checked from here" % (
            record.get("controller") or "unknown"
        )
    pid = record["controller_pid"]
    found = pid_start(pid)
    if not found:
        return DEAD, "its ansible-playbook process %s on this controller is gone (the run was interrupted)" % pid
    if record["controller_pid_start"] and found != record["controller_pid_start"]:
        return DEAD, "pid %s on this controller is now another process (started %s, the holder %s)" % (
            pid,
            found,
            record["controller_pid_start"],
        )
    return ALIVE, "its ansible-playbook process %s on this controller is running" % pid


def refusal(record, *, path, waited_s, timeout_s, max_age_s, liveness_reason, now=None):
    """The message of a run that waited for a live (or unverifiable) holder and gives up."""
    return (
        "The host lock %s is held by %s; waited %ds (timeout %ds): %s. Another deploy, rollback or stop runs on "
        "this host: run again when it has finished, or raise sglang_service_lock_timeout_s. If that run is gone "
        "(it ran on another controller, so it cannot be checked from here), run again with "
        "-e sglang_service_lock_break=true after checking, or wait until the lock is older than "
        "sglang_service_lock_max_age_s (%ds)."
        % (path, describe(record, now), waited_s, timeout_s, liveness_reason, max_age_s)
    )
