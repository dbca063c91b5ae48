"""systemctl show parsing and the unit watcher's dead / restarted / alive decisions."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import unit_state

RUNNING = {
    "Id": "sglang.service",
    "LoadState": "loaded",
    "ActiveState": "active",
    "SubState": "running",
    "Result": "success",
    "NRestarts": "0",
    "MainPID": "4242",
    "ExecMainPID": "4242",
    "ExecMainStatus": "0",
    "ExecMainCode": "0",
    "InvocationID": "aaaa",
    "InactiveExitTimestampMonotonic": "5000000",
}


def show(**overrides):
    props = dict(RUNNING, **overrides)
    return "\n".join("%s=%s" % kv for kv in props.items()) + "\n"


class Systemctl:
    """Fake command runner: answers `systemctl show` from a list of property sets, and journalctl."""

    def __init__(self, *states, journal_text="", rc=0):
        self.states = list(states)
        self.journal_text = journal_text
        self.rc = rc
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        if argv[0] == "journalctl":
            return 0, self.journal_text, ""
        if self.rc:
            return self.rc, "", "System has not been booted with systemd as init system (PID 1). Can't operate."
        state = self.states.pop(0) if len(self.states) > 1 else self.states[0]
        return 0, state, ""


def test_show_command_asks_for_every_property_it_parses():
    argv = unit_state.show_command("sglang.service")
    assert argv[:3] == ["systemctl", "show", "sglang.service"]
    props = argv[-1].split("=", 1)[1].split(",")
    for name in ("ActiveState", "SubState", "NRestarts", "ExecMainPID", "ExecMainStatus", "InvocationID"):
        assert name in props


def test_parse_show_keeps_values_with_equals_signs():
    assert unit_state.parse_show("A=b=c\nInvocationID=\n\nnoise") == {"A": "b=c", "InvocationID": ""}


def test_failed_unit_is_dead_with_exit_details():
    state = unit_state.UnitState(
        "u",
        unit_state.parse_show(
            show(
                ActiveState="failed",
                SubState="failed",
                Result="signal",
                MainPID="0",
                ExecMainStatus="9",
                ExecMainCode="2",
            )
        ),
    )
    assert state.dead
    assert state.exec_main_code == "killed" and state.exec_main_status == 9
    assert "failed/failed" in state.describe() and "result signal" in state.describe()
    assert state.as_dict()["exec_main_code"] == "killed"


@pytest.mark.parametrize(
    ("active", "sub", "dead"),
    [
        ("active", "running", False),
        ("activating", "start", False),
        ("reloading", "reload", False),
        ("failed", "failed", True),
        ("inactive", "dead", True),
        ("deactivating", "stop-sigterm", True),
        ("active", "exited", True),
        ("activating", "auto-restart", False),
    ],
)
def test_dead_means_the_main_process_is_gone(active, sub, dead):
    state = unit_state.UnitState("u", unit_state.parse_show(show(ActiveState=active, SubState=sub)))
    assert state.dead is dead


def test_start_epoch_converts_systemds_monotonic_stamp():
    state = unit_state.UnitState("u", unit_state.parse_show(show()))
    # started at monotonic 5 s; now monotonic 15 s, epoch 1000 -> started at epoch 990
    assert state.start_epoch(now_epoch=1000.0, now_monotonic=15.0) == pytest.approx(990.0)
    assert unit_state.UnitState("u", {}).start_epoch() is None


def test_systemctl_failure_says_to_use_pid_mode():
    with pytest.raises(RuntimeError, match="pid/pidfile"):
        unit_state.read_unit_state("u", Systemctl(show(), rc=1))


def test_watcher_alive_while_running():
    watcher = unit_state.UnitWatcher("sglang.service", Systemctl(show(), show()))
    assert watcher.poll().alive
    watch = watcher.poll()
    assert watch.alive and not watch.dead and not watch.restarted
    assert watch.detail["main_pid"] == 4242


def test_watcher_reports_death():
    watcher = unit_state.UnitWatcher(
        "sglang.service", Systemctl(show(), show(ActiveState="failed", SubState="failed", MainPID="0"))
    )
    watcher.poll()
    watch = watcher.poll()
    assert watch.dead and not watch.alive and not watch.not_started


def test_watcher_detects_a_restart_by_nrestarts():
    watcher = unit_state.UnitWatcher("u", Systemctl(show(), show(NRestarts="1")))
    watcher.poll()
    watch = watcher.poll()
    assert watch.restarted and "NRestarts 0 -> 1" in watch.description


def test_watcher_detects_a_restart_by_main_pid_or_invocation():
    watcher = unit_state.UnitWatcher("u", Systemctl(show(), show(MainPID="5555", ExecMainPID="5555")))
    watcher.poll()
    assert "main PID 4242 -> 5555" in watcher.poll().description
    watcher = unit_state.UnitWatcher("u", Systemctl(show(), show(InvocationID="bbbb")))
    watcher.poll()
    assert "invocation aaaa -> bbbb" in watcher.poll().description


def test_watcher_detects_auto_restart_at_once():
    watcher = unit_state.UnitWatcher("u", Systemctl(show(ActiveState="activating", SubState="auto-restart")))
    watch = watcher.poll()
    assert watch.restarted and not watch.dead


def test_unknown_unit_is_not_started():
    watcher = unit_state.UnitWatcher(
        "nope.service", Systemctl(show(LoadState="not-found", ActiveState="inactive", SubState="dead", InvocationID=""))
    )
    watch = watcher.poll()
    assert watch.dead and watch.not_started


def test_never_started_unit_is_not_started():
    watcher = unit_state.UnitWatcher(
        "u", Systemctl(show(ActiveState="inactive", SubState="dead", InvocationID="", MainPID="0", ExecMainPID="0"))
    )
    assert watcher.poll().not_started


def test_read_log_uses_the_first_invocation_seen_even_after_a_restart():
    runner = Systemctl(show(), show(InvocationID="bbbb", NRestarts="1"), journal_text="the first start\n")
    watcher = unit_state.UnitWatcher("u", runner)
    watcher.poll()
    watcher.poll()
    assert watcher.read_log() == "the first start\n"
    journal_calls = [c for c in runner.calls if c[0] == "journalctl"]
    assert "_SYSTEMD_INVOCATION_ID=aaaa" in journal_calls[0]


def test_dead_watch_carries_the_exit_time_for_death_to_verdict():
    watcher = unit_state.UnitWatcher(
        "u",
        Systemctl(
            show(),
            show(ActiveState="failed", SubState="failed", MainPID="0", ExecMainExitTimestampMonotonic="12500000"),
        ),
    )
    assert watcher.poll().exited_at is None
    assert watcher.poll().exited_at == 12.5
