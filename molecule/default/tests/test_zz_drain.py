"""Drain: streamed generations in flight while a deploy restarts the unit all complete (0 failed).

Runs after test_default.py (file order). A client inside the lab host keeps 4 streamed /generate
requests going, each sent only while /health answers 200 (as a load balancer would); meanwhile a
deploy with a changed environment restarts sglang.service. KillMode=mixed sends SIGTERM to the main
process only, which finishes every generation in flight before it exits. Every request that was sent
must end with its final chunk and [DONE]; connections refused while no server listens never started.
"""

import json
import os
import pathlib
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
STOP = "/var/tmp/molecule-drain-client.stop"

CLIENT = r"""
import json, os, sys, threading, time, http.client
KEY = ""
for line in open("/etc/sglang/sglang.yaml"):
    if line.startswith("api-key:"):
        KEY = json.loads(line.split(":", 1)[1])
STOP = sys.argv[1]
counts = {"complete": 0, "not_sent": 0, "failed": 0}
failures = []
lock = threading.Lock()

def health():
    try:
        c = http.client.HTTPConnection("127.0.0.1", 30000, timeout=2)
        c.request("GET", "/health")
        return c.getresponse().status == 200
    except OSError:
        return False

def one():
    if not health():
        return "not_sent", None
    try:
        c = http.client.HTTPConnection("127.0.0.1", 30000, timeout=30)
        c.connect()
    except OSError:
        return "not_sent", None
    body = json.dumps({"text": "Say hi.", "sampling_params": {"max_new_tokens": 64}, "stream": True})
    try:
        c.request("POST", "/generate", body=body,
                  headers={"content-type": "application/json", "authorization": "Bearer " + KEY})
        r = c.getresponse()
        if r.status != 200:
            return "failed", "HTTP %d" % r.status
        last, done = None, False
        for raw in r:
            line = raw.strip()
            if line == b"data: [DONE]":
                done = True
                break
            if line.startswith(b"data: "):
                last = json.loads(line[6:])
        if done and last and last["meta_info"].get("finish_reason"):
            return "complete", None
        return "failed", "ended without [DONE]: %r" % ((last or {}).get("meta_info"),)
    except Exception as exc:
        return "failed", repr(exc)

def worker():
    while not os.path.exists(STOP):
        outcome, why = one()
        with lock:
            counts[outcome] += 1
            if why:
                failures.append(why)
        if outcome == "not_sent":
            time.sleep(0.05)

threads = [threading.Thread(target=worker) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"counts": counts, "failures": failures[:10]}))
"""


def show(lab_host):
    out = lab_host.check_output("systemctl show --property=MainPID,InvocationID sglang.service")
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.fixture(scope="module")
def drained(lab_host):
    name = lab_host.backend.container
    lab_host.check_output("rm -f %s" % STOP)
    before = show(lab_host)
    since = lab_host.check_output("date '+%Y-%m-%d %H:%M:%S'")
    client = subprocess.Popen(
        ["podman", "exec", name, "python3", "-c", CLIENT, STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    time.sleep(2)  # the client is streaming
    environment = {"SGLANG_SIM_LOAD_S": "1.0", "SGLANG_SIM_WARMUP_S": "0.6"}  # changed: the unit restarts
    deploy = subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            str(REPO / "playbooks" / "deploy.yml"),
            "-e",
            # no stability window: the restart and the drain are what this deploy is for
            json.dumps(
                {
                    "sglang_service_environment": environment,
                    "sglang_service_report_dir": "",
                    "sglang_service_settle_s": 0,
                }
            ),
        ],
        cwd=str(REPO),
        check=False,
        capture_output=True,
        text=True,
        timeout=400,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
    )
    time.sleep(2)  # the new server streams too
    lab_host.check_output("touch %s" % STOP)
    out, err = client.communicate(timeout=60)
    journal = lab_host.check_output("journalctl -u sglang.service --no-pager -o cat --since '%s'" % since)
    return {
        "deploy": deploy,
        "client": json.loads(out or b"{}"),
        "client_err": err,
        "before": before,
        "after": show(lab_host),
        "journal": journal,
    }


def test_the_deploy_restarted_the_unit(drained):
    deploy = drained["deploy"]
    assert deploy.returncode == 0, (deploy.stdout + deploy.stderr)[-3000:]
    assert drained["after"]["MainPID"] != drained["before"]["MainPID"]
    assert "Draining requests and shutting down" in drained["journal"]


def test_generations_were_in_flight_when_the_old_server_got_sigterm(drained):
    lines = [line for line in drained["journal"].splitlines() if "Gracefully exiting... Remaining number" in line]
    assert lines, drained["journal"][-3000:]
    assert int(lines[0].split("Remaining number of requests ")[1].split(".")[0]) >= 1


def test_no_streamed_generation_failed_across_the_restart(drained):
    client = drained["client"]
    assert client, drained["client_err"]
    assert client["counts"]["failed"] == 0, client["failures"]
    assert client["counts"]["complete"] >= 8
