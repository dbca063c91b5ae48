"""Readiness replays of a real sglang log: a fake clock, a watcher whose process dies at its second
poll (its log the real file), and a prober whose every call is refused (the port is closed)."""

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import http_probe
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import WatchState


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class DeadAfterOnePoll:
    """A process watcher whose process is gone at the second poll; the log is the real file."""

    kind = "process"

    def __init__(self, text):
        self.text = text
        self.polls = 0

    def poll(self):
        self.polls += 1
        if self.polls > 1:
            return WatchState(False, dead=True, description="process 4242 is gone", detail={"pid": 4242})
        return WatchState(True, description="process 4242 is running", detail={"pid": 4242})

    def read_log(self, tail_lines=None):
        return self.text


class Refused:
    """No HTTP server: every call is refused (the port is closed)."""

    probe = http_probe.ProbeSettings()

    def start(self, name, **kwargs):
        result = http_probe.HttpResult("http://127.0.0.1:1/" + name, error="refused", detail="refused")

        class Done:
            def done(self):
                return True

            def result(self):
                return result

        return Done()
