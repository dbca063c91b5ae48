"""A crash long after the deploy, past its stability window, brought back by the watchdog (issue 34).

Runs last in this scenario (it changes the lab host). The engine simulator's test hook SIGWINCH plays
the RTX PRO 6000 fault of sglang #24361: an illegal memory access in a CUDA-graph replay, the scheduler's
traceback in the journal, then the whole tree SIGKILLed. A runtime drop-in (Restart=no) stands for
systemd having given up on the unit (its start limit), so that only the watchdog can bring it back. The
watchdog, run by hand with the configured action (restart): the class of the crash in the journal and the
textfile, the unit restarted and generating again; a second crash within restart_min_interval_s is
counted and left alone (rate limit).
"""

import json
import time

import pytest
from lab_snapshot import snapshot
from prometheus_client.parser import text_string_to_metric_families

PROM = "/var/lib/node_exporter/textfile_collector/sglang_watch.prom"
WATCH_CONFIG = "/etc/sglang/sglang-watch.json"
DROP_IN = "/run/systemd/system/sglang.service.d/zz-test-no-restart.conf"
CAUSE = "illegal_address_graph_replay"
SETTLE_S = 5  # sglang_service_settle_s of this scenario (host_vars)


def failures(lab_host):
    families = {f.name: f for f in text_string_to_metric_families(lab_host.file(PROM).content_string)}
    return {s.labels["class"]: s.value for s in families["sglang_watch_failures"].samples if s.name.endswith("_total")}


def crash(lab_host):
    pid = lab_host.check_output("systemctl show --property=MainPID --value sglang.service")
    lab_host.check_output("systemctl kill --kill-whom=main -s SIGWINCH sglang.service")
    # The main process is gone at once; the unit is failed once its cgroup is empty (KillMode=mixed: what
    # is left gets SIGKILL after TimeoutStopSec, 60 s here).
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        state = lab_host.check_output("systemctl show --property=ActiveState --value sglang.service")
        if state == "failed":
            return pid
        time.sleep(0.5)
    status = lab_host.run("systemctl status sglang.service --no-pager -l; ps -eo pid,ppid,etimes,args")
    pytest.fail(f"sglang.service is {state!r} 90 s after the injected crash, not failed:\n{status.stdout}")


def generates(lab_host, within):
    deadline = time.monotonic() + within
    answer = None
    while time.monotonic() < deadline:
        answer = snapshot(lab_host)["generate_with_key"]
        if answer["status"] == 200:
            return answer
        time.sleep(1)
    pytest.fail(f"no generation within {within} s after the restart: {answer}")


@pytest.fixture(scope="module")
def no_systemd_restart(lab_host):
    assert lab_host.service("sglang").is_running
    config = json.loads(lab_host.file(WATCH_CONFIG).content_string)
    lab_host.check_output("systemctl stop sglang-watch.timer")  # this test runs the watchdog itself
    lab_host.check_output(f"rm -f {config['state_file']}")  # no earlier restart counts against the rate limit
    lab_host.check_output(f"mkdir -p {DROP_IN.rsplit('/', 1)[0]}")
    lab_host.check_output(f"printf '[Service]\\nRestart=no\\n' > {DROP_IN} && systemctl daemon-reload")
    yield config
    lab_host.run(f"rm -f {DROP_IN} && systemctl daemon-reload && systemctl reset-failed sglang.service")
    lab_host.run("systemctl start sglang.service sglang-watch.timer")


def test_a_crash_past_the_stability_window_is_restarted_by_the_watchdog_with_its_class(lab_host, no_systemd_restart):
    assert no_systemd_restart["action"] == "restart"
    pid = lab_host.check_output("systemctl show --property=MainPID --value sglang.service")
    up_s = int(lab_host.check_output(f"ps -o etimes= -p {pid}"))
    assert up_s > SETTLE_S, f"the engine has run {up_s} s: not past the deploy's stability window ({SETTLE_S} s)"
    dead_pid = crash(lab_host)
    engine_log = lab_host.check_output("journalctl -u sglang.service --no-pager -o cat -n 60")
    assert "in replay" in engine_log and "an illegal memory access was encountered" in engine_log

    run = lab_host.run("/usr/local/bin/sglang-watch")
    assert run.rc == 1, run.stdout + run.stderr
    assert f"cause={CAUSE}" in run.stdout
    assert f"sglang.service restarted (cause {CAUSE})" in run.stdout
    answer = generates(lab_host, 90)
    assert answer["body"]["meta_info"]["completion_tokens"] > 0
    assert lab_host.check_output("systemctl show --property=MainPID --value sglang.service") != dead_pid
    assert failures(lab_host) == {CAUSE: 1}


def test_a_second_crash_within_the_interval_is_counted_and_not_restarted(lab_host, no_systemd_restart):
    before = failures(lab_host)[CAUSE]
    crash(lab_host)
    run = lab_host.run("/usr/local/bin/sglang-watch")
    assert run.rc == 1, run.stdout + run.stderr
    assert "not restarted: the watchdog restarted it" in run.stdout
    assert lab_host.check_output("systemctl show --property=ActiveState --value sglang.service") == "failed"
    assert failures(lab_host)[CAUSE] == before + 1
