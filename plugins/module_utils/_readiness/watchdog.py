# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The generation watchdog: the deploy's readiness probe, run again on a live server by a systemd timer.

One run (``run_once``): the unit and a real generation are judged by ``readiness.Readiness`` (the
same state machine as the deploy, its ``startup_timeout`` the watch timeout), with the accept-length
floor as ``min_accept_length``. Verdicts: ``ok``, ``stopped`` (the unit was stopped cleanly, or is down
and disabled - a failed first deploy, ``stop.yml -e sglang_stop_disable=true``: nothing to do),
``deploying`` (a deploy runs: not judged), ``restarted`` (someone restarted the unit while the probe ran: not
judged, the next run judges the new start), or a failure class (``wedged``, ``died_while_serving``,
``restart_loop``, ``low_acceptance``, ``probe_failed``, ``timeout``, ``port_in_use``, ...). A failure
is written to the journal (stdout of the oneshot unit, priority ``<3>``) with its class, reason and
hint, and, for a process that died, the class of what killed it (``cause=``, e.g.
``illegal_address_graph_replay`` for a CUDA-graph replay fault hours after the deploy). With action
``restart`` the unit is brought back (``systemctl reset-failed`` first, so that a unit systemd gave up on
after its start limit starts again, then ``systemctl restart``) unless the watchdog restarted it less than
``restart_min_interval_s`` ago (rate limit, state in ``state_file``). Every run writes node_exporter
textfile metrics atomically, with the failures counted per cause class (``sglang_watch_failures_total``).

Run by the timer's service, or by hand (the role installs ``/usr/local/bin/<unit>-watch``):

    PYTHONPATH=<lib> python3 -m ansible_collections.specdec.sglang.plugins.module_utils._readiness.watchdog \
        --config /etc/sglang/sglang-watch.json [--action report|restart]

Exit status: 0 ok / stopped / deploying / restarted, 1 a failure, 2 bad configuration.

Side effects (HTTP, systemctl, files, clock) are injected into ``run_once``; the unit tests fake them.
Stdlib only (Python >= 3.9): this runs on the target host.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

from ansible_collections.specdec.sglang.plugins.module_utils._host import port_owner
from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import UnitWatcher, read_unit_state

ACTIONS = ("report", "restart")
# Every verdict the textfile's one-hot sglang_watch_verdict may carry (a class not listed is "other").
VERDICTS = ("ok", "stopped", "deploying", "restarted", "other", *failure_classifier.classes())
# Verdicts on a unit the watchdog did not judge (exit status 0, no action, no failure counted).
NOT_JUDGED = ("stopped", "deploying", "restarted")
DEFAULTS = {
    "unit": "sglang.service",
    "base_url": "http://127.0.0.1:30000",
    "api_key_file": "",
    "timeout_s": 30.0,
    "probe_timeout_s": 10.0,
    "max_new_tokens": 16,
    "min_accept_length": 0.0,
    "expect_speculative_algorithm": "",
    "action": "report",
    "restart_min_interval_s": 600.0,
    "textfile_dir": "",
    "state_file": "/var/lib/sglang-watch/state.json",
    "current_link": "",  # <root>/current, from the service role (the release root has one owner)
    "last_good_record": "",
    # A deploy in progress (the role touches this file and removes it at the end): stay passive.
    "deploy_marker": "",
    "deploy_marker_max_age_s": 3600.0,
}


class ConfigError(Exception):
    """The watch configuration is unusable: says which key and what is allowed."""


def load_config(text):
    """The watch configuration (JSON) merged over DEFAULTS, checked."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ConfigError("the watch configuration is not JSON: %s" % exc) from None
    if not isinstance(data, dict):
        raise ConfigError("the watch configuration must be a JSON object")
    unknown = sorted(set(data) - set(DEFAULTS))
    if unknown:
        raise ConfigError("unknown keys %s; allowed: %s" % (unknown, sorted(DEFAULTS)))
    config = dict(DEFAULTS, **data)
    if config["action"] not in ACTIONS:
        raise ConfigError("action=%r; allowed: %s" % (config["action"], ", ".join(ACTIONS)))
    for key in (
        "timeout_s",
        "probe_timeout_s",
        "restart_min_interval_s",
        "min_accept_length",
        "deploy_marker_max_age_s",
    ):
        try:
            config[key] = float(config[key])
        except (TypeError, ValueError):
            raise ConfigError("%s=%r must be a number" % (key, config[key])) from None
    if config["probe_timeout_s"] <= 0 or config["timeout_s"] <= config["probe_timeout_s"]:
        raise ConfigError(
            "timeout_s=%g must be above probe_timeout_s=%g > 0 (a hung generation is judged wedged within the "
            "watch timeout)" % (config["timeout_s"], config["probe_timeout_s"])
        )
    return config


def read_api_key(path, read):
    """The server's key from its --config file (``api-key: "..."``); "" without one."""
    if not path:
        return ""
    try:
        text = read(path)
    except OSError:
        return ""
    for line in text.splitlines():
        if line.startswith("api-key:"):
            value = line.split(":", 1)[1].strip()
            try:
                return json.loads(value)
            except ValueError:
                return value.strip("'\"")
    return ""


def stdlib_open_url(url, data=None, headers=None, method=None, timeout=None, **_kwargs):
    """ansible's open_url, as far as the Prober uses it, with urllib (no Ansible on the timer's path)."""
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    return opener.open(request, timeout=timeout)


def _metric_line(name, value, labels=None):
    if value is None:
        return None
    text = name
    if labels:
        text += "{%s}" % ",".join(
            '%s="%s"' % (k, str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
            for k, v in sorted(labels.items())
        )
    return "%s %s" % (text, repr(float(value)) if not isinstance(value, bool) else int(value))


METRICS = (
    ("sglang_watch_probe_ok", "gauge", "1 when the last watchdog probe generated tokens and passed every check."),
    ("sglang_watch_probe_latency_seconds", "gauge", "Seconds the last watchdog probe's generation took."),
    ("sglang_watch_tokens_per_second", "gauge", "Output tokens per second of the last watchdog probe."),
    ("sglang_watch_accept_length", "gauge", "Speculative accept length the last probe (or the server) reported."),
    ("sglang_watch_verdict", "gauge", "1 for the class of the last verdict (ok, stopped or a failure class)."),
    ("sglang_watch_release_info", "gauge", "1, labelled with the release the unit runs."),
    ("sglang_watch_time_to_ready_seconds", "gauge", "Seconds from start to ready of the release's deploy."),
    ("sglang_watch_last_run_timestamp_seconds", "gauge", "Epoch seconds of the last watchdog run."),
    ("sglang_watch_restarts_total", "counter", "Restarts the watchdog made."),
    ("sglang_watch_failures_total", "counter", "Failed watchdog verdicts, by the class of their cause."),
    ("sglang_watch_last_failure_timestamp_seconds", "gauge", "Epoch seconds of the last failed verdict, by cause."),
)


def render_metrics(verdict, labels):
    """node_exporter textfile lines (Prometheus text format 0.0.4) for one verdict."""
    values = {
        "sglang_watch_probe_ok": [(verdict["ok"], {})],
        "sglang_watch_probe_latency_seconds": [(verdict.get("latency_s"), {})],
        "sglang_watch_tokens_per_second": [(verdict.get("tokens_per_s"), {})],
        "sglang_watch_accept_length": [(verdict.get("accept_length"), {})],
        "sglang_watch_verdict": [
            (1 if name == (verdict["verdict"] if verdict["verdict"] in VERDICTS else "other") else 0, {"class": name})
            for name in VERDICTS
        ],
        "sglang_watch_release_info": [(1, {"release_id": verdict.get("release_id") or "unknown"})],
        "sglang_watch_time_to_ready_seconds": [(verdict.get("time_to_ready_s"), {})],
        "sglang_watch_last_run_timestamp_seconds": [(verdict["at"], {})],
        "sglang_watch_restarts_total": [(verdict.get("restarts_total", 0), {})],
        "sglang_watch_failures_total": [
            (count, {"class": cause}) for cause, count in sorted((verdict.get("failures_by_cause") or {}).items())
        ],
        "sglang_watch_last_failure_timestamp_seconds": [
            (at, {"class": cause}) for cause, at in sorted((verdict.get("last_failure_at") or {}).items())
        ],
    }
    lines = []
    for name, kind, help_text in METRICS:
        samples = [_metric_line(name, value, dict(labels, **extra)) for value, extra in values[name]]
        samples = [s for s in samples if s is not None]
        if not samples:
            continue
        lines.append("# HELP %s %s" % (name, help_text))
        lines.append("# TYPE %s %s" % (name, kind))
        lines.extend(samples)
    return "\n".join(lines) + "\n"


def summarise(result, release_id, time_to_ready_s, now_epoch):
    """The verdict dict of one readiness result (or of a cleanly stopped unit: result None)."""
    if result is None:
        return {"ok": False, "verdict": "stopped", "at": now_epoch, "release_id": release_id,
                "reason": "the unit was stopped cleanly: nothing to watch", "hint": None,
                "time_to_ready_s": time_to_ready_s}  # fmt: skip
    probe = result.get("probe") or {}
    server = result.get("server") or {}
    latency = probe.get("latency_s")
    tokens = probe.get("completion_tokens")
    accept = probe.get("spec_accept_length")
    if accept is None:
        accept = server.get("avg_spec_accept_length")
    return {
        "ok": bool(result.get("ready")),
        "verdict": "ok" if result.get("ready") else (result.get("failure_class") or "other"),
        # What killed the process (restart_loop / died_while_serving say only that it died).
        "cause_class": None if result.get("ready") else result.get("cause_class"),
        "reason": result.get("reason"),
        "hint": result.get("hint"),
        "latency_s": latency,
        "tokens_per_s": probe.get("tokens_per_s") or (round(tokens / latency, 3) if tokens and latency else None),
        "accept_length": accept,
        "release_id": release_id,
        "time_to_ready_s": time_to_ready_s,
        "at": now_epoch,
    }


def _read_state(path, read):
    try:
        state = json.loads(read(path))
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}


def _release(config, readlink):
    if not config["current_link"]:
        return None
    try:
        return os.path.basename(readlink(config["current_link"]).rstrip("/"))
    except OSError:
        return None


def _time_to_ready(config, read):
    if not config["last_good_record"]:
        return None
    try:
        record = json.loads(read(config["last_good_record"]))
    except (OSError, ValueError):
        return None
    value = record.get("time_to_ready_s") if isinstance(record, dict) else None
    return value if isinstance(value, (int, float)) else None


def _stopped_on_purpose(unit_state, io):
    """The unit is down because someone meant it: stopped cleanly (inactive, Result=success), or down and disabled
    (a deploy that could not serve, or an operator, stopped it on purpose). Neither is the watchdog's to restart."""
    if unit_state.active_state == "inactive" and unit_state.result in ("success", ""):
        return True
    if unit_state.dead:
        _rc, out, _err = io.run_command(["systemctl", "is-enabled", unit_state.unit])
        return out.strip() not in ("enabled", "enabled-runtime")
    return False


def _restarted_by_hand(before, after):
    """The unit runs a new invocation that systemd's Restart= did not start (NRestarts unchanged): someone ran
    ``systemctl restart`` (an operator, a deploy of another replica) while the probe was in flight."""
    return bool(
        before.invocation_id
        and after.invocation_id
        and after.invocation_id != before.invocation_id
        and after.n_restarts == before.n_restarts
        and not after.dead
    )


def _not_the_servers_failure(unit, before, io):
    """(verdict, reason) when a failed probe is not the server's failure, or None. The unit's state is read again
    after the probe: stopped on purpose meanwhile (`systemctl stop`, which a restart would undo), or restarted by
    hand (a new invocation: the probe met the old process's end or the new one's start, which a second restart
    would cut short; the next run judges it)."""
    after = read_unit_state(unit, io.run_command)
    if _stopped_on_purpose(after, io):
        return "stopped", "the unit was stopped cleanly while the watchdog probed it: nothing to watch"
    if _restarted_by_hand(before, after):
        return "restarted", (
            "the unit was restarted while the watchdog probed it (invocation %s -> %s, NRestarts %d unchanged): "
            "not judged, the next run judges the new start"
            % (before.invocation_id, after.invocation_id, after.n_restarts)
        )
    return None


def run_once(config, io):
    """One watchdog run. ``io`` holds the side effects: run_command(argv) -> (rc, out, err), open_url,
    read(path), readlink(path), mtime(path), write(path, text, mode), clock(), sleep(s), time(), port_check,
    log(line).

    Returns the verdict dict (with ``action_taken``).
    """
    unit = config["unit"]
    state = _read_state(config["state_file"], io.read)
    release_id = _release(config, io.readlink)
    now = io.time()
    deploy_age = _age(config["deploy_marker"], io, now)
    if deploy_age is not None and deploy_age < config["deploy_marker_max_age_s"]:
        verdict = summarise(None, release_id, _time_to_ready(config, io.read), now)
        verdict.update(verdict="deploying", reason="a deploy has been running for %.0f s: not judged" % deploy_age)
        io.log("<6>sglang-watch: %s %s" % (unit, verdict["reason"]))
        return _finish(config, io, state, verdict)
    before = read_unit_state(unit, io.run_command)
    if _stopped_on_purpose(before, io):
        verdict = summarise(None, release_id, _time_to_ready(config, io.read), now)
    else:
        prober = Prober(
            config["base_url"],
            io.open_url,
            probe=ProbeSettings.from_dict(
                {"max_new_tokens": int(config["max_new_tokens"]), "timeout": config["probe_timeout_s"]}
            ),
            api_key=read_api_key(config["api_key_file"], io.read) or None,
            clock=io.clock,
        )
        port = urlparse(config["base_url"]).port
        readiness = Readiness(
            UnitWatcher(unit, io.run_command),
            prober,
            Params(
                startup_timeout=config["timeout_s"],
                poll_interval=0.5,
                expect_speculative_algorithm=config["expect_speculative_algorithm"] or None,
                min_accept_length=config["min_accept_length"] or None,
                journal_settle_s=1.0,
                port=port,
            ),
            clock=io.clock,
            sleep=io.sleep,
            port_check=io.port_check,
        )
        verdict = summarise(readiness.run(), release_id, _time_to_ready(config, io.read), now)
        spared = None if verdict["ok"] else _not_the_servers_failure(unit, before, io)
        if spared:
            verdict = summarise(None, release_id, _time_to_ready(config, io.read), now)
            verdict["verdict"], verdict["reason"] = spared
            io.log("<5>sglang-watch: %s %s" % (unit, verdict["reason"]))
    verdict["restarts_total"] = int(state.get("restarts_total", 0))
    verdict["action_taken"] = "none"
    if not verdict["ok"] and verdict["verdict"] not in NOT_JUDGED:
        cause = verdict.get("cause_class") or verdict["verdict"]
        counts = state.setdefault("failures_by_cause", {})
        counts[cause] = int(counts.get(cause, 0)) + 1
        state.setdefault("last_failure_at", {})[cause] = now
        cause_hint = failure_classifier.hint_for(cause) if cause != verdict["verdict"] else None
        io.log(
            "<3>sglang-watch: %s verdict=%s cause=%s release=%s reason=%s hint=%s%s"
            % (unit, verdict["verdict"], cause, release_id, verdict.get("reason"), verdict.get("hint"),
               " cause_hint=%s" % cause_hint if cause_hint else "")
        )  # fmt: skip
        if config["action"] == "restart":
            last = float(state.get("last_restart_at", 0) or 0)
            if now - last < config["restart_min_interval_s"]:
                verdict["action_taken"] = "restart_rate_limited"
                io.log(
                    "<4>sglang-watch: %s not restarted: the watchdog restarted it %.0f s ago "
                    "(restart_min_interval_s=%g)" % (unit, now - last, config["restart_min_interval_s"])
                )
            else:
                # A unit systemd gave up on (StartLimitBurst) refuses a plain restart: clear that first.
                io.run_command(["systemctl", "reset-failed", unit])
                rc, out, err = io.run_command(["systemctl", "restart", unit])
                verdict["action_taken"] = "restarted" if rc == 0 else "restart_failed"
                state["last_restart_at"] = now
                state["restarts_total"] = verdict["restarts_total"] = verdict["restarts_total"] + 1
                io.log(
                    "<%d>sglang-watch: %s %s (cause %s)%s"
                    % (
                        5 if rc == 0 else 3,
                        unit,
                        verdict["action_taken"],
                        cause,
                        "" if rc == 0 else ": " + (err or out),
                    )
                )
        else:
            io.log("<5>sglang-watch: %s left alone (action report)" % unit)
    else:
        io.log(
            "<6>sglang-watch: %s verdict=%s release=%s latency_s=%s tokens_per_s=%s accept_length=%s"
            % (unit, verdict["verdict"], release_id, verdict.get("latency_s"), verdict.get("tokens_per_s"),
               verdict.get("accept_length"))
        )  # fmt: skip
    return _finish(config, io, state, verdict)


def _age(path, io, now):
    if not path:
        return None
    try:
        return max(0.0, now - io.mtime(path))
    except OSError:
        return None


def _finish(config, io, state, verdict):
    verdict.setdefault("restarts_total", int(state.get("restarts_total", 0)))
    verdict.setdefault("action_taken", "none")
    verdict["failures_by_cause"] = dict(state.get("failures_by_cause") or {})
    verdict["last_failure_at"] = dict(state.get("last_failure_at") or {})
    state["last_verdict"] = {k: verdict.get(k) for k in ("verdict", "cause_class", "reason", "at", "release_id")}
    io.write(config["state_file"], json.dumps(state, sort_keys=True) + "\n", 0o600)
    if config["textfile_dir"]:
        io.write(
            os.path.join(config["textfile_dir"], "sglang_watch.prom"),
            render_metrics(verdict, {"unit": config["unit"]}),
            0o644,
        )
    return verdict


class HostIO:
    """The real side effects of a run on the host."""

    def __init__(self):
        self.clock = time.monotonic
        self.sleep = time.sleep
        self.time = time.time
        self.open_url = stdlib_open_url
        self.port_check = port_owner.port_check

    @staticmethod
    def run_command(argv):
        env = dict(os.environ, LC_ALL="C", SYSTEMD_COLORS="0")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    @staticmethod
    def read(path):
        with open(path) as handle:
            return handle.read()

    @staticmethod
    def readlink(path):
        return os.readlink(path)

    @staticmethod
    def mtime(path):
        return os.stat(path).st_mtime

    @staticmethod
    def write(path, text, mode):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        write_atomically(path, text, mode)

    @staticmethod
    def log(line):
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main(argv=None, io=None):
    parser = argparse.ArgumentParser(
        prog="sglang-watch", description="Prove the sglang service still generates (the deploy's readiness probe)."
    )
    parser.add_argument("--config", required=True, help="the watch configuration (JSON) the role rendered")
    parser.add_argument("--action", choices=ACTIONS, help="override the configured action for this run")
    args = parser.parse_args(argv)
    io = io or HostIO()
    try:
        config = load_config(io.read(args.config))
    except (OSError, ConfigError) as exc:
        io.log("<3>sglang-watch: %s: %s" % (args.config, exc))
        return 2
    if args.action:
        config["action"] = args.action
    verdict = run_once(config, io)
    return 0 if verdict["ok"] or verdict["verdict"] in NOT_JUDGED else 1


if __name__ == "__main__":
    raise SystemExit(main())  # a program run by the timer, not a module: its exit status is the verdict
