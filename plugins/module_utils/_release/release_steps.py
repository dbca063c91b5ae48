# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The operations on the release record and the service's switch, one per ``sglang_release_*`` module.

``Steps`` holds one method per operation over the pure decisions of ``release.py``; ``Host`` is their side
effects (files, links, systemctl, /proc, the journal; a fake in unit tests). Each thin module runs one
operation (``run_module``); ``judge`` and ``report`` read no host file and run on the controller too
(``run_on_controller``, their action plugins).
"""

from __future__ import annotations

import calendar
import errno
import glob
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import process_state
from ansible_collections.specdec.sglang.plugins.module_utils._release import release

FILE_ROLES = ("unit", "env", "config")
# systemd's view of the unit that decides what a start runs (kept in the observation as a digest).
UNIT_SETTINGS = ("ExecStart", "Environment", "EnvironmentFiles")
# The main process's start on the monotonic clock (us): its start time, to the microsecond.
START_PROPERTY = "ExecMainStartTimestampMonotonic"
# The per-start parts of systemctl show's ExecStart (the start time, pid and status of the last run).
EXEC_ARGV = re.compile(r"argv\[\]=(.*?) ;")


def unit_settings(unit):
    """``UNIT_SETTINGS`` of a ``systemctl show`` result, ExecStart reduced to its path and argv."""
    settings = {key: unit.get(key, "") for key in UNIT_SETTINGS if key in unit}
    if settings.get("ExecStart"):
        settings["ExecStart"] = " | ".join(EXEC_ARGV.findall(settings["ExecStart"])) or settings["ExecStart"]
    return settings


# The release context every operation takes (doc fragment specdec.sglang.release; the action group
# specdec.sglang.release lets the service role set it once with module_defaults).
CONTEXT_SPEC = dict(
    runtime_root=dict(type="path", required=True),
    state_dir=dict(type="path"),
    unit=dict(type="str", default="sglang.service"),
    release_id=dict(type="str", default=""),
    ladder=dict(type="list", elements="str", default=[]),
    envelopes=dict(type="dict", default={}),
    ladder_failure_classes=dict(
        type="list", elements="str", default=["oom_mem_fraction", "cuda_oom", "cuda_graph_capture", "mamba_cache_oom"]
    ),
    files=dict(type="dict", default={}),
)
# Each operation's own options (its module's documentation).
OPERATION_SPECS = {
    "plan": {},
    "restart": dict(
        restart_requested=dict(type="bool", default=False),
        launcher=dict(type="path"),
    ),
    "judge": dict(
        readiness=dict(type="dict", default={}),
        attempts=dict(type="list", elements="dict", default=[]),
        envelope=dict(type="str", default=""),
        restarted=dict(type="bool", default=False),
        started_at=dict(type="float"),
        record_error=dict(type="dict"),
    ),
    "rollback": {},
    "observe": {},
    "record": dict(
        readiness=dict(type="dict", default={}),
        envelope=dict(type="str", default=""),
        keep_releases=dict(type="int", default=3),
        fields=dict(type="dict", default={}),
    ),
    "report": dict(
        readiness=dict(type="dict", default={}),
        rollback_readiness=dict(type="dict"),
        attempts=dict(type="list", elements="dict", default=[]),
        envelope=dict(type="str", default=""),
        restarted=dict(type="bool", default=False),
        drift=dict(type="list", elements="str", default=[]),
        restarts_since_record=dict(type="dict"),
        observed=dict(type="dict", default={}),
        fields=dict(type="dict", default={}),
        outcome=dict(type="str", default="ready"),
        host=dict(type="str", default=""),
        versions=dict(type="dict", default={}),
        context=dict(type="dict", default={}),
        rollback_target=dict(type="str", default=""),
    ),
    "target": dict(
        rollback_release=dict(type="str", default=""),
    ),
    "reap": dict(
        job_file=dict(type="path"),
    ),
}


class Host:
    """The side effects of the steps: files, links and systemctl (a fake in unit tests)."""

    def __init__(self, module):
        self.module = module

    def read(self, path):
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def sha256(self, path):
        try:
            with open(path, "rb") as handle:
                return hashlib.sha256(handle.read()).hexdigest()
        except FileNotFoundError:
            return ""

    def exists(self, path):
        return os.path.exists(path)

    def readlink(self, path):
        try:
            return os.readlink(path)
        except OSError:
            return ""

    def releases(self, root):
        """(id, mtime) of each release directory."""
        directory = release.releases_dir(root)
        if not os.path.isdir(directory):
            return []
        return [
            (name, os.stat(os.path.join(directory, name)).st_mtime)
            for name in os.listdir(directory)
            if os.path.isdir(os.path.join(directory, name))
        ]

    def active_state(self, unit):
        rc, out, _err = self.module.run_command(
            ["systemctl", "show", "--property=ActiveState", "--value", unit], environ_update={"LC_ALL": "C"}
        )
        return out.strip() if rc == 0 else ""

    def copy(self, src, dest, mode):
        """Replace ``dest`` with a copy of ``src``, keeping the owner of an existing ``dest``."""
        tmp, dest = self.stage_copy(src, dest, mode)
        os.replace(tmp, dest)

    def write(self, dest, text, mode):
        tmp, dest = self.stage_text(dest, text, mode)
        os.replace(tmp, dest)

    def stage_text(self, dest, text, mode):
        """Write ``text`` to a temporary name next to ``dest``: (tmp, dest). No temporary file is left on error."""
        tmp = dest + TMP_SUFFIX
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
        except BaseException:
            self.unlink(tmp)
            raise
        return tmp, dest

    def stage_copy(self, src, dest, mode):
        """Copy ``src`` to a temporary name next to ``dest`` (owner of an existing ``dest`` kept): (tmp, dest)."""
        try:
            owner = os.stat(dest)
            uid, gid = owner.st_uid, owner.st_gid
        except FileNotFoundError:
            uid, gid = os.geteuid(), os.getegid()
        tmp = dest + TMP_SUFFIX
        try:
            shutil.copyfile(src, tmp)
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.chown(tmp, uid, gid)
        except BaseException:
            self.unlink(tmp)
            raise
        return tmp, dest

    def link(self, target, path):
        tmp = path + ".tmp-sglang-release"
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, path)

    def remove_tree(self, path):
        shutil.rmtree(path)

    def show(self, unit, properties):
        rc, out, _err = self.module.run_command(
            ["systemctl", "show", unit, "--property=" + ",".join(properties)], environ_update={"LC_ALL": "C"}
        )
        props = {}
        for line in out.splitlines() if rc == 0 else []:
            key, _sep, value = line.partition("=")
            props[key] = value
        return props

    def process(self, pid):
        """(argv, resolved paths, environ, unreadable) of a process: its command line, executable, cwd, mapped
        files and environment, each read on its own; ``unreadable``: what could not be read and why (root without
        CAP_SYS_PTRACE cannot read another user's environ, exe, cwd or maps). ``None`` when there is no process."""
        base = "/proc/%d" % int(pid)
        unreadable = {}

        def split(raw):
            return [item.decode("utf-8", "surrogateescape") for item in raw.split(b"\0") if item]

        try:
            with open(base + "/cmdline", "rb") as handle:
                argv = split(handle.read())
        except FileNotFoundError:
            return None
        except OSError as exc:
            argv, unreadable["cmdline"] = [], exc.strerror or str(exc)
        environ = {}
        try:
            with open(base + "/environ", "rb") as handle:
                environ = dict(item.partition("=")[::2] for item in split(handle.read()))
        except OSError as exc:
            unreadable["environ"] = exc.strerror or str(exc)
        paths = [os.path.realpath(arg) for arg in argv if arg.startswith("/")]
        for link in ("exe", "cwd"):
            try:
                paths.append(os.readlink(base + "/" + link))
            except OSError as exc:
                unreadable[link] = exc.strerror or str(exc)
        try:
            with open(base + "/maps", encoding="utf-8", errors="replace") as handle:
                paths += [line.split(None, 5)[5].strip() for line in handle if len(line.split(None, 5)) == 6]
        except OSError as exc:
            unreadable["maps"] = exc.strerror or str(exc)
        if not os.path.exists(base):
            return None
        return argv, paths, environ, unreadable

    def started_at(self, pid, monotonic_us=None):
        """The epoch seconds ``pid`` started, or None: from systemd's ``ExecMainStartTimestampMonotonic`` (us on the
        monotonic clock, ``monotonic_us``) when given, else from its /proc stat start time after the boot time
        (whole seconds: up to 1 s early)."""
        try:
            monotonic_us = int(monotonic_us or 0)
        except ValueError:
            monotonic_us = 0
        if monotonic_us > 0:
            return time.time() - (time.monotonic() - monotonic_us / 1e6)
        stat = process_state.process_stat(pid)
        try:
            with open("/proc/stat", encoding="ascii") as handle:
                btime = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
            return btime + int(stat[1]) / float(os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, StopIteration, TypeError, IndexError):
            return None

    def mtime(self, path):
        """The modification time of ``path`` itself (a link's own, not its target's), None when absent."""
        try:
            return os.lstat(path).st_mtime
        except OSError:
            return None

    def journal_since(self, unit, epoch, max_entries=2000):
        """The unit's journal entries since ``epoch`` (parsed JSON, oldest first)."""
        rc, out, _err = self.module.run_command(
            [
                "journalctl",
                "--no-pager",
                "-o",
                "json",
                "-u",
                unit,
                "--since",
                "@%d" % int(epoch),
                "-n",
                str(max_entries),
            ],
            environ_update={"LC_ALL": "C"},
        )
        entries = []
        for line in out.splitlines() if rc == 0 else []:
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def free_bytes(self, path):
        try:
            stat = os.statvfs(path)
        except OSError:
            return None
        return stat.f_bavail * stat.f_frsize

    def unlink(self, path):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def async_dir(self):
        """The async results directory of this user (where async_wrapper writes a job's result)."""
        return release.async_results_dir(os.environ)

    def async_results(self, directory, max_bytes=32 * 1024 * 1024):
        """(path, parsed content or None) of each async results file in ``directory``."""
        found = []
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            return found
        for name in names:
            path = os.path.join(directory, name)
            try:
                if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > max_bytes:
                    continue
                with open(path, encoding="utf-8", errors="replace") as handle:
                    found.append((path, json.loads(handle.read())))
            except (OSError, ValueError):
                found.append((path, None))
        return found

    def remote_tmp(self):
        """Ansible's remote temporary directory for this user (the task's ``remote_tmp``, ``~`` expanded)."""
        return release.expand_remote_tmp(getattr(self.module, "_remote_tmp", None))

    def own_tmp_dir(self):
        """The ansible-tmp directory this module runs from ("" when pipelined)."""
        here = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv and sys.argv[0] else ""
        return here if os.path.basename(here).startswith("ansible-tmp-") else ""

    def tmp_dirs(self, root, max_bytes=16 * 1024 * 1024):
        """(path, mtime, ours) of each ``ansible-tmp-*`` directory in ``root``; ``ours``: a module wrapper in it
        names one of this collection's modules."""
        marker = release.COLLECTION_MODULE_MARKER.encode()
        found = []
        for path in sorted(glob.glob(os.path.join(glob.escape(root), "ansible-tmp-*"))):
            if os.path.islink(path) or not os.path.isdir(path):
                continue
            ours = False
            for wrapper in glob.glob(os.path.join(glob.escape(path), "AnsiballZ_*.py")):
                try:
                    with open(wrapper, "rb") as handle:
                        ours = ours or marker in handle.read(max_bytes)
                except OSError:
                    continue
            found.append((path, self.mtime(path), ours))
        return found

    def cmdlines(self):
        """The command lines of the processes running now (arguments joined by spaces)."""
        lines = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    with open("/proc/%s/cmdline" % name, "rb") as handle:
                        lines.append(handle.read().replace(b"\0", b" ").decode("utf-8", "replace"))
                except OSError:
                    continue
        return lines

    def proc_start(self, pid):
        """The start token of ``pid`` here ("" when no such process)."""
        stat = self.read("/proc/%d/stat" % int(pid)) or ""
        return host_lock.process_start_token((self.read("/proc/sys/kernel/random/boot_id") or "").strip(), stat)

    def end_group(self, pgid, grace_s=5.0):
        """SIGTERM to a process group, SIGKILL when it is still there after ``grace_s``."""
        try:
            os.killpg(pgid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def remove_matching(self, pattern):
        """Remove the files and directories matching ``pattern``; the paths removed."""
        removed = []
        for path in glob.glob(pattern):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                self.unlink(path)
            removed.append(path)
        return removed


FILE_MODES = {"unit": 0o644, "env": 0o600, "config": 0o600}
TMP_SUFFIX = ".tmp-sglang-release"


class RecordWriteError(OSError):
    """The record step could not write (a full disk): the error, and the free space of the state directory."""

    def __init__(self, exc, free_bytes):
        # A copy's error names the source first (filename) and the file it could not write second (filename2).
        super().__init__(exc.errno, exc.strerror, getattr(exc, "filename2", None) or exc.filename)
        self.free_bytes = free_bytes

    def as_dict(self):
        return {
            "errno": errno.errorcode.get(self.errno, str(self.errno)),
            "strerror": self.strerror or "",
            "path": self.filename or "",
            "free_bytes": self.free_bytes,
        }


def _epoch(text):
    """Epoch seconds of a record's ``recorded_at`` (``%Y-%m-%dT%H:%M:%SZ``), None when absent or malformed."""
    try:
        return calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None


class Steps:
    """One method per step; each returns the module result (a dict) or raises release.RecordError."""

    def __init__(self, params, host, check_mode=False):
        self.p = params
        self.host = host
        self.check_mode = check_mode
        self.state_dir = params["state_dir"] or release.last_good_dir(params["runtime_root"])
        self.record_path = os.path.join(self.state_dir, release.RECORD_NAME)

    def record(self):
        return release.read_record(self.host.read(self.record_path), self.record_path)

    def _good_copy(self, role):
        return os.path.join(self.state_dir, os.path.basename(self.p["files"][role]))

    def _check_ladder(self):
        p = self.p
        missing = [name for name in p["ladder"] if name not in p["envelopes"]]
        if not p["ladder"] or missing:
            raise release.RecordError(
                "ladder %s: every name must be a key of envelopes %s" % (p["ladder"], sorted(p["envelopes"]))
            )

    def _check_release_id(self):
        release_id = self.p["release_id"]
        if not release.RELEASE_ID_RE.match(release_id or ""):
            raise release.RecordError(
                "release_id=%r: expected the id of a release under %s/releases (set by sglang_runtime). "
                "Run the whole deploy, or name an existing release." % (release_id, self.p["runtime_root"])
            )

    def plan(self):
        self._check_release_id()
        self._check_ladder()
        p, record = self.p, self.record()
        start = release.first_envelope_index(
            record, release_id=p["release_id"], ladder=p["ladder"], envelopes=p["envelopes"]
        )
        return {
            "record": record,
            "release_dir": release.release_dir(p["runtime_root"], p["release_id"]),
            "current_link": release.current_link(p["runtime_root"]),
            "previous_release_id": (record or {}).get("release_id", ""),
            "first_envelope_index": start,
            "first_envelope": p["ladder"][start],
            "to_try": p["ladder"][start:],
        }

    def restart(self):
        p = self.p
        if p["launcher"] and not self.host.exists(p["launcher"]) and not self.check_mode:
            raise release.RecordError(
                "%s is missing: release %s was not built for this launch style. Run the whole deploy "
                "(sglang_runtime builds the release)." % (p["launcher"], p["release_id"])
            )
        sha = {}
        for role in FILE_ROLES:
            if role in p["files"]:
                sha[role] = self.host.sha256(p["files"][role])
                sha["good_" + role] = self.host.sha256(self._good_copy(role))
        current = os.path.basename(self.host.readlink(release.current_link(p["runtime_root"])))
        record = self.record()
        unit = self.host.show(
            p["unit"], ("ActiveState", "MainPID", "InvocationID", "NRestarts", START_PROPERTY, *UNIT_SETTINGS)
        )
        observed = self.observe(unit)
        # Files equal to their good copies that changed after the process started: it may have started from others.
        unchanged = [
            role for role in FILE_ROLES if role in p["files"] and sha[role] and sha[role] == sha["good_" + role]
        ]
        drift = release.drift_reasons(
            record,
            observed,
            release_id=p["release_id"],
            changed_at={p["files"][role]: self.host.mtime(p["files"][role]) for role in unchanged},
            current_changed_at=self.host.mtime(release.current_link(p["runtime_root"])),
            n_restarts=unit.get("NRestarts") or 0,
        )
        restart, reasons = release.restart_decision(
            record,
            release_id=p["release_id"],
            requested=p["restart_requested"],
            active_state=unit.get("ActiveState") or self.host.active_state(p["unit"]),
            current_release=current,
            sha256=sha,
            drift=drift,
        )
        restarts = None
        recorded_at = _epoch((record or {}).get("recorded_at"))
        if record and recorded_at is not None:
            restarts = release.restarts_since_record(
                record,
                invocation_id=unit.get("InvocationID", ""),
                n_restarts=unit.get("NRestarts") or 0,
                entries=self.host.journal_since(p["unit"], recorded_at),
            )
        return {
            "restart": restart,
            "reasons": reasons,
            "drift": drift,
            "observed": observed,
            "restarts_since_record": restarts,
        }

    def observe(self, unit):
        pid = int(unit.get("MainPID") or 0)
        found = self.host.process(pid) if pid else None
        if not found:
            return {}
        argv, paths, environ, unreadable = found[0], found[1], found[2], found[3]
        if not argv and "cmdline" not in unreadable:
            return {}  # a zombie or a kernel thread: the active state decides
        return release.observe_process(
            self.p["runtime_root"],
            invocation_id=unit.get("InvocationID", ""),
            main_pid=pid,
            argv=argv,
            paths=paths,
            environ=environ,
            unreadable=unreadable,
            started_at=self.host.started_at(pid, unit.get("ExecMainStartTimestampMonotonic")),
            unit_settings=unit_settings(unit),
        )

    def observe_restored(self):
        """After a rollback that serves: the record's observation becomes the restored process (the one the
        rollback verified), so the next deploy compares with it and not with the start the rollback replaced."""
        record = self.record()
        current = os.path.basename(self.host.readlink(release.current_link(self.p["runtime_root"])))
        if not record or record.get("release_id") != current:
            return {"changed": False, "observed": {}, "reason": "the record's release is not the one current names"}
        observed = self.observe(
            self.host.show(self.p["unit"], ("MainPID", "InvocationID", START_PROPERTY, *UNIT_SETTINGS))
        )
        if self.check_mode or not observed:
            return {"changed": bool(observed), "observed": observed}
        try:
            self.host.write(self.record_path, release.dump_record(dict(record, observed=observed)), 0o600)
        except OSError as exc:
            # The restored release serves; a record that cannot be written (a full disk) is left as it was.
            return {
                "changed": False,
                "observed": observed,
                "warnings": [
                    "the record's observation was not updated to the restored process (%s: %s); the next deploy "
                    "compares with the process the record verified" % (exc.strerror or exc, self.record_path)
                ],
            }
        return {"changed": True, "observed": observed}

    def judge(self):
        p = self.p
        self._check_ladder()
        elapsed = None
        # One clock: the host's (the start's time and the readiness verdict's, both taken there).
        verdict_at = (p["readiness"] or {}).get("verdict_epoch")
        if p["started_at"] is not None and verdict_at is not None:
            elapsed = round(verdict_at - p["started_at"], 1)
        attempt, outcome = release.judge_attempt(
            p["readiness"],
            envelope=p["envelope"],
            ladder=p["ladder"],
            settings=p["envelopes"].get(p["envelope"], {}),
            ladder_classes=p["ladder_failure_classes"],
            restarted=p["restarted"],
            check_mode=self.check_mode,
            start_to_verdict_s=elapsed,
        )
        attempts = [*p["attempts"], attempt]
        if p["record_error"]:
            # The attempt was ready, and its record failed: the deploy fails and rolls back like any other.
            error = p["record_error"]
            attempt = release.record_failure_attempt(
                p["attempts"][-1] if p["attempts"] else attempt,
                error,
                state_dir=self.state_dir,
                free_bytes=error.get("free_bytes"),
            )
            attempts, outcome = [*p["attempts"][:-1], attempt], "failed"
        return {
            "attempts": attempts,
            "attempt": attempt,
            "outcome": outcome,
            "next_envelope": release.next_envelope(p["ladder"], p["envelope"]) if outcome == "next_envelope" else "",
        }

    def rollback(self):
        p = self.p
        available = [item[0] for item in self.host.releases(p["runtime_root"])]
        target, on_disk = release.rollback_target(self.record(), available=available)
        restore = bool(target and on_disk)
        if restore and not self.check_mode:
            for role in FILE_ROLES:
                if role in p["files"] and self.host.exists(self._good_copy(role)):
                    self.host.copy(self._good_copy(role), p["files"][role], FILE_MODES[role])
            self.host.link(release.release_dir(p["runtime_root"], target), release.current_link(p["runtime_root"]))
        return {"changed": restore, "target": target, "on_disk": on_disk, "restored": restore}

    def save(self):
        p = self.p
        self._check_release_id()
        self._check_ladder()
        previous = self.record()
        record = release.new_record(
            previous,
            release_id=p["release_id"],
            envelope=p["envelope"],
            ladder=p["ladder"],
            envelopes=p["envelopes"],
            recorded_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            settle=(p["readiness"] or {}).get("settle") or {},
            observed=self.observe(
                self.host.show(p["unit"], ("MainPID", "InvocationID", START_PROPERTY, *UNIT_SETTINGS))
            ),
            unit=p["unit"],
            **{key: value for key, value in p["fields"].items() if key in release.RECORD_DEFAULTS},
        )
        protected = {p["release_id"], record["previous_release_id"], (previous or {}).get("release_id", "")}
        pruned = release.prune(self.host.releases(p["runtime_root"]), keep=p["keep_releases"], protected=protected)
        if not self.check_mode:
            # All or nothing: every good copy and the record to a temporary name, then the renames.
            staged = []
            try:
                for role in FILE_ROLES:
                    if role in p["files"] and self.host.exists(p["files"][role]):
                        staged.append(self.host.stage_copy(p["files"][role], self._good_copy(role), 0o600))
                staged.append(self.host.stage_text(self.record_path, release.dump_record(record), 0o600))
            except OSError as exc:
                for tmp, _dest in staged:
                    self.host.unlink(tmp)
                raise RecordWriteError(exc, self.host.free_bytes(self.state_dir)) from None
            for tmp, dest in staged:
                os.replace(tmp, dest)
            for name in pruned:
                self.host.remove_tree(release.release_dir(p["runtime_root"], name))
        return {"changed": True, "record": record, "pruned": pruned, "observed": record["observed"]}

    def report(self):
        p = self.p
        common = {
            "host": p["host"],
            "unit": p["unit"],
            "release_id": p["release_id"],
            "previous_release_id": p["fields"].get("previous_release_id", ""),
            "attempts": p["attempts"],
        }
        if p["outcome"] == "ready":
            envelope = p["envelope"]
            report = release.success_report(
                p["readiness"],
                restarted=p["restarted"],
                drift=p["drift"],
                restarts=p["restarts_since_record"],
                observed=p["observed"],
                versions=p["versions"],
                envelope=envelope,
                envelope_settings=p["envelopes"].get(envelope, {}),
                context=p["context"],
                **common,
            )
            text = release.success_summary(report)
        else:
            report = release.failure_report(
                p["readiness"],
                target=p["rollback_target"],
                rollback=p["rollback_readiness"],
                drift=p["drift"],
                restarts=p["restarts_since_record"],
                observed=p["observed"],
                **common,
            )
            text = release.failure_message(report).splitlines()
        # How the stop of the previous server ended ("timeout": its drain was cut by SIGKILL); never hidden.
        report["stop_result"] = p["fields"].get("stop_result", "")
        if report["stop_result"] == "timeout":
            text = list(text) if isinstance(text, list) else [text]
            text.append("stop_result: timeout - the previous server's drain outlasted TimeoutStopSec and was SIGKILLed")
        return {"report": report, "text": text, "stats": release.without_attempts(report)}

    def target(self):
        p = self.p
        record = self.record()
        newest_first = [
            item[0] for item in sorted(self.host.releases(p["runtime_root"]), key=lambda r: r[1], reverse=True)
        ]
        complete = [name for name in newest_first if self.host.exists(release.complete_marker(p["runtime_root"], name))]
        target, error = release.choose_release(
            record, requested=p["rollback_release"], available=newest_first, complete=complete
        )
        if error:
            raise release.RecordError(error)
        return {"target": target, "record": record, "serving": (record or {}).get("release_id", "")}

    def _job(self):
        """The readiness job file's record: None when there is no file, {} when it cannot be read."""
        text = self.host.read(self.p["job_file"]) if self.p["job_file"] else None
        if text is None:
            return None
        try:
            job = json.loads(text)
        except ValueError:
            return {}
        return job if isinstance(job, dict) else {}

    def reap(self):
        path, job = self.p["job_file"], self._job()
        kill, pgid, leftovers, reason = False, 0, [], ""
        if job is not None:
            kill, pgid, leftovers, reason = release.reap_plan(job, start_now=self.host.proc_start(job.get("pid") or 0))
        removed = []
        if not self.check_mode:
            if kill:
                self.host.end_group(pgid)
            for pattern in leftovers:
                removed += self.host.remove_matching(pattern)
            if job is not None:
                self.host.unlink(path)
        stale = [found for found in self._left_by_earlier_runs((job or {}).get("async_dir")) if found not in removed]
        for found in stale if not self.check_mode else ():
            removed += self.host.remove_matching(glob.escape(found))
        if stale and not reason:
            reason = "an earlier run of the collection left its readiness results or temporary directories"
        result = {
            "changed": kill or bool(removed) or bool(stale),
            "reaped": kill,
            "removed": removed,
            "reason": reason,
            "job": job or {},
        }
        if reason:
            result["warnings"] = ["%s (removed: %s)" % (reason, ", ".join(removed) or "nothing")]
        return result

    def _left_by_earlier_runs(self, async_dir):
        """What earlier runs left whatever their job file says: the results of a readiness job that ended before
        this step (its job file gone with it), and Ansible's temporary directories of this collection's tasks."""
        results = [
            found
            for found, data in self.host.async_results(async_dir or self.host.async_dir())
            if release.is_our_async_result(data, job_file=self.p["job_file"])
        ]
        return results + release.leftover_tmp_dirs(
            self.host.tmp_dirs(self.host.remote_tmp()),
            now=time.time(),
            live_cmdlines=self.host.cmdlines(),
            own=self.host.own_tmp_dir(),
        )


# Where an operation's method differs from its name.
METHODS = {"record": "save", "observe": "observe_restored"}
# The operations that read no host file: their action plugins run them on the controller.
CONTROLLER_OPERATIONS = ("judge", "report")


def argument_spec(operation):
    """The module argument spec of one operation: the release context and its own options."""
    return dict(CONTEXT_SPEC, **OPERATION_SPECS[operation])


def run_module(module, operation, host=None):
    """Run one operation in its module (``module.params`` validated by ``argument_spec(operation)``)."""
    steps = Steps(module.params, host or Host(module), check_mode=module.check_mode)
    name = "sglang_release_%s" % operation
    try:
        result = getattr(steps, METHODS.get(operation, operation))()
    except RecordWriteError as exc:
        error = exc.as_dict()
        _cls, reason, hint = release.record_failure(error, state_dir=steps.state_dir, free_bytes=error["free_bytes"])
        module.fail_json(msg="%s: %s; %s" % (name, reason, hint), record_error=error)
    except (release.RecordError, OSError) as exc:
        module.fail_json(msg="%s: %s" % (name, exc))
    result.setdefault("changed", False)
    module.exit_json(**result)


def main(operation):
    """The module ``sglang_release_<operation>``: its argument spec, check mode, one operation."""
    run_module(AnsibleModule(argument_spec=argument_spec(operation), supports_check_mode=True), operation)


def run_on_controller(operation, args, check_mode=False):
    """One controller operation (``CONTROLLER_OPERATIONS``): the module's validation and code, as its result dict."""
    validated = ArgumentSpecValidator(argument_spec(operation)).validate(args)
    if validated.error_messages:
        return {"failed": True, "msg": "; ".join(validated.error_messages)}
    steps = Steps(validated.validated_parameters, host=None, check_mode=check_mode)
    try:
        result = getattr(steps, operation)()
    except release.RecordError as exc:
        return {"failed": True, "msg": "sglang_release_%s: %s" % (operation, exc)}
    result.setdefault("changed", False)
    return result
