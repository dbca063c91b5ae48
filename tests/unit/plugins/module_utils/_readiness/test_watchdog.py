"""The watchdog: readiness's verdict on a live server, the action it takes, the journal lines and the textfile."""

import io as io_mod
import json
import time
import urllib.error

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import watchdog
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "ActiveState=active\nSubState=running\nMainPID=4242\nNRestarts=0\nInvocationID=abc\nResult=success\n"
STOPPED = "ActiveState=inactive\nSubState=dead\nMainPID=0\nNRestarts=0\nInvocationID=\nResult=success\n"


def generated(accept=3.2, tokens=16):
    return {
        "text": " hi",
        "output_ids": list(range(tokens)),
        "meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": tokens, "e2e_latency": 0.05,
                      "spec_accept_length": accept, "spec_verify_ct": 5},
    }  # fmt: skip


class Response:
    def __init__(self, status, body):
        self.status = status
        self.payload = json.dumps(body).encode()

    def getcode(self):
        return self.status

    def read(self):
        return self.payload


class FakeHost:
    """systemctl, journalctl, HTTP and files of one host; ``server`` says how the engine answers."""

    def __init__(self, server="healthy", show=RUNNING, files=None):
        self.server = server
        self.show = show
        self.files = dict(files or {})
        self.files.setdefault("/etc/sglang/sglang.yaml", 'api-key: "k"\n')
        self.commands = []
        self.lines = []
        self.clock = time.monotonic
        self.sleep = time.sleep
        self.now = 1_800_000_000.0
        self.port_check = None
        self.mtimes = {}
        self.enabled = True

    def time(self):
        return self.now

    def run_command(self, argv):
        self.commands.append(argv)
        if argv[:2] == ["systemctl", "show"]:
            return 0, self.show, ""
        if argv[:2] == ["systemctl", "restart"]:
            return 0, "", ""
        if argv[:2] == ["systemctl", "is-enabled"]:
            return (0, "enabled\n", "") if self.enabled else (1, "disabled\n", "")
        return 0, "", ""  # journalctl

    def open_url(self, url, data=None, headers=None, method=None, timeout=None, **kwargs):
        assert headers.get("Authorization") == "Bearer k"
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        if self.server == "wedged" and path in ("/generate", "/health", "/get_server_info"):
            time.sleep(timeout)
            raise TimeoutError("timed out")
        if path == "/health":
            return Response(200, {})
        if path == "/v1/models":
            return Response(200, {"data": [{"id": "m"}]})
        if path == "/generate":
            time.sleep(0.02)
            return Response(200, generated(accept=1.05 if self.server == "collapsed" else 3.2))
        if path == "/get_server_info":
            return Response(200, {"speculative_algorithm": "DFLASH"})
        raise urllib.error.HTTPError(url, 404, "nf", {}, io_mod.BytesIO(b"{}"))

    def read(self, path):
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def readlink(self, path):
        if path == "/opt/sglang/current":
            return "/opt/sglang/releases/235ee99ec00b"
        raise OSError(path)

    def mtime(self, path):
        if path not in self.mtimes:
            raise FileNotFoundError(path)
        return self.mtimes[path]

    def write(self, path, text, mode):
        self.files[path] = text

    def log(self, line):
        self.lines.append(line)


def config(**overrides):
    base = {
        "unit": "sglang.service",
        "api_key_file": "/etc/sglang/sglang.yaml",
        "timeout_s": 4,
        "probe_timeout_s": 0.5,
        "min_accept_length": 1.5,
        "expect_speculative_algorithm": "DFLASH",
        "textfile_dir": "/var/lib/node_exporter",
        "state_file": "/var/lib/sglang-watch/state.json",
        "last_good_record": "/opt/sglang/state/last_good/deploy.json",
        "current_link": "/opt/sglang/current",  # the service role always writes it (sglang-watch.json.j2)
    }
    base.update(overrides)
    return watchdog.load_config(json.dumps(base))


def metrics(host):
    families = {
        f.name: f for f in text_string_to_metric_families(host.files["/var/lib/node_exporter/sglang_watch.prom"])
    }
    return families


def test_a_healthy_server_is_ok_and_the_textfile_parses_with_every_metric():
    host = FakeHost(files={"/opt/sglang/state/last_good/deploy.json": '{"time_to_ready_s": 41.5}'})
    verdict = watchdog.run_once(config(), host)
    assert verdict["ok"] is True and verdict["verdict"] == "ok" and verdict["action_taken"] == "none"
    assert verdict["accept_length"] == 3.2
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)
    families = metrics(host)
    assert families["sglang_watch_probe_ok"].samples[0].value == 1
    assert families["sglang_watch_accept_length"].samples[0].value == 3.2
    assert families["sglang_watch_tokens_per_second"].samples[0].value > 0
    assert families["sglang_watch_time_to_ready_seconds"].samples[0].value == 41.5
    assert families["sglang_watch_release_info"].samples[0].labels == {
        "release_id": "235ee99ec00b",
        "unit": "sglang.service",
    }
    verdicts = {s.labels["class"]: s.value for s in families["sglang_watch_verdict"].samples}
    assert verdicts["ok"] == 1 and sum(verdicts.values()) == 1 and "wedged" in verdicts
    assert families["sglang_watch_restarts"].type == "counter"
    assert host.lines[0].startswith("<6>sglang-watch: sglang.service verdict=ok release=235ee99ec00b")


def test_an_accept_length_collapse_is_low_acceptance_and_report_leaves_the_unit_alone():
    host = FakeHost(server="collapsed")
    verdict = watchdog.run_once(config(action="report"), host)
    assert verdict["verdict"] == "low_acceptance" and verdict["action_taken"] == "none"
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)
    assert host.lines[0].startswith("<3>sglang-watch: sglang.service verdict=low_acceptance")
    assert "hint=speculative accept length is below" in host.lines[0]
    assert "left alone (action report)" in host.lines[1]
    verdicts = {s.labels["class"]: s.value for s in metrics(host)["sglang_watch_verdict"].samples}
    assert verdicts["low_acceptance"] == 1 and verdicts["ok"] == 0


def test_a_wedge_is_seen_within_the_watch_timeout_and_restart_is_rate_limited():
    host = FakeHost(server="wedged")
    started = time.monotonic()
    verdict = watchdog.run_once(config(action="restart", restart_min_interval_s=600), host)
    assert time.monotonic() - started < 4 + 1
    assert verdict["verdict"] == "wedged" and verdict["action_taken"] == "restarted"
    assert ["systemctl", "restart", "sglang.service"] in host.commands
    assert verdict["restarts_total"] == 1
    host.now += 60  # the next run, a minute later: still wedged, but restarted 60 s ago
    host.commands.clear()
    again = watchdog.run_once(config(action="restart", restart_min_interval_s=600), host)
    assert again["action_taken"] == "restart_rate_limited"
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)
    assert any("not restarted: the watchdog restarted it 60 s ago" in line for line in host.lines)
    assert metrics(host)["sglang_watch_restarts"].samples[0].value == 1


def test_a_cleanly_stopped_unit_is_not_restarted():
    host = FakeHost(show=STOPPED)
    verdict = watchdog.run_once(config(action="restart"), host)
    assert verdict["verdict"] == "stopped" and verdict["action_taken"] == "none"
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)


def test_a_dead_engine_is_reported_with_its_class():
    host = FakeHost(
        show=RUNNING.replace("ActiveState=active", "ActiveState=failed")
        .replace("SubState=running", "SubState=failed")
        .replace("Result=success", "Result=signal")
    )
    verdict = watchdog.run_once(config(action="report"), host)
    assert verdict["ok"] is False and verdict["verdict"] in ("died_while_serving", "crashed_on_start")
    assert host.lines[0].startswith("<3>sglang-watch: sglang.service verdict=")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"action": "reboot"}, "action='reboot'; allowed: report, restart"),
        ({"timeout_s": 5, "probe_timeout_s": 5}, "must be above probe_timeout_s"),
        ({"surprise": 1}, "unknown keys ['surprise']"),
    ],
)
def test_a_bad_configuration_names_the_key(overrides, message):
    with pytest.raises(watchdog.ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config(**overrides)


def test_main_exits_1_on_a_failure_and_the_action_can_be_overridden_by_hand():
    host = FakeHost(server="collapsed")
    host.files["/etc/sglang/sglang-watch.json"] = json.dumps({"action": "restart", "min_accept_length": 1.5,
                                                              "api_key_file": "/etc/sglang/sglang.yaml",
                                                              "timeout_s": 4, "probe_timeout_s": 0.5})  # fmt: skip
    assert watchdog.main(["--config", "/etc/sglang/sglang-watch.json", "--action", "report"], io=host) == 1
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)
    assert watchdog.main(["--config", "/nope.json"], io=host) == 2


def test_a_deploy_in_progress_is_not_judged_unless_its_marker_is_stale():
    host = FakeHost(server="wedged")
    host.mtimes["/run/sglang-deploying"] = host.now - 30
    cfg = config(action="restart", deploy_marker="/run/sglang-deploying", deploy_marker_max_age_s=600)
    verdict = watchdog.run_once(cfg, host)
    assert verdict["verdict"] == "deploying" and verdict["action_taken"] == "none"
    assert host.commands == []  # not even systemctl show
    host.mtimes["/run/sglang-deploying"] = host.now - 601  # a deploy that died long ago
    assert watchdog.run_once(cfg, host)["verdict"] == "wedged"


def test_a_failed_unit_a_deploy_left_disabled_is_not_restarted():
    failed = RUNNING.replace("ActiveState=active", "ActiveState=failed").replace("SubState=running", "SubState=failed")
    host = FakeHost(show=failed.replace("Result=success", "Result=signal"))
    host.enabled = False
    verdict = watchdog.run_once(config(action="restart"), host)
    assert verdict["verdict"] == "stopped" and verdict["action_taken"] == "none"
    assert ["systemctl", "is-enabled", "sglang.service"] in host.commands
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)


REPLAY_CRASH = (
    "[2026-12-05 03:12:09 TP0] The server is fired up and ready to roll!\n"
    "[2026-12-05 06:41:17 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/opt/sglang/current/venv/lib/python3.12/site-packages/sglang/srt/model_executor/runner/'
    'decode_cuda_graph_runner.py", line 1233, in replay\n'
    "    output = self.backend.replay(self._replay_graph_key, forward_batch)\n"
    '  File "/opt/sglang/current/venv/lib/python3.12/site-packages/flashinfer/prefill.py", line 1706, in plan\n'
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
    "[2026-12-05 06:41:17] Received sigquit from a child process. It usually means the child failed.\n"
)
GAVE_UP = (
    RUNNING.replace("ActiveState=active", "ActiveState=failed")
    .replace("SubState=running", "SubState=failed")
    .replace("Result=success", "Result=start-limit-hit")
)


class CrashedHost(FakeHost):
    """A unit that crashed hours after its deploy and that systemd gave up on (start limit)."""

    def run_command(self, argv):
        if argv and argv[0] == "journalctl":
            self.commands.append(argv)
            return 0, REPLAY_CRASH, ""
        return super().run_command(argv)


def test_a_crash_hours_after_the_deploy_is_restarted_with_its_cause_in_the_journal_and_the_metrics():
    host = CrashedHost(show=GAVE_UP)
    verdict = watchdog.run_once(config(action="restart", restart_min_interval_s=900), host)
    assert verdict["ok"] is False and verdict["cause_class"] == "illegal_address_graph_replay"
    assert verdict["action_taken"] == "restarted"
    # reset-failed first: a unit that hit its start limit refuses a plain restart
    calls = [c[:2] for c in host.commands if c[0] == "systemctl" and c[1] in ("reset-failed", "restart")]
    assert calls == [["systemctl", "reset-failed"], ["systemctl", "restart"]]
    line = host.lines[0]
    assert line.startswith(
        "<3>sglang-watch: sglang.service verdict=illegal_address_graph_replay cause=illegal_address_graph_replay"
        " release=235ee99ec00b"
    )
    assert "hint=illegal address in a CUDA-graph replay" in line
    assert "restarted (cause illegal_address_graph_replay)" in host.lines[1]
    families = metrics(host)
    failures = {
        s.labels["class"]: s.value for s in families["sglang_watch_failures"].samples if s.name.endswith("_total")
    }
    assert failures == {"illegal_address_graph_replay": 1}
    last = families["sglang_watch_last_failure_timestamp_seconds"].samples[0]
    assert (last.labels["class"], last.value) == ("illegal_address_graph_replay", host.now)

    # Five minutes later it crashed again: counted, not restarted (rate limit).
    host.now += 300
    host.commands.clear()
    again = watchdog.run_once(config(action="restart", restart_min_interval_s=900), host)
    assert again["action_taken"] == "restart_rate_limited"
    assert not any(c[:2] == ["systemctl", "restart"] for c in host.commands)
    failures = {s.labels["class"]: s.value for s in metrics(host)["sglang_watch_failures"].samples
                if s.name.endswith("_total")}  # fmt: skip
    assert failures == {"illegal_address_graph_replay": 2}

    # After the interval the next crash is restarted again.
    host.now += 900
    third = watchdog.run_once(config(action="restart", restart_min_interval_s=900), host)
    assert third["action_taken"] == "restarted" and third["restarts_total"] == 2


def test_a_unit_systemd_is_restarting_names_the_cause_and_its_hint_beside_restart_loop():
    host = CrashedHost(
        show=RUNNING.replace("SubState=running", "SubState=auto-restart").replace("NRestarts=0", "NRestarts=3")
    )
    verdict = watchdog.run_once(config(action="report"), host)
    assert verdict["verdict"] == "restart_loop" and verdict["cause_class"] == "illegal_address_graph_replay"
    assert " cause=illegal_address_graph_replay " in host.lines[0]
    assert "cause_hint=illegal address in a CUDA-graph replay" in host.lines[0]


class StoppedMidProbeHost(FakeHost):
    """An operator runs `systemctl stop` while the watchdog's probe is in flight: the unit reads running when the
    run starts, the generation then finds nothing listening, and the unit reads stopped cleanly from then on."""

    def open_url(self, url, data=None, headers=None, method=None, timeout=None, **kwargs):
        if url.endswith("/generate") or self.show is STOPPED:
            self.show = STOPPED
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return super().open_url(url, data=data, headers=headers, method=method, timeout=timeout, **kwargs)


def assert_left_alone(host):
    """The run neither restarted the unit (nor cleared its failed state) nor logged a failure."""
    assert not any(c[:2] in (["systemctl", "restart"], ["systemctl", "reset-failed"]) for c in host.commands)
    assert not any(line.startswith("<3>") for line in host.lines), host.lines


def test_a_unit_stopped_while_the_probe_runs_is_not_restarted():
    """The field's race (molecule gateway, 2026-12-06): `systemctl stop` during a watchdog run was judged a dead
    server and restarted within the second, undoing the operator's stop."""
    host = StoppedMidProbeHost()
    verdict = watchdog.run_once(config(action="restart"), host)
    assert verdict["verdict"] == "stopped" and verdict["action_taken"] == "none", verdict
    assert "while the watchdog probed it" in verdict["reason"]
    assert_left_alone(host)


def test_a_server_that_dies_while_its_unit_stays_up_is_still_restarted():
    """The second look at the unit spares only a unit that is down on purpose: an engine that stops answering while
    systemd still counts the unit active is restarted as before."""
    host = StoppedMidProbeHost()
    host.open_url = lambda url, **kwargs: (_ for _ in ()).throw(urllib.error.URLError(ConnectionRefusedError(111, "x")))
    verdict = watchdog.run_once(config(action="restart"), host)
    assert verdict["ok"] is False and verdict["verdict"] != "stopped", verdict
    assert ["systemctl", "restart", "sglang.service"] in host.commands


class RestartedMidProbeHost(FakeHost):
    """An operator runs `systemctl restart` while the watchdog's probe is in flight: the generation finds the old
    process gone, and the unit reads running again as a new invocation that systemd's Restart= did not make."""

    def __init__(self, n_restarts_after=0, **kwargs):
        super().__init__(**kwargs)
        self.n_restarts_after = n_restarts_after

    def open_url(self, url, data=None, headers=None, method=None, timeout=None, **kwargs):
        if url.endswith("/generate"):
            self.show = (
                RUNNING.replace("InvocationID=abc", "InvocationID=def")
                .replace("MainPID=4242", "MainPID=4343")
                .replace("NRestarts=0", "NRestarts=%d" % self.n_restarts_after)
            )
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        return super().open_url(url, data=data, headers=headers, method=method, timeout=timeout, **kwargs)


def test_a_unit_restarted_by_hand_while_the_probe_runs_is_not_judged_or_restarted_again():
    """The gap the stop fix left: a `systemctl restart` during a run drew a second restart from the watchdog,
    cutting the new start short."""
    host = RestartedMidProbeHost()
    verdict = watchdog.run_once(config(action="restart"), host)
    assert verdict["verdict"] == "restarted" and verdict["action_taken"] == "none", verdict
    assert "invocation abc -> def" in verdict["reason"]
    assert_left_alone(host)
    assert json.loads(host.files["/var/lib/sglang-watch/state.json"]).get("failures_by_cause", {}) == {}
    fresh = RestartedMidProbeHost()  # run by the timer: not judged is not a failed oneshot
    fresh.files["/etc/sglang/sglang-watch.json"] = json.dumps(
        {
            "action": "restart",
            "api_key_file": "/etc/sglang/sglang.yaml",
            "timeout_s": 4,
            "probe_timeout_s": 0.5,
            "current_link": "/opt/sglang/current",
        }
    )
    assert watchdog.main(["--config", "/etc/sglang/sglang-watch.json"], io=fresh) == 0


def test_a_restart_systemd_made_after_a_crash_during_the_probe_is_still_judged():
    """A new invocation with NRestarts grown is systemd's Restart= after the process died: a failure, counted."""
    host = RestartedMidProbeHost(n_restarts_after=1)
    verdict = watchdog.run_once(config(action="report"), host)
    assert verdict["ok"] is False and verdict["verdict"] not in watchdog.NOT_JUDGED, verdict
    assert any(line.startswith("<3>") for line in host.lines), host.lines
