"""`lab/bin/lab up` gives a lab host that runs, whatever an earlier run left under the same name.

A run that ends with SIGKILL (a CI job whose session is ended, a developer's Ctrl-\\) kills the container's
processes and its conmon behind podman's back: podman's state still reads "running", and every
`podman exec` into it fails with "cannot exec in a stopped container". The next suite that brings up a
host of that name must replace it, not fail on it (a fresh-clone CI once did, for 29 tests).
"""

import os
import signal

import pytest
from private_lab import LAB_BIN, PrivateLab

LAB = PrivateLab("specdec-labtool-")


@pytest.fixture(scope="module")
def lab():
    LAB.up()
    try:
        yield LAB
    finally:
        LAB.down()


def container_id(lab):
    return lab.sh(["podman", "inspect", "-f", "{{.Id}}", lab.container]).stdout.strip()


def systemd_state(lab):
    return lab.on_host("systemctl is-system-running || true").stdout.strip()


def test_a_container_killed_behind_podmans_back_is_replaced(lab):
    before = container_id(lab)
    pids = lab.sh(["podman", "inspect", "-f", "{{.State.Pid}} {{.State.ConmonPid}}", lab.container]).stdout.split()
    for pid in pids:  # the container's PID 1 and its conmon: processes this test's fixture started
        os.kill(int(pid), signal.SIGKILL)
    assert lab.sh(["podman", "exec", lab.container, "true"], check=False).returncode != 0
    out = lab.sh([LAB_BIN, "up", "1"]).stdout
    assert "replacing it" in out, out
    assert container_id(lab) != before
    assert systemd_state(lab) in ("running", "degraded")


def test_a_stopped_container_is_replaced_and_a_running_one_kept(lab):
    lab.sh(["podman", "stop", "-t", "0", lab.container])
    assert "replacing it" in lab.sh([LAB_BIN, "up", "1"]).stdout
    running = container_id(lab)
    out = lab.sh([LAB_BIN, "up", "1"]).stdout
    assert "already exists" in out and "replacing" not in out, out
    assert container_id(lab) == running
    assert systemd_state(lab) in ("running", "degraded")
