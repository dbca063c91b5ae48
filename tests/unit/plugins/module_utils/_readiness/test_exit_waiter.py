"""The event-driven sleep of the readiness loop: a pidfd wakes it when the watched process exits."""

import os
import subprocess
import sys
import time

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import process_state, unit_state

RUNNING = {
    "Id": "sglang.service",
    "LoadState": "loaded",
    "ActiveState": "active",
    "SubState": "running",
    "Result": "success",
    "NRestarts": "0",
    "MainPID": "4242",
    "ExecMainPID": "4242",
    "InvocationID": "aaaa",
}


def fake_proc(root, pid, state="S", start="123456"):
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    rest = [state] + ["0"] * 18 + [start] + ["0"] * 10
    (d / "stat").write_text("%d (python3) %s\n" % (pid, " ".join(rest)))


def systemctl(*states):
    """Fake runner: one `systemctl show` answer per call (the last one repeats)."""
    answers = ["\n".join("%s=%s" % kv for kv in dict(RUNNING, **s).items()) for s in states]

    def run(argv):
        return 0, answers.pop(0) if len(answers) > 1 else answers[0], ""

    return run


class Sleeps:
    def __init__(self):
        self.calls = []

    def __call__(self, seconds):
        self.calls.append(seconds)


class Recorder:
    """Stands in for an ExitWaiter: records what the watcher tells it."""

    def __init__(self):
        self.calls = []

    def watch(self, pid):
        self.calls.append(("watch", pid))

    def dead(self):
        self.calls.append(("dead",))


def test_without_pidfd_it_is_a_plain_sleep():
    sleeps = Sleeps()
    waiter = process_state.ExitWaiter(sleep=sleeps, pidfd_open=None, poller=None)
    waiter._pidfd_open = None  # a host without os.pidfd_open
    waiter.watch(1234)
    waiter(0.5)
    assert sleeps.calls == [0.5]
    assert not waiter.event_driven


def test_a_failing_pidfd_open_falls_back_to_sleeping():
    sleeps = Sleeps()

    def refuse(pid):
        raise OSError(38, "Function not implemented")

    waiter = process_state.ExitWaiter(sleep=sleeps, pidfd_open=refuse)
    waiter.watch(1234)
    waiter(0.5)
    assert sleeps.calls == [0.5]


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Python >= 3.9 on Linux >= 5.3")
def test_returns_when_the_watched_process_exits_not_at_the_end_of_the_interval():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        waiter = process_state.ExitWaiter()
        waiter.watch(child.pid)
        assert waiter.event_driven
        start = time.monotonic()
        waiter(10.0)
        took = time.monotonic() - start
        assert took < 5.0, took
        assert waiter.exited and waiter.events == 1
    finally:
        child.wait()


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="os.pidfd_open needs Python >= 3.9 on Linux >= 5.3")
def test_a_live_process_lets_the_full_interval_pass():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        waiter = process_state.ExitWaiter()
        waiter.watch(child.pid)
        start = time.monotonic()
        waiter(0.3)
        assert time.monotonic() - start >= 0.25
        assert not waiter.exited
    finally:
        child.kill()
        child.wait()


def test_after_the_exit_waits_are_short_until_the_watcher_sees_the_death():
    sleeps = Sleeps()

    class Ready:
        def register(self, fd, mask):
            pass

        def poll(self, timeout_ms):
            return [(3, 1)]

    waiter = process_state.ExitWaiter(
        sleep=sleeps, pidfd_open=lambda pid: os.open(os.devnull, os.O_RDONLY), poller=Ready
    )
    waiter.watch(99)
    waiter(0.5)  # the exit event
    assert waiter.exited and sleeps.calls == []
    waiter(0.5)  # systemd has not reaped it yet: poll again soon
    assert sleeps.calls == [waiter.fast_s]
    waiter.dead()  # the watcher saw it: the journal settle keeps its own pace
    waiter(0.25)
    assert sleeps.calls == [waiter.fast_s, 0.25]


def test_process_watcher_points_the_waiter_at_the_live_pid_and_reports_the_death(tmp_path):
    fake_proc(tmp_path, 10)
    recorder = Recorder()
    watcher = process_state.ProcessWatcher(pid=10, proc_root=str(tmp_path), waiter=recorder)
    assert watcher.poll().alive
    (tmp_path / "10" / "stat").unlink()
    assert watcher.poll().dead
    assert recorder.calls == [("watch", 10), ("dead",)]


def test_unit_watcher_points_the_waiter_at_the_main_pid_and_reports_the_death():
    recorder = Recorder()
    run = systemctl({}, {"ActiveState": "failed", "SubState": "failed", "MainPID": "0", "Result": "exit-code"})
    watcher = unit_state.UnitWatcher("sglang.service", run, waiter=recorder)
    assert watcher.poll().alive
    assert watcher.poll().dead
    assert recorder.calls == [("watch", 4242), ("dead",)]
