# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The stability window: a ready server counts as good only once it stayed up.

After readiness (a first real generation), the same watcher keeps polling the unit for
``settle_s`` seconds. The release is good only when, over the whole window:

- the unit stayed up (never failed, inactive or in ``auto-restart``);
- it kept the ``InvocationID`` and main PID readiness saw, and ``NRestarts`` did not grow;
- a second generation, sent at the end of the window, succeeds.

``window_verdict`` is the decision (pure); ``extend`` runs the window after a ready
``Readiness.run()`` and turns a failed window into a failure result of the same shape
(a death or restart is classified from this start's log like any other death).

Stdlib only: this runs on the target host.
"""

from __future__ import annotations


def window_verdict(facts):
    """(good, reason) from what the window saw.

    ``facts``: settle_s, stayed_up_s, alive (the unit at the last poll), invocation_id /
    last_invocation_id, n_restarts (how many more than at the start), second_probe (dict or None).
    """
    problem = _uptime_problem(facts) or _second_probe_problem(facts)
    if problem:
        return False, problem
    return True, "stayed up %.1fs after ready with the same invocation; the second generation succeeded" % (
        facts["stayed_up_s"]
    )


def _uptime_problem(facts):
    """Why the unit did not stay up, with the same invocation, for the whole window; None if it did."""
    settle_s = facts["settle_s"]
    stayed = facts["stayed_up_s"]
    if not facts["alive"]:
        return "the server went down %.1fs after ready, within the %gs stability window" % (stayed, settle_s)
    first, last = facts.get("invocation_id") or "", facts.get("last_invocation_id") or ""
    if first and last and first != last:
        return "the unit was restarted (invocation %s -> %s) within the %gs stability window" % (first, last, settle_s)
    if facts.get("n_restarts"):
        return "systemd restarted the unit %d time(s) within the %gs stability window" % (
            facts["n_restarts"],
            settle_s,
        )
    if stayed < settle_s:
        return "the window ended after %.1fs of %gs" % (stayed, settle_s)
    return None


def _second_probe_problem(facts):
    """Why the generation at the end of the window does not count; None if it succeeded."""
    settle_s = facts["settle_s"]
    probe = facts.get("second_probe")
    if not probe:
        return "no second generation was answered at the end of the %gs stability window" % settle_s
    if not probe.get("ok"):
        return "the second generation, %gs after ready, failed: %s" % (
            settle_s,
            probe.get("reason") or probe.get("error"),
        )
    return None


def _invocation(watch):
    return (watch.detail or {}).get("invocation_id") or ""


def _restarts(watch):
    return int((watch.detail or {}).get("n_restarts") or 0)


class Window:
    """One stability window over an existing ``Readiness`` (its watcher, prober, clock and sleep)."""

    def __init__(self, readiness, settle_s):
        self.readiness = readiness
        self.settle_s = float(settle_s)
        self.clock = readiness.clock
        self.sleep = readiness.sleep
        first = readiness._watch
        self.facts = {
            "settle_s": self.settle_s,
            "stayed_up_s": 0.0,
            "alive": True,
            "invocation_id": _invocation(first) if first is not None else "",
            "last_invocation_id": _invocation(first) if first is not None else "",
            "n_restarts": 0,
            "second_probe": None,
        }
        self._restarts_at_ready = _restarts(first) if first is not None else 0
        self._start = self.clock()

    def _observe(self, watch):
        self.facts["stayed_up_s"] = round(self.clock() - self._start, 3)
        self.facts["last_invocation_id"] = _invocation(watch) or self.facts["last_invocation_id"]
        self.facts["n_restarts"] = max(0, _restarts(watch) - self._restarts_at_ready)
        if watch.dead or watch.restarted:
            self.facts["alive"] = False
            return False
        return True

    def _wait(self):
        """Poll the unit until the window is over; the watch that ended it early, or None."""
        poll = self.readiness.params.poll_interval
        while True:
            watch = self.readiness.watcher.poll()
            self.readiness._watch = watch
            if not self._observe(watch):
                return watch
            left = self.settle_s - (self.clock() - self._start)
            if left <= 0:
                return None
            self.sleep(min(poll, left))

    def _second_probe(self):
        """Send the second generation while watching the unit; the watch if it died meanwhile."""
        readiness = self.readiness
        prober = readiness.prober
        timeout = prober.probe.timeout
        task = prober.start("generate", timeout=timeout)
        started = self.clock()
        while not task.done():
            watch = readiness.watcher.poll()
            readiness._watch = watch
            if not self._observe(watch):
                return watch
            if self.clock() - started >= timeout + readiness.params.task_slack_s:
                self.facts["second_probe"] = {
                    "ok": False,
                    "error": "timeout",
                    "reason": "no answer within %gs" % timeout,
                }
                return None
            self.sleep(readiness.params.poll_interval)
        try:
            outcome = task.result()
        except Exception as exc:  # a bug in the call must still end in a verdict
            self.facts["second_probe"] = {"ok": False, "error": "internal", "reason": repr(exc)}
            return None
        self.facts["second_probe"] = outcome.as_dict(readiness.params.api_key)
        return None

    def run(self, ready_result):
        """The ready result with ``settle`` added, or a failure result (same keys) when the window failed."""
        readiness = self.readiness
        readiness.phase = "settling"
        ended = self._wait()
        if ended is None:
            ended = self._second_probe()
        self.facts["stayed_up_s"] = round(self.clock() - self._start, 3)
        good, reason = window_verdict(self.facts)
        if good:
            readiness.phase = "ready"
            return dict(ready_result, settle=dict(self.facts, ok=True, reason=reason))
        if ended is not None:
            result = readiness._death_verdict(ended)
            result["reason"] = "%s; %s" % (reason, result["reason"])
        else:
            result = readiness._fail("probe_failed", reason)
        result["settle"] = dict(self.facts, ok=False, reason=reason)
        result["first_ready_s"] = ready_result.get("time_to_ready_s")
        return result


def extend(readiness, ready_result, settle_s):
    """Run the stability window after a ready result; a result that is not ready is returned as is."""
    if not ready_result.get("ready") or not settle_s or settle_s <= 0:
        return ready_result
    return Window(readiness, settle_s).run(ready_result)
