# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness state machine: watch the process, walk the HTTP phases, return a verdict.

At least every ``poll_interval`` the watcher (systemd unit or plain process) is polled first,
so a death or a restart ends the wait within one poll whatever HTTP call is in flight. HTTP
calls run in the background (``prober.start``); the loop waits on the call in flight for at
most one poll interval and judges it as soon as it finishes (or once its own timeout has
passed on the injected clock), so /health 200 -> generation -> server info -> verdict run
back to back. /health itself is paced to once per poll interval.

Phases: ``loading`` (port closed) -> ``warming`` (``/health`` 503) -> ``probing`` (a real
generation) -> ``verifying`` (server info: speculative algorithm, accept length) ->
``ready``; any verdict other than ready is phase ``failed`` with ``failed_in_phase``. A death
after the server logged that it is ready is ``failed_in_phase: serving`` (it had been serving,
whatever this run had seen of it).

A death is classified from its last traceback (unless the server was ready after it), else from
the fatal end of the log (after the last progress line), never from an error logged and survived
earlier in the start. The returned log has no ANSI codes and its
runs of health-poll access lines are collapsed.

``time_to_ready_s`` counts from the start of the process or unit when the watcher knows it
(``started_ago()``), else from the module's start; ``elapsed_s`` is always the module's own time.

``clock`` and ``sleep`` are injected (a fake clock drives the unit tests).

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import time

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal as journal_text
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import (
    HEALTH_TIMEOUT_S,
    MODELS_TIMEOUT_S,
    SERVER_INFO_TIMEOUT_S,
    redact,
)

# Server-info keys worth returning (never the whole server args: they may hold secrets).
SERVER_KEYS = (
    "version",
    "model_path",
    "served_model_name",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "speculative_num_draft_tokens",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "tp_size",
    "dp_size",
    "context_length",
    "mem_fraction_static",
    "max_running_requests",
    "disable_cuda_graph",
    "attention_backend",
)


# sglang's "Starting" state answers /health with 503 at once; a slower 503 is not warm-up, and a
# /health still unanswered after this long is the engine's own health generation hanging or slow.
SLOW_HEALTH_503_S = 1.0
# While warming (port open, /health 503 at once) /health is polled this often: the ready moment is
# seen within this. A 503 "Starting" answer costs the engine nothing, but each is an access-log line,
# and a cold start on the H200 warmed up for 69 s (Triton JIT): 0.1 s wrote 687 lines there.
WARMING_POLL_S = 0.25


class Params:
    """Tunables of one readiness run (module options, plus internal pacing)."""

    def __init__(
        self,
        *,
        startup_timeout=900.0,
        poll_interval=0.5,
        expect_speculative_algorithm=None,
        min_accept_length=None,
        journal_max_bytes=65536,
        progress_every_s=2.0,
        death_grace_s=2.0,
        journal_settle_s=2.0,
        task_slack_s=1.0,
        api_key=None,
        port=None,
    ):
        self.startup_timeout = float(startup_timeout)
        self.poll_interval = float(poll_interval)
        self.expect_speculative_algorithm = expect_speculative_algorithm
        self.min_accept_length = min_accept_length
        self.journal_max_bytes = int(journal_max_bytes)
        self.progress_every_s = progress_every_s
        self.death_grace_s = death_grace_s
        self.journal_settle_s = journal_settle_s
        self.task_slack_s = task_slack_s
        self.api_key = api_key
        # The server's TCP port on this host: its listener must belong to the watched tree.
        self.port = int(port) if port else None


def _normalise_algorithm(value):
    if value is None:
        return None
    text = str(value).strip()
    if not text or text.lower() == "none":
        return None
    return text.upper()


def extract_server(info):
    """Selected keys of /server_info, plus the scheduler's average accept length."""
    if not isinstance(info, dict):
        return {}
    server = {key: info.get(key) for key in SERVER_KEYS if key in info}
    states = info.get("internal_states")
    if isinstance(states, list):
        for state in states:
            if isinstance(state, dict) and state.get("avg_spec_accept_length") is not None:
                server["avg_spec_accept_length"] = state["avg_spec_accept_length"]
                break
    return server


def speculation_evidence(probe):
    """Whether a probe's own answer proves speculative decoding ran: spec_verify_ct > 0 or an accept length."""
    if not isinstance(probe, dict):
        return False
    try:
        if int(probe.get("spec_verify_ct") or 0) > 0:
            return True
    except (TypeError, ValueError):
        pass
    return probe.get("spec_accept_length") is not None


class Readiness:
    """One readiness run. ``run()`` waits for a verdict; ``snapshot()`` reports without waiting."""

    def __init__(self, watcher, prober, params=None, clock=time.monotonic, sleep=time.sleep, *, port_check=None):
        self.watcher = watcher
        # port_check(port, root_pid) -> port_owner.port_check's dict; None: not checked.
        self.port_check = port_check
        self.port_owner = {}
        # What proved that speculative decoding ran (with expect_speculative_algorithm), for the result.
        self.speculation_evidence = None
        self.prober = prober
        self.params = params or Params()
        self.clock = clock
        self.sleep = sleep
        self.phase = "loading"
        self.progress = None
        self.probe = {}
        self.server = {}
        self.notes = []
        self._start = None
        self._origin = None
        self._origin_source = "module"
        self._watch = None
        self._outcome = None
        self._last_progress_read = None
        self._wedge_timeout = None
        self._ready_line_seen = False
        self._last_health = None

    # -- helpers ----------------------------------------------------------------------------
    def _elapsed(self):
        return round(self.clock() - self._start, 3)

    def _note_origin(self):
        """Once: where the process / unit started, on the module's clock (for time_to_ready_s)."""
        if self._origin_source != "module":
            return
        started_ago = getattr(self.watcher, "started_ago", None)
        try:
            ago = started_ago() if started_ago else None
        except Exception:  # informative only
            ago = None
        if ago is not None and ago >= 0:
            self._origin = self.clock() - ago
            self._origin_source = self.watcher.kind

    def _remaining(self):
        return self._start + self.params.startup_timeout - self.clock()

    def _refresh_progress(self, force=False):
        now = self.clock()
        if not force and self._last_progress_read is not None:
            if now - self._last_progress_read < self.params.progress_every_s:
                return
        self._last_progress_read = now
        try:
            line = journal_text.last_progress(journal_text.strip_ansi(self.watcher.read_log(tail_lines=200)))
        except Exception as exc:  # progress is informative; never let it end the run
            self.notes.append("could not read the log for progress: %s" % exc)
            return
        if line:
            self.progress = line
            self._ready_line_seen = self._ready_line_seen or journal_text.saw_ready_line(line)

    def _settled_log(self):
        """This start's log, complete: journald may lag the death.

        A watcher that can sync its log (a unit: ``journalctl --sync``) is read after the sync; that
        text is taken when the watcher calls it complete (a unit: systemd's end-of-start lines are in
        it and its last traceback is whole). Otherwise the log is re-read until it is complete and
        stops growing, bounded by ``journal_settle_s``.
        """
        settled = getattr(self.watcher, "log_settled", lambda text: True)
        sync = getattr(self.watcher, "sync_log", None)
        try:
            synced = bool(sync and sync())
        except Exception as exc:  # the re-read below still settles the log
            self.notes.append("could not sync the journal: %s" % exc)
            synced = False
        text = self.watcher.read_log()
        if synced and settled(text):
            return text
        waited = 0.0
        step = 0.25
        while waited < self.params.journal_settle_s:
            self.sleep(step)
            waited += step
            again = self.watcher.read_log()
            if len(again) == len(text) and settled(again):
                return again
            text = again
        return text

    def _result(
        self,
        ready,
        *,
        failure_class=None,
        reason=None,
        log_text=None,
        cause_class=None,
        failed_in=None,
        traceback=False,
        exception=None,
    ):
        journal = ""
        truncated = False
        if traceback is False:
            traceback = journal_text.last_traceback(log_text) if log_text is not None else None
        if log_text is not None:
            if exception is None:
                exception = journal_text.exception_line(traceback) if traceback else None
            journal, truncated = journal_text.bound(log_text, self.params.journal_max_bytes)
            self.progress = journal_text.last_progress(log_text) or self.progress
        secret = self.params.api_key
        watch = self._watch
        unit = watch.detail if watch is not None and self.watcher.kind == "unit" else {}
        process = watch.detail if watch is not None and self.watcher.kind == "process" else {}
        elapsed = self._elapsed()
        origin = self._origin if self._origin is not None else self._start
        if unit and watch.exited_at and not ready:
            # Same clock as systemd's stamps (CLOCK_MONOTONIC) when clock is time.monotonic.
            unit = dict(unit, death_to_verdict_s=round(self.clock() - watch.exited_at, 3))
        return {
            "ready": ready,
            "phase": "ready" if ready else "failed",
            "failed_in_phase": failed_in,
            "failure_class": failure_class,
            "cause_class": cause_class if cause_class is not None else failure_class,
            "reason": redact(reason, secret),
            "hint": failure_classifier.hint_for(failure_class) if failure_class else None,
            "elapsed_s": elapsed,
            "time_to_ready_s": round(self.clock() - origin, 3) if ready else None,
            "time_to_ready_from": self._origin_source,
            "unit": unit,
            "process": process,
            "probe": self.probe,
            "server": self.server,
            "traceback": redact(traceback, secret),
            "exception_line": redact(exception, secret),
            "journal": redact(journal, secret),
            "journal_truncated": truncated,
            "progress": redact(self.progress, secret),
            "port_owner": dict(self.port_owner),
            "speculation_evidence": self.speculation_evidence,
            "notes": list(self.notes),
        }

    def _fail(self, failure_class, reason, cause_class=None, log=True):
        log_text = None
        if log:
            try:
                log_text = journal_text.clean(self.watcher.read_log())
            except Exception as exc:
                self.notes.append("could not read the log: %s" % exc)
                log_text = ""
        failed_in = self.phase
        self.phase = "failed"
        return self._result(
            False,
            failure_class=failure_class,
            reason=reason,
            log_text=log_text,
            cause_class=cause_class,
            failed_in=failed_in,
        )

    def _death_verdict(self, watch):
        failed_in = self.phase
        self.phase = "failed"
        try:
            log_text = journal_text.clean(self._settled_log())
        except Exception as exc:
            self.notes.append("could not read the log: %s" % exc)
            log_text = ""
        served = self._ready_line_seen or journal_text.saw_ready_line(log_text)
        if served and failed_in in ("loading", "warming", "probing", "confirming", "verifying"):
            # The engine said it was ready before it died: it died serving, whichever of our calls
            # was in flight (a /health that hangs hands over to the test generation after 1 s).
            failed_in = "serving"
        traceback, fatal = journal_text.fatal_evidence(log_text)
        match = failure_classifier.classify_failure(traceback, fatal)
        exception = (journal_text.exception_line(traceback) if traceback else None) or (
            match.line if match else journal_text.last_error_line(fatal)
        )
        cause = match.failure_class if match else ("died_while_serving" if served else "crashed_on_start")
        if watch.restarted:
            failure_class = "restart_loop"
        elif watch.not_started and not log_text.strip():
            failure_class = cause = "not_started"
        else:
            failure_class = cause
        reason = "%s after %.1fs (phase %s)" % (watch.description, self._elapsed(), failed_in)
        if exception:
            reason += ": " + exception
        return self._result(
            False,
            failure_class=failure_class,
            reason=reason,
            log_text=log_text,
            cause_class=cause,
            failed_in=failed_in,
            traceback=traceback,
            exception=exception,
        )

    # -- the loop ---------------------------------------------------------------------------
    def run(self):
        self._start = self.clock()
        pending = None  # (name, task, timeout, started)
        failed_probe_at = None
        while True:
            now = self.clock()
            watch = self.watcher.poll()
            self._watch = watch
            if watch.dead or watch.restarted:
                return self._death_verdict(watch)
            self._note_origin()
            self._refresh_progress()

            if failed_probe_at is not None:
                # A failed probe: give the process a moment to die, so a crash wins over probe_failed.
                if now - failed_probe_at >= self.params.death_grace_s:
                    return self._fail("probe_failed", self._outcome.reason)
                self.sleep(self.params.poll_interval)
                continue

            if pending is not None:
                pending, verdict = self._collect(pending, now)
                if verdict == "probe_failed":
                    failed_probe_at = self.clock()
                    continue
                if verdict is not None:
                    return verdict

            if pending is None:
                pending, verdict = self._start_next()
                if verdict is not None:
                    return verdict
            self._wait(pending[1])

    def _start_next(self):
        """(pending, None) with the phase's call started, or (None, the timeout verdict)."""
        remaining = self._remaining()
        if remaining <= 0:
            return None, self._timeout_verdict()
        self._pace()
        name, task, timeout = self._next_call(remaining)
        pending = (name, task, timeout, self.clock())
        if name == "health":
            self._last_health = pending[3]
        return pending, None

    def _pace(self):
        """/health at most once per poll interval while loading, WARMING_POLL_S while warming.

        A refused or 503 answer comes back at once; while warming the engine is seconds from ready,
        and the sooner the ready moment is seen the sooner the test generation starts.
        """
        if self.phase in ("loading", "warming") and self._last_health is not None:
            every = self.params.poll_interval
            if self.phase == "warming":
                every = min(every, WARMING_POLL_S)
            left = self._last_health + every - self.clock()
            if left > 0:
                self.sleep(left)

    def _wait(self, task):
        """Until the call in flight finishes, at most one poll interval (the watcher is polled after it).

        A call that answers at once is judged at once: ``task.wait(seconds)`` (an event wait) returns
        when the call finishes. A task without ``wait`` falls back to a plain ``sleep``.
        """
        wait = getattr(task, "wait", None)
        if wait is None:
            self.sleep(self.params.poll_interval)
        else:
            wait(self.params.poll_interval)

    def _collect(self, pending, now):
        """The call in flight: (pending, None) while it runs, else (None, what ``_handle`` made of it).

        A /health still unanswered after SLOW_HEALTH_503_S is left to finish on its own: "Starting"
        answers at once, so the engine is past start-up, and a real generation decides (a wedged
        engine's /health hangs for SGLANG_HEALTH_CHECK_TIMEOUT, 20 s by default). Unless nothing
        listens on the port: then the call is a refused connect that a busy host has not reported
        yet, and the engine is still loading.
        """
        name, task, timeout, started = pending
        if name == "health" and not task.done() and now - started >= SLOW_HEALTH_503_S:
            if self._port_closed():
                return pending, None
            self.phase = "probing"
            return None, None
        if task.done():
            try:
                value = task.result()
            except Exception as exc:  # a bug in a call must still end in a verdict
                return None, self._fail("probe_failed", "internal error in the %s call: %r" % (name, exc))
            return None, self._handle(name, value, timeout)
        if now - started >= timeout + self.params.task_slack_s:
            return None, self._handle(name, None, timeout)
        return pending, None

    def _timeout_verdict(self):
        return self._fail(
            "timeout",
            "no verdict within startup_timeout=%gs; last phase %s; progress: %s"
            % (self.params.startup_timeout, self.phase, self.progress or "none seen in the log"),
        )

    def _next_call(self, remaining):
        if self.phase in ("loading", "warming"):
            timeout = min(HEALTH_TIMEOUT_S, max(remaining, 0.5))
            return ("health", self.prober.start("health", timeout=timeout), timeout)
        if self.phase == "probing":
            timeout = min(self.prober.probe.timeout, max(remaining, 0.5))
            return ("generate", self.prober.start("generate", timeout=timeout), timeout)
        if self.phase == "confirming":
            return ("models", self.prober.start("models", timeout=MODELS_TIMEOUT_S), MODELS_TIMEOUT_S)
        if self.phase == "verifying":
            timeout = SERVER_INFO_TIMEOUT_S
            return ("server_info", self.prober.start("server_info", timeout=timeout), timeout)
        if self.phase == "evidence":
            timeout = min(self.prober.probe.timeout, max(remaining, 0.5))
            return ("evidence", self.prober.start("native_generate", timeout=timeout), timeout)
        raise RuntimeError("readiness: no call for phase %r" % self.phase)

    def _handle(self, name, result, timeout):
        """Judge a finished (or overdue: result None) call: a verdict, "probe_failed" (after a grace) or None."""
        if name == "health":
            self._phase_after_health(result)
            if self.phase != "loading":
                return self._owner_verdict()
            return None
        if name == "generate":
            return self._judge_generate(result, timeout)
        if name == "models":
            return self._judge_models(result)
        if name == "server_info":
            return self._verify(result)
        if name == "evidence":
            return self._judge_evidence(result)
        raise RuntimeError("readiness: unknown call %r" % name)

    def _root_pid(self):
        detail = self._watch.detail if self._watch is not None else {}
        return detail.get("main_pid") or detail.get("pid") or 0

    def _port_closed(self):
        """Whether the port check sees nothing listening on the port (False when it cannot tell)."""
        if self.port_check is None or not self.params.port:
            return False
        try:
            return self.port_check(self.params.port, self._root_pid()).get("state") == "free"
        except Exception:  # informative only, as in _owner_verdict
            return False

    def _owner_verdict(self):
        """Something answers on the port: it must be the watched tree's listener, or ``port_in_use``.

        Checked until the listener is seen to be the tree's own (then once is enough: a restart or a
        death ends the run through the watcher). A holder that cannot be seen is a note, not a verdict.
        """
        if self.port_check is None or not self.params.port or self.port_owner.get("state") == "own":
            return None
        try:
            owner = self.port_check(self.params.port, self._root_pid())
        except Exception as exc:  # informative: never let the check itself end the run
            self.notes.append("could not check who holds port %s: %s" % (self.params.port, exc))
            self.port_check = None
            return None
        self.port_owner = owner
        if owner.get("state") == "foreign":
            self.probe = {}
            return self._fail(
                "port_in_use",
                "%s: the answers on the port are not the release's, so they were not judged" % owner.get("reason"),
            )
        # "free" while something answers: the server is in another network namespace (a container) or
        # behind a proxy; nothing here to judge it by, and port_owner says so in the result.
        if owner.get("state") == "unknown" and owner.get("reason") not in self.notes:
            self.notes.append(owner["reason"])
        return None

    def _phase_after_health(self, result):
        if result is None or result.error == "timeout":
            # Past "Starting" (which answers 503 at once) but the engine is slow: let a generation decide.
            self.phase = "probing"
        elif result.error in ("refused", "connection"):
            self.phase = "loading"
        elif result.status == 503:
            # "Starting" answers 503 at once. A 503 that took seconds is the health check's own
            # generation timing out (SGLANG_HEALTH_CHECK_TIMEOUT), and a 503 after the ready line
            # means the engine stopped answering: either way a real generation decides.
            slow = result.latency_s >= SLOW_HEALTH_503_S
            self.phase = "probing" if slow or self._ready_line_seen else "warming"
        else:
            self.phase = "probing"

    def _judge_generate(self, result, timeout):
        if result is None:  # overdue on our clock: the call never came back
            self.probe = {"api": self.prober.probe.api, "ok": False, "error": "timeout", "timeout_s": timeout}
            outcome_error = "timeout"
        else:
            self._outcome = result
            self.probe = result.as_dict(self.params.api_key)
            outcome_error = None if result.ok else result.error
        if outcome_error is None:
            self.phase = "verifying"
            return None
        if outcome_error in ("refused", "connection"):
            # Nothing listens (a /health too slow to answer on a busy host handed over early): the
            # port is closed, so the server is still loading or dying, which the watcher decides.
            self.phase = "loading"
            return None
        if outcome_error != "timeout":
            return "probe_failed"
        if timeout < self.prober.probe.timeout:
            return self._fail(
                "timeout",
                "startup_timeout=%gs ran out while the test generation was still unanswered "
                "(after %gs)" % (self.params.startup_timeout, timeout),
            )
        self._wedge_timeout = timeout
        self.phase = "confirming"
        return None

    def _judge_models(self, result):
        path = "/v1/chat/completions" if self.prober.probe.api == "openai" else "/generate"
        what = "POST %s did not answer within %gs" % (path, self._wedge_timeout)
        if result is not None and result.ok:
            reason = "%s while GET /v1/models answered HTTP %s in %.3fs" % (what, result.status, result.latency_s)
        elif result is not None:
            reason = "%s and GET /v1/models did not answer either (%s)" % (what, result.describe())
        else:
            reason = "%s and GET /v1/models did not answer either" % what
        return self._fail("wedged", reason)

    def _verify(self, result):
        params = self.params
        info = result.json() if result is not None and result.ok else None
        if not isinstance(info, dict):
            what = result.describe() if result is not None else "no answer within %gs" % SERVER_INFO_TIMEOUT_S
            if params.expect_speculative_algorithm:
                return self._fail("probe_failed", "could not read the server info to check the algorithm: %s" % what)
            self.notes.append("server info unavailable: %s" % what)
        else:
            self.server = extract_server(info)
        if params.expect_speculative_algorithm:
            want = _normalise_algorithm(params.expect_speculative_algorithm)
            got = _normalise_algorithm(self.server.get("speculative_algorithm"))
            if want != got:
                return self._fail(
                    "spec_mismatch",
                    "expected speculative_algorithm %s, the server runs %s" % (want, got or "none"),
                )
        if params.expect_speculative_algorithm and speculation_evidence(self.probe):
            self.speculation_evidence = "the probe's answer: spec_verify_ct=%s, spec_accept_length=%s" % (
                self.probe.get("spec_verify_ct"),
                self.probe.get("spec_accept_length"),
            )
        elif params.expect_speculative_algorithm and self.prober.probe.api == "openai":
            # sglang's OpenAI answers carry no speculative counters: one native /generate shows them.
            self.phase = "evidence"
            return None
        if params.expect_speculative_algorithm and not speculation_evidence(self.probe):
            return self._fail(
                "spec_mismatch",
                "the server says speculative_algorithm %s, but the probe's answer shows no speculative decoding "
                "(no spec_verify_ct > 0, no spec_accept_length): server_info only echoes the launch flag%s"
                % (
                    _normalise_algorithm(self.server.get("speculative_algorithm")) or "none",
                    "; the openai probe's answer carries no such counters: use probe.api native"
                    if self.prober.probe.api == "openai"
                    else "",
                ),
            )
        return self._accept_verdict(self.probe.get("spec_accept_length"))

    def _judge_evidence(self, result):
        """The native call made for an openai probe: its counters prove speculation ran, or spec_mismatch."""
        native = result.as_dict(self.params.api_key) if result is not None else {}
        if native.get("ok") and speculation_evidence(native):
            self.speculation_evidence = (
                "one native POST /generate (the openai answer carries no counters): spec_verify_ct=%s, "
                "spec_accept_length=%s" % (native.get("spec_verify_ct"), native.get("spec_accept_length"))
            )
            return self._accept_verdict(native.get("spec_accept_length"))
        what = (
            "it failed: %s" % (native.get("reason") or native.get("error"))
            if native and not native.get("ok")
            else "it shows no spec_verify_ct > 0 and no spec_accept_length"
            if native
            else "it did not answer"
        )
        return self._fail(
            "spec_mismatch",
            "the server says speculative_algorithm %s, the openai probe's answer carries no speculative counters, "
            "and one native POST /generate sent to check: %s"
            % (_normalise_algorithm(self.server.get("speculative_algorithm")) or "none", what),
        )

    def _accept_verdict(self, accept):
        params = self.params
        if accept is None:
            accept = self.server.get("avg_spec_accept_length")
        if params.min_accept_length is not None:
            if accept is None:
                self.notes.append("min_accept_length not checked: the server reports no spec_accept_length")
            elif float(accept) < float(params.min_accept_length):
                return self._fail(
                    "low_acceptance",
                    "spec_accept_length %.2f is below min_accept_length %.2f"
                    % (float(accept), float(params.min_accept_length)),
                )
        self.phase = "ready"
        return self._result(True)

    # -- check mode -------------------------------------------------------------------------
    def snapshot(self):
        """Current state without waiting: unit/process, /health, progress. Never probes."""
        self._start = self.clock()
        watch = self.watcher.poll()
        self._watch = watch
        if watch.dead or watch.restarted:
            self.params.journal_settle_s = 0
            return self._death_verdict(watch)
        self._refresh_progress(force=True)
        health = self.prober.health(timeout=min(HEALTH_TIMEOUT_S, 2.0))
        if health.error in ("refused", "connection"):
            self.phase = "loading"
        elif health.status == 503:
            self.phase = "warming"
        elif health.error == "timeout":
            self.phase = "probing"
        else:
            self.phase = "up"
        result = self._result(False)
        result["phase"] = self.phase
        result["reason"] = "check mode: %s; /health %s; no generation sent" % (watch.description, health.describe())
        return result
