"""The generation watchdog after a good deploy (runs after the other tests of this scenario).

The timer runs sglang-watch.service every 10 s (timeout 20 s, action report). Faults are injected into the
running engine simulator by signal (its test hooks): SIGUSR2 collapses the accept length, SIGUSR1 wedges it.
- the collapse is seen by the timer within interval + 2 x timeout (SEEN_WITHIN), journaled with class and hint,
  written to the textfile, and (action report) the unit is left alone;
- the wedge is seen the same way; the watchdog run by hand with --action restart restarts the unit and
  generation comes back.
"""

import time

import pytest
from lab_snapshot import snapshot
from prometheus_client.parser import text_string_to_metric_families

INTERVAL, TIMEOUT = 10, 20
# A fault is seen by the run after the one under way when it starts (that run may still see the server
# healthy and last up to TIMEOUT; the next starts INTERVAL after it ends and needs up to TIMEOUT to judge);
# 10 s more for a loaded machine (CI runs two lab units on two cores).
SEEN_WITHIN = INTERVAL + 2 * TIMEOUT + 10
PROM = "/var/lib/node_exporter/textfile_collector/sglang_watch.prom"


def main_pid(lab_host):
    return lab_host.check_output("systemctl show --property=MainPID --value sglang.service")


def textfile(lab_host):
    families = {f.name: f for f in text_string_to_metric_families(lab_host.file(PROM).content_string)}
    verdict = next(s.labels["class"] for s in families["sglang_watch_verdict"].samples if s.value == 1)
    return families, verdict


def wait_verdict(lab_host, want, within):
    deadline = time.monotonic() + within
    seen = None
    while time.monotonic() < deadline:
        if lab_host.file(PROM).exists:
            _, seen = textfile(lab_host)
            if seen == want:
                return time.monotonic()
        time.sleep(0.5)
    pytest.fail("the watchdog's verdict was %r, not %r, for %s s" % (seen, want, within))


@pytest.fixture(scope="module")
def healthy(lab_host):
    assert lab_host.service("sglang-watch.timer").is_running
    wait_verdict(lab_host, "ok", SEEN_WITHIN)
    return main_pid(lab_host)


def test_a_healthy_server_is_ok_in_the_textfile(lab_host, healthy):
    families, verdict = textfile(lab_host)
    assert verdict == "ok"
    assert families["sglang_watch_probe_ok"].samples[0].value == 1
    assert families["sglang_watch_accept_length"].samples[0].value > 2
    release = families["sglang_watch_release_info"].samples[0].labels["release_id"]
    assert lab_host.check_output("readlink /opt/sglang/current").endswith("/" + release)


def test_an_accept_length_collapse_is_seen_and_report_leaves_the_unit_alone(lab_host, healthy):
    injected = time.monotonic()
    lab_host.check_output("systemctl kill --kill-whom=main -s SIGUSR2 sglang.service")
    seen = wait_verdict(lab_host, "low_acceptance", SEEN_WITHIN)
    assert seen - injected <= SEEN_WITHIN
    journal = lab_host.check_output("journalctl -u sglang-watch.service --no-pager -o cat")
    assert "verdict=low_acceptance" in journal and "hint=speculative accept length is below" in journal
    assert "left alone (action report)" in journal
    assert main_pid(lab_host) == healthy


def test_a_wedge_is_seen_and_a_restart_brings_generation_back(lab_host, healthy):
    injected = time.monotonic()
    lab_host.check_output("systemctl kill --kill-whom=main -s SIGUSR1 sglang.service")
    seen = wait_verdict(lab_host, "wedged", SEEN_WITHIN)
    assert seen - injected <= SEEN_WITHIN
    wedged_pid = main_pid(lab_host)
    run = lab_host.run("/usr/local/bin/sglang-watch --action restart")
    assert run.rc == 1, run.stdout + run.stderr
    assert "verdict=wedged" in run.stdout and "sglang.service restarted" in run.stdout
    assert main_pid(lab_host) != wedged_pid
    deadline = time.monotonic() + 60  # the restarted server loads (slower on a loaded machine)
    while time.monotonic() < deadline:
        answer = snapshot(lab_host)["generate_with_key"]
        if answer["status"] == 200:
            break
        time.sleep(1)
    assert answer["status"] == 200 and answer["body"]["meta_info"]["completion_tokens"] > 0
    wait_verdict(lab_host, "ok", SEEN_WITHIN)
