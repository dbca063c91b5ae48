"""What the fault trial of issue 35 found, on lab1 after the rollback checks (before the full disk, file order).

The lab's containers give root no CAP_SYS_PTRACE (podman's default capabilities): the deploy cannot read the
running server's ``/proc/<pid>/environ`` (nor ``exe``, ``cwd``, ``maps``; its ``cmdline`` it can), the way the
lab inventory's connection found it. The first test proves that precondition from inside the container, so the
drift checks below run on the unreadable path, with nothing patched:

- a failing deploy that changes the API key rolls back, verified with the restored release's own key;
- a deploy over an undisturbed service says what it could not observe, finds no drift and restarts nothing;
- a unit restarted by hand with another environment (the file put back afterwards) is drift and converges;
- a unit restarted by hand from another release (``current`` switched back afterwards) is drift and converges.
"""

import json
import time

import pytest
from deploy_process import deploy
from scenario_fixtures import last_good, main_pid, process_env

testinfra_hosts = ["ansible://specdec-rollback-lab1"]
ENV_FILE = "/etc/sglang/sglang.env"
GOOD_ENV = "/opt/sglang/state/last_good/sglang.env"
OTHER_KEY = "fault-trial-another-key-0123456789"


def deploy_lab1(lab_host, tmp_path, extra=None):
    """A deploy of lab1 with the scenario's inputs (plus ``extra``): (exit status, output, this host's report)."""
    host = lab_host.backend.container
    rc, out = deploy({**(extra or {}), "sglang_service_report_dir": str(tmp_path)}, limit=host)
    report = json.loads((tmp_path / ("%s.json" % host)).read_text())
    return rc, out, report


def cmdline(lab_host):
    return lab_host.check_output("tr '\\0' ' ' < /proc/%d/cmdline" % main_pid(lab_host))


def wait_active(lab_host, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab_host.run("systemctl is-active sglang.service").stdout.strip() == "active" and main_pid(lab_host):
            return
        time.sleep(0.5)
    pytest.fail("sglang.service did not become active within %ss" % timeout)


def test_root_in_the_lab_container_cannot_read_the_servers_environment(lab_host):
    # A plain podman exec, as the deploy's connection runs: root without CAP_SYS_PTRACE, another user's process.
    probe = lab_host.backend.run_local(
        "podman exec %s cat /proc/%s/environ", lab_host.backend.container, str(main_pid(lab_host))
    )
    assert probe.rc != 0 and "Permission denied" in probe.stderr, (probe.rc, probe.stderr)


def test_a_failing_deploy_that_changes_the_api_key_rolls_back_verified_with_the_old_key(lab_host, tmp_path):
    rc, out, report = deploy_lab1(
        lab_host,
        tmp_path,
        {"sglang_service_api_key": OTHER_KEY, "sglang_service_environment": {"SGLANG_SIM_FAULT": "crash_on_start"}},
    )
    assert rc != 0, out[-3000:]
    assert report["failure_class"] in ("crashed_on_start", "restart_loop"), out[-3000:]
    assert report["rollback"]["ready"] is True, report["rollback"]
    assert report["rollback"]["probe"]["completion_tokens"] > 0
    assert "serves again (generation verified" in out
    assert OTHER_KEY not in out and "lab-only-not-a-secret" not in out
    # The restored release serves with its own key (the server's restored --config file).
    assert 'api-key: "%s"' % OTHER_KEY not in lab_host.file("/etc/sglang/sglang.yaml").content_string


def test_an_undisturbed_service_is_left_running_and_what_was_not_observed_is_said(lab_host, tmp_path):
    pid = main_pid(lab_host)
    rc, out, report = deploy_lab1(lab_host, tmp_path)
    assert rc == 0, out[-3000:]
    assert (report["changed"], report["drift"]) == (False, []), report["drift"]
    assert main_pid(lab_host) == pid
    assert "environ" in report["observed"]["unreadable"]
    assert report["observed"]["unreadable_reasons"]["environ"] == "Permission denied"
    assert "not observed: the running process's cwd, environ, exe, maps (Permission denied)" in out
    assert "environ" in last_good(lab_host)["observed"]["unreadable"]


def test_a_unit_restarted_by_hand_with_another_environment_is_drift_and_converges(lab_host, tmp_path):
    lab_host.check_output("printf 'SPECDEC_BY_HAND=\"1\"\\n' >> %s && systemctl restart sglang.service" % ENV_FILE)
    wait_active(lab_host)
    assert process_env(lab_host).get("SPECDEC_BY_HAND") == "1"
    time.sleep(1.1)
    lab_host.check_output("cp %s %s" % (GOOD_ENV, ENV_FILE))  # the file as the record knows it again
    rc, out, report = deploy_lab1(lab_host, tmp_path)
    assert rc == 0, out[-3000:]
    assert report["changed"] is True, report
    assert any(
        reason.startswith("%s changed at " % ENV_FILE) and "its environment cannot be read" in reason
        for reason in report["drift"]
    ), report["drift"]
    assert "(restarted and verified)" in out
    assert "SPECDEC_BY_HAND" not in process_env(lab_host)
    assert "environ" in report["observed"]["unreadable"]


def test_a_unit_restarted_by_hand_from_another_release_switched_back_is_drift_and_converges(lab_host, tmp_path):
    record = last_good(lab_host)
    serving = record["release_id"]
    other = next(name for name in lab_host.file("/opt/sglang/releases").listdir() if name != serving)
    lab_host.check_output(
        "ln -sfn /opt/sglang/releases/%s /opt/sglang/current && systemctl restart sglang.service" % other
    )
    wait_active(lab_host)
    assert "/opt/sglang/releases/%s/" % other in cmdline(lab_host)
    lab_host.check_output("ln -sfn /opt/sglang/releases/%s /opt/sglang/current" % serving)
    rc, out, report = deploy_lab1(lab_host, tmp_path)
    assert rc == 0, out[-3000:]
    assert report["changed"] is True
    assert "the running process runs release %s, the record %s" % (other, serving) in report["drift"]
    assert "/opt/sglang/releases/%s/" % serving in cmdline(lab_host)
    assert last_good(lab_host)["observed"]["release"] == serving
