# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of a deploy, in one place: the release record, restart, ladder, outcome, rollback, report.

The service role sequences systemd steps; every decision between them is a function here,
called through the ``specdec.sglang.sglang_release_*`` modules (``release_steps.py``):

- the release record (``<root>/state/last_good/deploy.json``): a versioned schema, read with
  migration from older formats (``read_record``) and written in the current one (``dump_record``);
- the restart decision (``restart_decision``);
- the envelope ladder: the first envelope (``first_envelope_index``) and, after a failed
  attempt, the next one from the failure class (``judge_attempt``);
- the outcome of an attempt and the rollback target (``rollback_target``, ``choose_release``);
- pruning (``prune``);
- the success and failure reports (``success_report``, ``failure_report``) and their text.

Pure functions: no file, clock or process access (the module injects those). Stdlib only:
this runs on the target host.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import re

SCHEMA_VERSION = 2
RECORD_NAME = "deploy.json"
# Written in a release directory only after its venv, overlay, patch sets and their verification
# are all done: only a release that has it is skipped by the build or accepted by a rollback.
COMPLETE_MARKER = ".complete"
# A release id: a directory name under <root>/releases (the plan's ids are 12 hex digits; an operator may name one).
RELEASE_ID = r"[A-Za-z0-9_-][A-Za-z0-9._-]*"
RELEASE_ID_RE = re.compile("^%s$" % RELEASE_ID)


def current_link(root: str) -> str:
    """``<root>/current``: the link to the release the service runs from."""
    return posixpath.join(str(root), "current")


def last_good_dir(root: str, replica: str = "") -> str:
    """``<root>/state/last_good`` (``last_good-<replica>`` for a named replica): the record and the good files."""
    return posixpath.join(str(root), "state", "last_good" + ("-%s" % replica if replica else ""))


def releases_dir(root: str) -> str:
    """``<root>/releases``: where every release directory lives."""
    return posixpath.join(str(root), "releases")


def release_dir(root: str, release_id: str) -> str:
    """The one derivation of a release's directory: ``<root>/releases/<id>``."""
    return posixpath.join(releases_dir(root), str(release_id))


def complete_marker(root: str, release_id: str) -> str:
    """``<root>/releases/<id>/.complete``: present only when the release is built and verified."""
    return posixpath.join(release_dir(root, release_id), COMPLETE_MARKER)


def build_decision(release_id, *, complete, current_release):
    """(build?, error) for the release of this deploy: a complete release is never rebuilt.

    An incomplete release (an interrupted or failed build or patch step) is rebuilt, except the
    one ``current`` points to: the engine runs from it, so it is never rebuilt in place.
    """
    if complete:
        return False, ""
    if release_id and release_id == current_release:
        return False, (
            "release %s has no %s (its build or patch verification did not finish), but current points to it: "
            "it is never rebuilt in place. Roll back to a complete release (playbooks/rollback.yml "
            "-e sglang_rollback_release=<id>), then deploy again." % (release_id, COMPLETE_MARKER)
        )
    return True, ""


# Fields of the current record schema, with the value a migrated older record gets.
RECORD_DEFAULTS = {
    "schema": SCHEMA_VERSION,
    "release_id": "",
    "previous_release_id": "",
    "unit": "",
    "envelope": "",
    "ladder": [],
    "envelopes": {},
    "base_url": "",
    "speculative_algorithm": "",
    "served_model_name": "",
    "recorded_at": None,
    "settle": {},
    # The verified process as observed at the record (observe_process): what the next deploy compares.
    "observed": {},
}

OUTCOMES = ("ready", "next_envelope", "failed")


class RecordError(ValueError):
    """The release record cannot be read: the message names what is wrong and what to do."""


# -- the release record ---------------------------------------------------------------------
def _migrate_v1(data):
    """Schema 1 (no ``schema`` key, written before 0.3): the same fields, fewer of them."""
    record = dict(RECORD_DEFAULTS)
    record.update({key: data[key] for key in RECORD_DEFAULTS if key in data and key != "schema"})
    record["schema"] = SCHEMA_VERSION
    return record


MIGRATIONS = {1: _migrate_v1}


def migrate(data, path=RECORD_NAME):
    """A parsed record of any known schema -> the current schema (a new dict)."""
    if not isinstance(data, dict):
        raise RecordError("%s: expected a JSON object, found %s" % (path, type(data).__name__))
    version = data.get("schema", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordError("%s: expected an integer schema, found %r" % (path, version))
    if version > SCHEMA_VERSION:
        raise RecordError(
            "%s: schema %d is newer than this collection reads (%d): deploy with the collection that wrote it"
            % (path, version, SCHEMA_VERSION)
        )
    if version < SCHEMA_VERSION:
        if version not in MIGRATIONS:
            raise RecordError("%s: schema %d is unknown (known: 1-%d)" % (path, version, SCHEMA_VERSION))
        data = MIGRATIONS[version](data)
    record = dict(RECORD_DEFAULTS)
    record.update(data)
    if not isinstance(record["release_id"], str) or not record["release_id"]:
        raise RecordError("%s: expected a non-empty release_id, found %r" % (path, record["release_id"]))
    for key in ("ladder", "envelopes", "settle", "observed"):
        expected = list if key == "ladder" else dict
        if not isinstance(record[key], expected):
            raise RecordError("%s: expected %s to be a %s" % (path, key, expected.__name__))
    return record


def read_record(text, path=RECORD_NAME):
    """The record file's text (None: no file) -> the record in the current schema, or None."""
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise RecordError(
            "%s is not JSON (%s): restore it from a backup, or remove it to deploy as a first deploy "
            "(no rollback target)" % (path, exc)
        ) from None
    return migrate(data, path)


def dump_record(record):
    """The record as the file's text (current schema, stable key order)."""
    return json.dumps(migrate(record), indent=2, sort_keys=True) + "\n"


def ladder_envelopes(ladder, envelopes):
    """The settings of each envelope of the ladder, by name (what the record keeps)."""
    return {name: envelopes[name] for name in ladder}


def new_record(previous, *, release_id, envelope, ladder, envelopes, recorded_at, settle=None, observed=None, **fields):
    """The record of a release that just proved good, following ``previous`` (a record or None).

    ``previous_release_id`` is the good release before this one: the rollback target. A redeploy
    of the same release keeps the one recorded before.
    """
    before = (previous or {}).get("release_id", "")
    record = dict(RECORD_DEFAULTS)
    record.update(fields)
    record.update(
        release_id=release_id,
        previous_release_id=before
        if before not in ("", release_id)
        else (previous or {}).get("previous_release_id", ""),
        envelope=envelope,
        ladder=list(ladder),
        envelopes=ladder_envelopes(ladder, envelopes),
        recorded_at=recorded_at,
        settle=settle or {},
        observed=observed or {},
    )
    return record


# -- the restart decision and the first envelope ---------------------------------------------
def first_envelope_index(record, *, release_id, ladder, envelopes):
    """Where the ladder starts: the recorded envelope when the release and the ladder are unchanged.

    So a second deploy of the same inputs renders the same unit and restarts nothing; anything
    else starts at the head of the ladder.
    """
    if not record or record["release_id"] != release_id or record["ladder"] != list(ladder):
        return 0
    if record["envelope"] not in ladder or record["envelopes"] != ladder_envelopes(ladder, envelopes):
        return 0
    return list(ladder).index(record["envelope"])


def restart_decision(record, *, release_id, requested, active_state, current_release, sha256, drift=()):
    """(restart?, reasons). ``sha256``: unit, env, config, good_unit, good_env, good_config ('' = absent).

    The service is left running only when it is active and runs exactly the recorded good deploy:
    same release, and unit, environment and config files equal to the good copies, and the running
    process is the one recorded (``drift``: what ``drift_reasons`` found, each a reason to restart).
    """
    reasons = ["drift: %s" % item for item in drift]
    if requested:
        reasons.append("configuration changed")
    if active_state != "active":
        reasons.append("service is %s" % (active_state or "unknown"))
    if current_release != release_id:
        reasons.append("current is %s" % (current_release or "unset"))
    if not record or record["release_id"] != release_id:
        reasons.append("release %s is not the recorded good release" % release_id)
    for name in ("unit", "env", "config"):
        live, good = sha256.get(name, ""), sha256.get("good_" + name, "")
        if live != good or (name == "unit" and not good):
            reasons.append("%s file differs from the last good copy" % name)
    return bool(reasons), reasons


# -- the running process against the record (drift) -------------------------------------------
# Variables systemd sets for each start of a unit: they differ between two starts of one deploy.
PER_START_ENVIRONMENT = frozenset(
    (
        "INVOCATION_ID",
        "JOURNAL_STREAM",
        "SYSTEMD_EXEC_PID",
        "MAINPID",
        "MANAGERPID",
        "NOTIFY_SOCKET",
        "LISTEN_PID",
        "LISTEN_FDS",
        "LISTEN_FDNAMES",
        "WATCHDOG_PID",
        "WATCHDOG_USEC",
        "MONITOR_SERVICE_RESULT",
        "MONITOR_EXIT_CODE",
        "MONITOR_EXIT_STATUS",
        "MONITOR_INVOCATION_ID",
        "MONITOR_UNIT",
    )
)


def process_release(root, paths):
    """The release a process runs from: the first of ``paths`` (its resolved executable, command line,
    working directory, mapped files) under ``<root>/releases/<id>/``; "" when none is."""
    prefix = releases_dir(root).rstrip("/") + "/"
    for found in paths:
        text = str(found or "")
        if text.startswith(prefix):
            name = text[len(prefix) :].split("/", 1)[0]
            if name:
                return name
    return ""


def _digest(items):
    return hashlib.sha256("\0".join(items).encode("utf-8", "surrogateescape")).hexdigest()


def observe_process(
    root,
    *,
    invocation_id,
    main_pid,
    argv,
    paths,
    environ,
    unreadable=None,
    started_at=None,
    unit_settings=None,
):
    """What the running main process is: invocation, release, and digests of its environment and command line.

    ``argv``: its command line; ``paths``: resolved paths it runs from (executable, cwd, mapped files);
    ``environ``: its environment (a dict; systemd's per-start variables are left out). ``unreadable``: what of
    the process could not be read and why (``{"environ": "Permission denied"}``: root without CAP_SYS_PTRACE
    reading another user's process) - never read as "the same": RV(unreadable) lists it, its digest is left
    out and ``drift_reasons`` decides on what could be read. ``started_at``: the process's start (epoch s);
    ``unit_settings``: systemd's view of the unit (``ExecStart``, ``Environment``, ``EnvironmentFiles``), kept
    as a digest."""
    if not main_pid:
        return {}
    unreadable = dict(unreadable or {})
    env = sorted("%s=%s" % item for item in (environ or {}).items() if item[0] not in PER_START_ENVIRONMENT)
    found = process_release(root, list(argv[:1]) + list(paths) + list(argv[1:]))
    if started_at is None:
        unreadable["started_at"] = "neither systemd's ExecMainStartTimestampMonotonic nor /proc/<pid>/stat"
    if not found and any(name in unreadable for name in ("cmdline", "exe", "cwd", "maps")):
        unreadable["release"] = "not in what could be read of the process (%s unreadable)" % ", ".join(
            sorted(name for name in ("cmdline", "exe", "cwd", "maps") if name in unreadable)
        )
    observed = {
        "invocation_id": invocation_id or "",
        "main_pid": int(main_pid),
        "release": found,
        "started_at": round(float(started_at), 2) if started_at is not None else None,
        "unreadable": sorted(unreadable),
        "unreadable_reasons": {name: str(unreadable[name]) for name in sorted(unreadable)},
    }
    if "environ" not in unreadable:
        observed["environ_sha256"] = _digest(env)
    if "cmdline" not in unreadable:
        observed["cmdline_sha256"] = _digest(list(argv))
    if unit_settings:
        observed["unit_sha256"] = _digest(["%s=%s" % (key, unit_settings[key]) for key in sorted(unit_settings)])
    return observed


def _when(epoch):
    return "%.0f" % float(epoch)


def drift_reasons(record, observed, *, release_id, changed_at=None, current_changed_at=None, n_restarts=0):
    """How the running process differs from the recorded, verified one (empty: it is that one, or the same
    deploy restarted by systemd). Only a record with an observation (``observed``) is compared.

    What could not be observed (``observed["unreadable"]``) is decided on what could:

    - the environment unreadable: a file it starts from (``changed_at``: path -> mtime, the unit, environment
      and config files) changed after the process started, the unit's systemd settings (``unit_sha256``) are
      not the recorded ones, or it was started outside the deploy - another invocation than the verified one
      and not by systemd's ``Restart=`` (``n_restarts`` 0) - each is drift;
    - the release unreadable: ``current`` switched (``current_changed_at``) after the process started is drift.
    """
    seen = (record or {}).get("observed") or {}
    if not observed or not seen or (record or {}).get("release_id") != release_id:
        return []
    unreadable = set(observed.get("unreadable") or ())
    reasons = _release_drift(seen, observed, current_changed_at)
    by_hand = []
    if "environ" not in unreadable and seen.get("environ_sha256"):
        if observed.get("environ_sha256") != seen["environ_sha256"]:
            reasons.append("the running process's environment is not the recorded one")
    else:
        found, by_hand = _unreadable_environment_drift(seen, observed, changed_at, n_restarts)
        reasons += found + by_hand
    if "cmdline" not in unreadable and seen.get("cmdline_sha256"):
        if observed.get("cmdline_sha256") != seen["cmdline_sha256"]:
            reasons.append("the running process's command line is not the recorded one")
    if reasons and not by_hand and observed.get("invocation_id") != seen.get("invocation_id"):
        reasons.append(
            "started as invocation %s, not the verified %s" % (observed.get("invocation_id"), seen.get("invocation_id"))
        )
    return reasons


def _started(observed):
    started = observed.get("started_at")
    return _when(started) if started is not None else "unknown"


def _release_drift(seen, observed, current_changed_at):
    """The process's release against the record's; unreadable: ``current`` switched after the process started."""
    if not seen.get("release"):
        return []
    if observed.get("release"):
        if observed["release"] != seen["release"]:
            return ["the running process runs release %s, the record %s" % (observed["release"], seen["release"])]
        return []
    started = observed.get("started_at")
    if current_changed_at is None or started is None or current_changed_at <= started:
        return []
    why = (observed.get("unreadable_reasons") or {}).get("release", "unreadable")
    return [
        "current was switched at %s, after the process started (%s), and the process's release cannot be read (%s)"
        % (_when(current_changed_at), _started(observed), why)
    ]


def _unreadable_environment_drift(seen, observed, changed_at, n_restarts):
    """(reasons, start-outside-the-deploy reasons) for a process whose environment cannot be compared."""
    why = (observed.get("unreadable_reasons") or {}).get("environ") or "not recorded"
    started = observed.get("started_at")
    reasons = [
        "%s changed at %s, after the process started (%s), and its environment cannot be read (%s)"
        % (path, _when(mtime), _started(observed), why)
        for path, mtime in sorted((changed_at or {}).items())
        if mtime is not None and started is not None and mtime > started
    ]
    if seen.get("unit_sha256") and observed.get("unit_sha256") and observed["unit_sha256"] != seen["unit_sha256"]:
        reasons.append("the unit's ExecStart / Environment / EnvironmentFiles are not the recorded ones")
    by_hand = []
    if observed.get("invocation_id") != seen.get("invocation_id") and not int(n_restarts or 0):
        by_hand.append(
            "started as invocation %s, not the verified %s, and not by systemd's Restart= (NRestarts=0): "
            "a start outside the deploy whose environment cannot be read (%s)"
            % (observed.get("invocation_id"), seen.get("invocation_id"), why)
        )
    return reasons, by_hand


def observation_lines(observed):
    """The report's lines on what of the running process could not be read (empty when all could), one per reason."""
    reasons = (observed or {}).get("unreadable_reasons") or {}
    by_reason = {}
    for name in sorted(reasons):
        by_reason.setdefault(reasons[name], []).append(name)
    return [
        "not observed: the running process's %s (%s); drift decided on what could be read" % (", ".join(names), why)
        for why, names in sorted(by_reason.items())
    ]


# -- crashes between deploys ---------------------------------------------------------------------
def restarts_since_record(record, *, invocation_id, n_restarts, entries, lines=12):
    """What happened to the recorded start since the record: systemd restarts, the last exit, its log lines.

    ``entries``: the unit's journal since the record (journalctl -o json, parsed), oldest first: the
    process's lines carry ``_SYSTEMD_INVOCATION_ID``, systemd's own ``INVOCATION_ID`` / ``UNIT``.
    None when the recorded start still runs and no exit is in the journal."""
    seen = ((record or {}).get("observed") or {}).get("invocation_id") or ((record or {}).get("settle") or {}).get(
        "invocation_id"
    )
    exited = "Main process exited"

    def message(entry):
        return str(entry.get("MESSAGE", ""))

    exits = [entry for entry in entries if exited in message(entry) or "Failed with result" in message(entry)]
    if not exits and (not seen or seen == invocation_id) and not int(n_restarts or 0):
        return None
    last = next((entry for entry in reversed(exits) if exited in message(entry)), None)
    last = last or (exits[-1] if exits else {})
    died = last.get("INVOCATION_ID") or last.get("_SYSTEMD_INVOCATION_ID") or ""
    own = [
        message(entry)
        for entry in entries
        if died and entry.get("_SYSTEMD_INVOCATION_ID") == died and exited not in message(entry)
    ]
    at = last.get("__REALTIME_TIMESTAMP")
    return {
        "n_restarts": int(n_restarts or 0),
        "exits": len([entry for entry in exits if exited in message(entry)]),
        "recorded_invocation_id": seen or "",
        "invocation_id": invocation_id or "",
        "last_exit": str(last.get("MESSAGE", "")),
        "last_exit_at": round(int(at) / 1e6, 3) if at else None,
        "last_exit_invocation_id": died,
        "last_exit_lines": own[-lines:],
    }


# -- one attempt of the ladder ---------------------------------------------------------------
def _text(value):
    return "" if value is None else str(value)


def judge_attempt(
    readiness, *, envelope, ladder, settings, ladder_classes, restarted, check_mode=False, start_to_verdict_s=None
):
    """(attempt, outcome) from one readiness result.

    Outcome ``ready``; ``next_envelope`` when the class the log points at (``cause_class``) is a
    memory class of ``ladder_classes`` and a smaller envelope is left; otherwise ``failed``.
    """
    readiness = readiness or {}
    ready = bool(readiness.get("ready")) or (check_mode and not readiness.get("failed"))
    failure_class = readiness.get("failure_class") or "module_error"
    cause_class = readiness.get("cause_class") or failure_class
    attempt = {
        "envelope": envelope,
        "settings": settings,
        "restarted": bool(restarted),
        "ready": ready,
        "phase": readiness.get("failed_in_phase") or readiness.get("phase") or "",
        "failure_class": "" if ready else failure_class,
        "cause_class": "" if ready else cause_class,
        "exception_line": _text(readiness.get("exception_line")),
        "reason": _text(readiness.get("reason") or readiness.get("msg")),
        "hint": _text(readiness.get("hint")),
        "elapsed_s": readiness.get("elapsed_s"),
        "time_to_ready_s": readiness.get("time_to_ready_s"),
        "settle": readiness.get("settle") or {},
        "start_to_verdict_s": start_to_verdict_s if restarted else None,
    }
    if ready:
        return attempt, "ready"
    last = envelope == list(ladder)[-1]
    if cause_class in ladder_classes and not last:
        return attempt, "next_envelope"
    return attempt, "failed"


def next_envelope(ladder, envelope):
    """The envelope after ``envelope`` on the ladder (None at the end)."""
    ladder = list(ladder)
    index = ladder.index(envelope)
    return ladder[index + 1] if index + 1 < len(ladder) else None


# -- rollback ---------------------------------------------------------------------------------
def rollback_target(record, *, available):
    """After a failed switch: (the recorded good release to return to, or '', whether it is on disk).

    The good release is the record's ``release_id``: what served before this deploy (for a
    redeploy of the same release, that release with its recorded unit and files).
    ``available``: the release ids on disk.
    """
    if not record:
        return "", False
    return record["release_id"], record["release_id"] in available


def choose_release(record, *, requested, available, complete):
    """playbooks/rollback.yml: (target, error). ``requested`` '' means the record's previous release.

    ``available``: release ids on disk, newest first; ``complete``: those with the complete marker
    (only those are accepted).
    """
    serving = (record or {}).get("release_id", "")
    target = requested or (record or {}).get("previous_release_id", "")
    newest = ", ".join(available) or "none"
    usable = ", ".join(name for name in available if name in set(complete)) or "none"
    if not target:
        return "", (
            "no release to roll back to: the record names no previous good release (serving: %r). "
            "Releases on disk, newest first: %s. Name one with -e sglang_rollback_release=<id>." % (serving, newest)
        )
    if target not in available:
        return "", "release %r is not on disk. Releases on disk, newest first: %s." % (target, newest)
    if target not in set(complete):
        return "", (
            "release %r is incomplete: it has no %s (its build, patch sets or their verification did not finish). "
            "Complete releases, newest first: %s. Name one with -e sglang_rollback_release=<id>, or deploy again."
            % (target, COMPLETE_MARKER, usable)
        )
    if target == serving and not requested:
        return "", "release %r is already the one serving; name another with -e sglang_rollback_release=<id>." % target
    return target, ""


# -- a failed record -------------------------------------------------------------------------
def record_failure(error, *, state_dir, free_bytes=None):
    """(failure_class, reason, hint) of a record step that failed (``error``: errno name and text, path)."""
    name, text, path = error.get("errno") or "", error.get("strerror") or "", error.get("path") or state_dir
    if name in ("ENOSPC", "EDQUOT"):
        reason = "no space left to record the release in %s (%s: %s%s)" % (
            state_dir,
            path,
            text or name,
            ", %d bytes free" % free_bytes if free_bytes is not None else "",
        )
        hint = "free space on the file system of %s, then deploy again; the last good record is unchanged" % state_dir
        return "record_failed", reason, hint
    reason = "the release could not be recorded in %s (%s: %s)" % (state_dir, path, text or name or "unknown error")
    return "record_failed", reason, "fix %s, then deploy again; the last good record is unchanged" % state_dir


def record_failure_attempt(attempt, error, *, state_dir, free_bytes=None):
    """The ready attempt, now failed at the record step: the deploy rolls back like any other failure."""
    failure_class, reason, hint = record_failure(error, state_dir=state_dir, free_bytes=free_bytes)
    return dict(
        attempt,
        ready=False,
        phase="record",
        failure_class=failure_class,
        cause_class=failure_class,
        reason=reason,
        hint=hint,
    )


# -- pruning ----------------------------------------------------------------------------------
def prune(releases, *, keep, protected):
    """Release ids to remove: all but the newest ``keep`` (``releases``: (id, mtime)), never ``protected``."""
    newest_first = [item[0] for item in sorted(releases, key=lambda item: item[1], reverse=True)]
    return [name for name in newest_first[max(int(keep), 1) :] if name and name not in set(protected)]


# -- reports ----------------------------------------------------------------------------------
def _probe(readiness):
    return (readiness or {}).get("probe") or {}


def success_report(
    readiness,
    *,
    host,
    unit,
    release_id,
    previous_release_id,
    attempts,
    restarted,
    versions,
    envelope,
    envelope_settings,
    context,
    drift=(),
    restarts=None,
    observed=None,
):
    """The report of a deploy that serves. ``context``: gpus, tp_size, speculative_algorithm, base_url.

    ``drift``: how the running process differed from the record (it was restarted and verified);
    ``restarts``: what ``restarts_since_record`` found. ``time_to_ready_s`` only for a start this run made."""
    readiness = readiness or {}
    server = readiness.get("server") or {}
    probe = _probe(readiness)
    report = {
        "host": host,
        "ok": True,
        "changed": bool(restarted) or len(attempts) > 1,
        "unit": unit,
        "release_id": release_id,
        "previous_release_id": previous_release_id,
        "versions": dict({"sglang": server.get("version") or "unknown"}, **(versions or {})),
        "gpus": list(context.get("gpus") or []),
        "tp_size": context.get("tp_size"),
        "speculative_algorithm": server.get("speculative_algorithm") or context.get("speculative_algorithm"),
        "envelope": envelope,
        "envelope_settings": envelope_settings or {},
        "attempts": list(attempts),
        "base_url": context.get("base_url"),
        "time_to_ready_s": readiness.get("time_to_ready_s") if restarted else None,
        "up_s": None if restarted else readiness.get("time_to_ready_s"),
        "drift": list(drift),
        "observed": observed or {},
        "restarts_since_record": restarts,
        "probe_latency_s": probe.get("latency_s"),
        "probe_tokens_per_s": probe.get("tokens_per_s"),
        "probe_completion_tokens": probe.get("completion_tokens"),
        "spec_accept_length": probe.get("spec_accept_length"),
        "settle": readiness.get("settle") or {},
    }
    return report


def success_summary(report):
    """The operator's lines for a deploy that serves."""
    gpus = ", ".join(report["gpus"]) or "none pinned"
    failures = len(report["attempts"]) - 1
    settle = report.get("settle") or {}
    lines = [
        "%s on %s serves release %s (%s)"
        % (
            report["unit"],
            report["host"],
            report["release_id"],
            "restarted" if report["changed"] else "unchanged, not restarted",
        ),
        "versions: " + ", ".join("%s %s" % item for item in report["versions"].items()),
        "GPUs: %s; tp %s; %s" % (gpus, report["tp_size"], report["speculative_algorithm"]),
        "envelope: %s %s%s"
        % (
            report["envelope"],
            json.dumps(report["envelope_settings"], sort_keys=True),
            " after %d memory failure(s)" % failures if failures else "",
        ),
        "%s; probe: %s tokens in %s s (%s tokens/s); accept length %s"
        % (
            "time to ready: %s s" % report["time_to_ready_s"]
            if report["changed"] or report["time_to_ready_s"] is not None
            else "not started by this run (no time to ready)",
            report["probe_completion_tokens"],
            report["probe_latency_s"],
            report["probe_tokens_per_s"],
            report["spec_accept_length"],
        ),
    ]
    lines += drift_and_restart_lines(report)
    if settle:
        lines.append(
            "stable: up %s s after ready, invocation %s, %s restart(s), second probe %s"
            % (
                settle.get("stayed_up_s"),
                settle.get("invocation_id") or "?",
                settle.get("n_restarts"),
                "ok" if (settle.get("second_probe") or {}).get("ok") else "not sent",
            ),
        )
    return lines


def drift_and_restart_lines(report):
    """The report's lines on drift (restarted and verified) and on crashes since the last record."""
    lines = ["drift: %s (restarted and verified)" % reason for reason in report.get("drift") or []]
    lines += observation_lines(report.get("observed"))
    restarts = report.get("restarts_since_record")
    if restarts:
        lines.append(
            "since the last record: %s restart(s) by systemd, %s exit(s); last exit: %s%s"
            % (
                restarts.get("n_restarts"),
                restarts.get("exits"),
                restarts.get("last_exit") or "none in the journal",
                " at %s" % restarts["last_exit_at"] if restarts.get("last_exit_at") else "",
            )
        )
        lines += ["  | %s" % line for line in restarts.get("last_exit_lines") or []]
    return lines


def rollback_state(rollback, *, target, unit):
    """One line: where the rollback left the service."""
    if not target:
        return "no last good release: %s left stopped and disabled" % unit
    if rollback is None:
        return "last good release %s is not on disk: %s left stopped and disabled" % (target, unit)
    if rollback.get("ready"):
        probe = _probe(rollback)
        return "release %s serves again (generation verified: %s tokens in %s s)" % (
            target,
            probe.get("completion_tokens", "?"),
            probe.get("latency_s", "?"),
        )
    return "rollback to release %s FAILED: %s: %s" % (
        target,
        rollback.get("failure_class") or "",
        rollback.get("reason") or rollback.get("msg") or "",
    )


def failure_report(
    readiness,
    *,
    host,
    unit,
    release_id,
    previous_release_id,
    attempts,
    target,
    rollback,
    drift=(),
    restarts=None,
    observed=None,
):
    """The report of a deploy that did not serve, with where the rollback left the service.

    ``rollback``: the readiness result of the rolled-back release, or None when none was started.
    A release that served but could not be recorded (phase ``record``) names the record's failure.
    """
    readiness = readiness or {}
    last = attempts[-1] if attempts else {}
    rolled = rollback or {}
    if last.get("phase") == "record":
        readiness = dict(readiness, reason=last.get("reason"), hint=last.get("hint"), msg="")
    return {
        "host": host,
        "ok": False,
        "unit": unit,
        "release_id": release_id,
        "previous_release_id": previous_release_id,
        "failure_class": last.get("failure_class", "module_error"),
        "phase": last.get("phase", ""),
        "cause_class": last.get("cause_class", ""),
        "reason": _text(readiness.get("reason") or readiness.get("msg")),
        "hint": _text(readiness.get("hint")),
        "elapsed_s": readiness.get("elapsed_s"),
        "exception_line": _text(readiness.get("exception_line")),
        "traceback": _text(readiness.get("traceback")),
        "journal_tail": _text(readiness.get("journal"))[-4000:],
        "unit_state": readiness.get("unit") or {},
        "settle": readiness.get("settle") or {},
        "attempts": list(attempts),
        "drift": list(drift),
        "observed": observed or {},
        "restarts_since_record": restarts,
        "rollback": {
            "attempted": rollback is not None,
            "release_id": target,
            "ready": bool(rolled.get("ready")),
            "failure_class": rolled.get("failure_class") or "",
            "reason": _text(rolled.get("reason") or rolled.get("msg")),
            "time_to_ready_s": rolled.get("time_to_ready_s"),
            "probe": _probe(rolled),
            "settle": rolled.get("settle") or {},
            "state": rollback_state(rollback, target=target, unit=unit),
        },
    }


def failure_message(report):
    """The failed task's message: class, cause, phase, timing, reason, hint, attempts, rollback, traceback."""
    last = report["attempts"][-1] if report["attempts"] else {}
    cause = report["cause_class"]
    timing = last.get("start_to_verdict_s") or report["elapsed_s"]
    lines = [
        "sglang_service: release %s failed on %s: %s (%sphase %s, %s s after the start)"
        % (
            report["release_id"],
            report["host"],
            report["failure_class"],
            "cause %s, " % cause if cause not in ("", report["failure_class"]) else "",
            report["phase"],
            timing,
        ),
        "reason: %s" % report["reason"],
        "hint: %s" % report["hint"],
        "attempts: %s" % ", ".join("%s: %s" % (a["envelope"], a["failure_class"]) for a in report["attempts"]),
        "rollback: %s" % report["rollback"]["state"],
    ]
    lines += drift_and_restart_lines(report)
    if report["exception_line"]:
        lines.append("exception: %s" % report["exception_line"])
    if report["traceback"]:
        lines += ["traceback:", report["traceback"]]
    return "\n".join(lines)


def without_attempts(report):
    """The report for set_stats' per-host summary (attempts are published on their own)."""
    return {key: value for key, value in report.items() if key != "attempts"}


# -- the restored release's configuration -------------------------------------------------------
def config_api_key(text):
    """The ``api-key`` of a server ``--config`` file as the service role renders it (``api-key: "<JSON string>"``,
    a plain or single-quoted scalar read as is); "" when it has none. ValueError for a value that is not one."""
    for line in str(text or "").splitlines():
        if not line.startswith("api-key:"):
            continue
        value = line.split(":", 1)[1].strip()
        if value.startswith('"'):
            try:
                found = json.loads(value)
            except ValueError:
                raise ValueError("its api-key is not a double-quoted string") from None
            return found if isinstance(found, str) else ""
        if len(value) >= 2 and value[0] == value[-1] == "'":
            return value[1:-1].replace("''", "'")
        return value
    return ""


# -- the host-side readiness job (async) and its reaping --------------------------------------
READINESS_JOB_NAME = "readiness.job"


def readiness_job(*, pid, start, pgid, parent_argv, async_dir):
    """What the readiness module writes about itself on the host while it runs (``readiness.job``).

    Run by Ansible's async_wrapper, its parent's argv is ``<python> AnsiballZ_async_wrapper.py <jid prefix>
    <time limit> <module script> <args file> ...`` and its process group is the wrapper's job (the wrapper's
    watcher kills that group at the time limit): the next run ends the job by that group, only while
    ``pid`` is still the process that wrote it (``start``), and removes the job's results files
    (``<async dir>/<jid prefix>.*``) and its temporary directory."""
    argv = list(parent_argv or [])
    wrapped = len(argv) >= 5 and "async_wrapper" in posixpath.basename(argv[1])
    return {
        "pid": int(pid),
        "start": str(start or ""),
        "pgid": int(pgid) if wrapped else 0,
        "jid": argv[2] if wrapped else "",
        "async_dir": str(async_dir or "") if wrapped else "",
        "tmpdir": posixpath.dirname(argv[4]) if wrapped else "",
    }


def reap_plan(job, *, start_now):
    """(signal the group?, pgid, leftovers to remove, reason) for a readiness job found by the next run.

    ``job``: the parsed ``readiness.job`` (None: none); ``start_now``: the start token of its pid now
    ("" when no such process). The job is ended only while its pid is the process that wrote the file;
    its async results and temporary directory go in any case (a run holding the host lock has no job)."""
    if not job:
        return False, 0, [], ""
    alive = bool(job.get("pid")) and bool(start_now) and start_now == job.get("start")
    leftovers = []
    if job.get("async_dir") and job.get("jid"):
        leftovers.append(posixpath.join(job["async_dir"], job["jid"] + ".*"))
    if job.get("tmpdir") and "-tmp-" in posixpath.basename(job["tmpdir"]):
        leftovers.append(job["tmpdir"])
    if alive:
        target = job.get("pgid") or job["pid"]
        reason = "a readiness job left by an interrupted run (pid %s, group %s) still ran: ended" % (job["pid"], target)
        return True, target, leftovers, reason
    return (
        False,
        0,
        leftovers,
        "the readiness job of an earlier run (pid %s) has ended; its leftovers removed" % (job.get("pid"),),
    )


# -- what interrupted runs of the collection left (async results, Ansible's temporary directories) -----
# The fully qualified name of this collection's modules, as Ansible's module wrapper (AnsiballZ) names it.
COLLECTION_MODULE_MARKER = "ansible_collections.specdec.sglang."
# A directory younger than this may belong to a task that is being set up right now (before its process starts).
LEFTOVER_MIN_AGE_S = 60


def async_results_dir(environ):
    """Ansible's async results directory for a user (``ANSIBLE_ASYNC_DIR``, ``~`` being the user's ``HOME``)."""
    directory = environ.get("ANSIBLE_ASYNC_DIR") or "~/.ansible_async"
    if directory.startswith("~/"):
        directory = posixpath.join(environ.get("HOME") or "/root", directory[2:])
    return directory


def is_our_async_result(data, *, job_file):
    """Whether an async results file's content (parsed JSON) is the result of this collection's readiness job
    for ``job_file``: the module's result names its arguments (``invocation.module_args.job_file``)."""
    if not isinstance(data, dict) or not job_file:
        return False
    args = (data.get("invocation") or {}).get("module_args") or {}
    return isinstance(args, dict) and args.get("job_file") == job_file


def leftover_tmp_dirs(candidates, *, now, live_cmdlines, own="", min_age_s=LEFTOVER_MIN_AGE_S):
    """The ``ansible-tmp-*`` directories an earlier run of this collection left, to remove.

    ``candidates``: (path, mtime, ours) per directory under Ansible's remote temporary directory, ``ours``
    when a module wrapper in it runs one of this collection's modules (``COLLECTION_MODULE_MARKER``);
    ``live_cmdlines``: the command lines of the processes running now. Removed: ours, not ``own`` (the
    directory of the task asking), older than ``min_age_s`` and named by no running process (an async job or a
    module still running from it). Other tools' directories are never touched."""
    keep = posixpath.normpath(own) if own else ""
    found = []
    for path, mtime, ours in candidates:
        name = posixpath.basename(str(path).rstrip("/"))
        if not ours or not name.startswith("ansible-tmp-") or posixpath.normpath(path) == keep:
            continue
        if mtime is None or now - mtime < min_age_s:
            continue
        if any(str(path).rstrip("/") + "/" in line for line in live_cmdlines):
            continue
        found.append(path)
    return sorted(found)


def expand_remote_tmp(configured):
    """Ansible's remote temporary directory as AnsibleModule.tmpdir expands it (``~`` and ``$VARS``)."""
    return os.path.expanduser(os.path.expandvars(configured or "~/.ansible/tmp"))
