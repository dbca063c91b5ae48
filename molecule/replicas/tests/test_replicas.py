"""replicas: two lab hosts with two replicas each (sglang-a :30000, sglang-b :30001), the real smg on lab1.

Checks per molecule host: each replica its own hardened unit, files, port, record and watchdog; the gateway routes
to all four. Then (once, from lab1's run) playbooks/rolling.yml as an ansible-playbook process of its own while
clients stream chat completions through the gateway: every replica restarted, 0 failed requests, every token
there. Last, a roll during which one replica is killed (the gateway takes it out) and one fails readiness (left
out of the gateway, reported, the play fails). Traffic goes only to the scenario's own containers.
"""

import json
import os
import pathlib
import subprocess
import sys
import threading
import time
import warnings

from gateway_client import WorkerWatch as _WorkerWatch
from gateway_client import address as _address
from gateway_client import curl as _curl
from gateway_client import gateway_log as _gateway_log
from gateway_client import unit_state as _unit_state
from gateway_client import watchdog_log as _watchdog_log
from gateway_client import workers as _workers
from lab_host import lab_host as _lab_host

GATEWAY, WORKER = "specdec-replicas-lab1", "specdec-replicas-lab2"
REPO = pathlib.Path(__file__).resolve().parents[3]
REPLICAS = {"a": 30000, "b": 30001}
MAX_TOKENS = 60
CLIENTS = 3


def _main_pid(lab_host, unit):
    return int(lab_host.check_output(f"systemctl show -p MainPID --value {unit}.service"))


# The clients run inside lab1 in one process (one `podman exec` for a whole test, not one per request: 2,500
# requests cost the scenario 150 CPU-s of podman alone). The key comes on stdin, which then stays open: its end
# (the test closing it) stops the clients, and the process prints what they saw.
CLIENTS_SCRIPT = r"""
import http.client, json, sys, threading, time
key, model, clients, max_tokens = sys.stdin.readline().strip(), sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
stop, lock = threading.Event(), threading.Lock()
seen = {"requests": 0, "tokens": 0, "failures": []}
body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Count to sixty."}],
                   "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True}})
headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}

def one():
    try:
        conn = http.client.HTTPConnection("127.0.0.1", 30080, timeout=60)
        conn.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = conn.getresponse()
        status, text = response.status, response.read().decode(errors="replace")
    except Exception as exc:
        return 0, repr(exc)
    return status, text

def client():
    while not stop.is_set():
        status, text = one()
        events = [e[len("data: "):] for e in text.split("\n\n") if e.startswith("data: ")]
        usage = [json.loads(e).get("usage") for e in events[:-1] if e.startswith("{")]
        tokens = next((u["completion_tokens"] for u in usage if u), 0)
        with lock:
            seen["requests"] += 1
            seen["tokens"] += tokens
            if status != 200 or not events or events[-1] != "[DONE]" or tokens != max_tokens:
                seen["failures"].append((status, tokens, text[-300:]))
        time.sleep(0.2)  # a client's think time: the load a person's client puts on the replicas

threads = [threading.Thread(target=client) for _ in range(clients)]
for thread in threads:
    thread.start()
sys.stdin.read()
stop.set()
for thread in threads:
    thread.join(120)
print(json.dumps(seen))
"""


class Streams:
    """CLIENTS clients inside lab1 streaming chat completions through its gateway until the block ends: requests,
    tokens, failures (every request must end with [DONE] and exactly MAX_TOKENS tokens)."""

    def __init__(self, gateway, key, model):
        self.gateway, self.key, self.model = gateway, key, model
        self.requests, self.tokens, self.failures = 0, 0, []

    def __enter__(self):
        argv = ["podman", "exec", "-i", self.gateway.backend.container, "python3", "-c", CLIENTS_SCRIPT]
        argv += [self.model, str(CLIENTS), str(MAX_TOKENS)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.proc.stdin.write(self.key + "\n")
        self.proc.stdin.flush()
        return self

    def __exit__(self, *exc):
        out, err = self.proc.communicate(input="", timeout=180)  # closes stdin: the clients finish their requests
        assert self.proc.returncode == 0, (self.proc.returncode, err[-3000:])
        seen = json.loads(out)
        self.requests, self.tokens, self.failures = seen["requests"], seen["tokens"], seen["failures"]


def _while_streaming(gateway, key, what, run, settle=2):
    """``run()`` (a playbook: rc, output) while CLIENTS clients stream through the gateway, from 3 s before it to
    ``settle`` s after: (rc, output, the streams). What the clients saw is a warning in the log, named ``what``."""
    with Streams(gateway, key, _model(gateway, key)) as streams:
        time.sleep(3)
        rc, out = run()
        time.sleep(settle)
    counts = f"{streams.requests} requests, {streams.tokens} tokens, {len(streams.failures)} failed"
    warnings.warn(f"{what}: {counts}", stacklevel=2)
    return rc, out, streams


def _assert_none_lost(streams, least=10):
    """Every request the clients sent came back whole, and there were at least ``least``."""
    assert streams.failures == [], streams.failures[:3]
    assert streams.requests >= least and streams.tokens == streams.requests * MAX_TOKENS


def _playbook(name, extra_vars, timeout=600, limit=None):
    """playbooks/<name> as its own ansible-playbook process over this scenario's inventory: (rc, output)."""
    argv = [
        str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        str(REPO / "playbooks" / name),
        "-e",
        json.dumps(extra_vars),
    ] + (["-l", limit] if limit else [])
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True, timeout=timeout, env=env, check=False)
    return done.returncode, done.stdout + done.stderr


def _roll(extra_vars, timeout=600):
    """playbooks/rolling.yml over the lab group's replicas: (rc, output)."""
    return _playbook("rolling.yml", dict({"sglang_gateway_worker_group": "lab"}, **extra_vars), timeout)


# The lab's environment (inventory/group_vars/lab/service.yml) plus a marker: a changed environment file restarts
# every replica. The gateways as docs/operations.md tells an inventory to set them: the `gateway` group.
LAB_ENV = {"SGLANG_SIM_LOAD_S": "1.0", "SGLANG_SIM_WARMUP_S": "0.5"}
THROUGH_GATEWAY = {"sglang_service_gateways": "{{ groups['gateway'] }}"}


def _deploy(environment, timeout=900, limit=None):
    """playbooks/deploy.yml over both hosts (or the limit) with the replicas behind the gateway: (rc, output)."""
    return _playbook("deploy.yml", dict(THROUGH_GATEWAY, sglang_service_environment=environment), timeout, limit)


def _pids(gateway, worker):
    labs = ((GATEWAY, gateway), (WORKER, worker))
    return {(h, n): _main_pid(lab, f"sglang-{n}") for h, lab in labs for n in REPLICAS}


def _environ(lab_host, unit):
    """The environment the unit's running process got (its EnvironmentFile lines, in effect)."""
    return lab_host.check_output(f"tr '\\0' '\\n' < /proc/{_main_pid(lab_host, unit)}/environ").splitlines()


def _model(gateway, key):
    status, models = _curl(gateway, key, "/v1/models")
    assert status == 200, models
    return json.loads(models)["data"][0]["id"]


def test_each_replica_is_its_own_hardened_unit_with_its_own_files_port_record_and_watchdog(lab_host):
    assert not lab_host.file("/etc/systemd/system/sglang.service").exists  # no single unit beside the replicas
    for name, port in REPLICAS.items():
        unit = f"sglang-{name}"
        service = lab_host.service(unit)
        assert service.is_running and service.is_enabled, unit
        lines = lab_host.file(f"/etc/systemd/system/{unit}.service").content_string.splitlines()
        for directive in (
            f"EnvironmentFile=/etc/sglang/{unit}.env",
            "NoNewPrivileges=true",
            "ProtectSystem=strict",
            f"SyslogIdentifier={unit}",
            "CapabilityBoundingSet=",
        ):
            assert directive in lines, (unit, directive)
        assert any(line.strip() == f"--port {port} \\" for line in lines), unit
        assert any(line.strip().startswith(f'--config "/etc/sglang/{unit}.yaml"') for line in lines), unit
        env, config = lab_host.file(f"/etc/sglang/{unit}.env"), lab_host.file(f"/etc/sglang/{unit}.yaml")
        assert (env.user, env.mode, config.mode) == ("root", 0o600, 0o600)
        assert lab_host.socket(f"tcp://0.0.0.0:{port}").is_listening
        record = json.loads(lab_host.file(f"/opt/sglang/state/last_good-{name}/deploy.json").content_string)
        current = lab_host.check_output("readlink -f /opt/sglang/current")
        assert current.endswith("/" + record["release_id"]), (record["release_id"], current)
        assert lab_host.service(f"{unit}-watch.timer").is_enabled
        watch = json.loads(lab_host.file(f"/etc/sglang/{unit}-watch.json").content_string)
        assert watch["unit"] == f"{unit}.service" and watch["base_url"].endswith(f":{port}")
        assert watch["last_good_record"] == f"/opt/sglang/state/last_good-{name}/deploy.json"
    # one release for both replicas: both processes run from it
    releases = {lab_host.check_output(f"readlink -f /proc/{_main_pid(lab_host, f'sglang-{n}')}/cwd") for n in REPLICAS}
    assert len(releases) == 1


def test_the_gateway_routes_to_all_four_replicas(host, key):
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    expected = {f"http://{_address(h)}:{p}" for h in (gateway, worker) for p in REPLICAS.values()}
    workers = _workers(gateway, key)
    assert set(workers) == expected
    assert all(w["is_healthy"] for w in workers.values()), workers


def test_zz_a_rolling_restart_of_all_four_loses_no_request(host, key):
    """playbooks/rolling.yml with sglang_deploy_min_serving=2 while 3 clients stream through the gateway."""
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    before = _pids(gateway, worker)
    rc, out, streams = _while_streaming(
        gateway,
        key,
        "rolling restart of 4 replicas through the gateway",
        lambda: _roll({"sglang_deploy_min_serving": 2}),
    )
    assert rc == 0, out[-6000:]
    _assert_none_lost(streams)
    after = _pids(gateway, worker)
    assert all(after[k] and after[k] != before[k] for k in before), (before, after)  # every replica restarted
    assert out.count("back in the gateway") >= 4, out[-4000:]
    workers = _workers(gateway, key)
    assert len(workers) == 4 and all(w["is_healthy"] for w in workers.values()), workers


def test_zz_b_a_deploy_with_one_replica_failing_readiness_leaves_three_serving_and_that_one_out(host, key):
    """The same deploy where lab2's sglang-b crashes on start: the environment asks every replica to crash, and a
    systemd drop-in on the other three reads a later environment file that takes the fault back (EnvironmentFile
    order), so only lab2's sglang-b fails - its last good files (restored by the rollback) have no fault. lab2's
    replicas roll back (sglang-a drained first and back after its rollback serves); sglang-b stays out of the
    gateway; the deploy fails with the diagnosis; clients through the gateway see no failure (every replica left
    the gateway and drained before it was stopped). The next check's deploy puts sglang-b back."""
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    failing = f"http://{_address(worker)}:{REPLICAS['b']}"
    spared = [(gateway, "sglang-a"), (gateway, "sglang-b"), (worker, "sglang-a")]
    dropin = "[Service]\nEnvironmentFile=/etc/sglang/test-no-fault.env\n"
    for lab, unit in spared:
        lab.check_output(
            f"echo SGLANG_SIM_FAULT=none > /etc/sglang/test-no-fault.env"
            f" && mkdir -p /etc/systemd/system/{unit}.service.d"
            f" && printf '{dropin}' > /etc/systemd/system/{unit}.service.d/zz-test-no-fault.conf"
        )
    try:
        before = _pids(gateway, worker)
        rc, out, streams = _while_streaming(
            gateway,
            key,
            "deploy through the gateway with lab2's sglang-b failing readiness",
            lambda: _deploy(dict(LAB_ENV, SGLANG_SIM_FAULT="crash_on_start")),
        )
        assert rc != 0, out[-6000:]
        flat = " ".join(out.split())
        assert f"{WORKER}: 2 replica(s), FAILED: b" in flat, flat[-6000:]
        assert "crashed_on_start" in flat or "restart_loop" in flat, flat[-6000:]
        assert f"[b] left out of the gateway(s) {GATEWAY}" in flat, flat[-6000:]
        assert "[a] rolled back with the host: release" in flat and "serves again" in flat, flat[-6000:]
        workers = _workers(gateway, key)
        assert failing not in workers, workers
        assert len(workers) == 3 and all(w["is_healthy"] for w in workers.values()), workers
        _assert_none_lost(streams)
        after = _pids(gateway, worker)
        # lab1's replicas switched, lab2's rolled back: every one restarted
        assert all(after[k] and after[k] != before[k] for k in before), (before, after)
        # lab2's replicas serve the last good environment again; sglang-b runs (rolled back) outside the gateway
        for name in REPLICAS:
            assert "SGLANG_SIM_FAULT=crash_on_start" not in _environ(worker, f"sglang-{name}"), name
        assert worker.run(f"curl -sf -o /dev/null http://127.0.0.1:{REPLICAS['b']}/health").rc == 0
    finally:
        for lab, unit in spared:
            lab.run(f"rm -rf /etc/systemd/system/{unit}.service.d /etc/sglang/test-no-fault.env")
            lab.run("systemctl daemon-reload")


def test_zz_c_a_deploy_through_the_gateway_restarts_all_four_loses_no_request_and_puts_the_left_out_one_back(host, key):
    """playbooks/deploy.yml with sglang_service_gateways and a changed environment (every replica restarts) while 3
    clients stream through the gateway: each replica leaves the gateway, drains, restarts, serves, comes back; and
    lab2's sglang-b, which the failed deploy before left out of the gateway (rolled back, serving), goes back in."""
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    left_out = f"http://{_address(worker)}:{REPLICAS['b']}"
    assert left_out not in _workers(gateway, key)  # as the failed deploy left it
    before = _pids(gateway, worker)
    rc, out, streams = _while_streaming(
        gateway,
        key,
        "deploy of 4 replicas through the gateway",
        lambda: _deploy(dict(LAB_ENV, SPECDEC_LAB_DEPLOY="through-the-gateway")),
    )
    assert rc == 0, out[-6000:]
    _assert_none_lost(streams)
    after = _pids(gateway, worker)
    assert all(after[k] and after[k] != before[k] for k in before), (before, after)  # every replica restarted
    for lab in (gateway, worker):
        for name in REPLICAS:
            assert "SPECDEC_LAB_DEPLOY=through-the-gateway" in _environ(lab, f"sglang-{name}"), name
    flat = " ".join(out.split())
    assert "Take this replica out of every gateway" in flat and "back into every gateway now that it serves" in flat
    workers = _workers(gateway, key)
    assert left_out in workers and len(workers) == 4, workers
    assert all(w["is_healthy"] for w in workers.values()), workers


def test_zz_d_stop_takes_each_replica_out_of_the_gateway_first_and_a_deploy_puts_them_back(host, key):
    """playbooks/stop.yml on lab2 with the replicas behind the gateway while 3 clients stream: both of lab2's
    replicas leave the gateway and drain before they stop (no client fails), lab1's two serve alone; then a deploy
    of lab2 starts them and puts them back."""
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    stopped = {f"http://{_address(worker)}:{port}" for port in REPLICAS.values()}
    rc, out, streams = _while_streaming(
        gateway,
        key,
        "stop of lab2's 2 replicas through the gateway",
        lambda: _playbook("stop.yml", THROUGH_GATEWAY, limit=WORKER),
        settle=3,
    )
    workers = _workers(gateway, key)
    assert rc == 0, out[-6000:]
    _assert_none_lost(streams, least=5)
    assert not stopped & set(workers) and len(workers) == 2, workers
    assert all(w["is_healthy"] for w in workers.values()), workers
    for name in REPLICAS:
        assert not worker.service(f"sglang-{name}").is_running, name
    assert "Take each replica out of every gateway" in " ".join(out.split())
    # Preflight checks each replica's port against its own unit: a stranger on replica b's port stops the deploy of
    # lab2 before anything starts, naming b's unit (the redeploys above passed the check with each port its own).
    port_b = REPLICAS["b"]
    stranger = "specdec-stranger-on-b"
    worker.check_output(
        f"systemd-run --unit={stranger} --property=Type=simple python3 -m http.server --bind 0.0.0.0 {port_b}"
    )
    try:
        worker.check_output(
            f"for i in $(seq 50); do ss -Hltn 'sport = :{port_b}' | grep -q . && exit 0; sleep 0.1; done; exit 1"
        )
        rc, out = _deploy(LAB_ENV, limit=WORKER)
        flat = " ".join(out.split())
        assert rc != 0 and "port_in_use" in flat and "sglang-b.service was not started on it" in flat, out[-6000:]
        assert "sglang-a.service was not started" not in flat  # replica a's port is free: no error for it
        assert not worker.service("sglang-a").is_running and not worker.service("sglang-b").is_running
    finally:
        worker.run(f"systemctl stop {stranger}")
    rc, out = _deploy(LAB_ENV, limit=WORKER)  # the stopped replicas start and go back into the gateway
    assert rc == 0, out[-6000:]
    workers = _workers(gateway, key)
    assert len(workers) == 4 and all(w["is_healthy"] for w in workers.values()), workers


def test_zz_zz_a_replica_killed_mid_roll_is_taken_out_and_one_failing_readiness_stays_out(host, key):
    """lab2's sglang-b gets a fault that makes its next start crash; lab2's sglang-a is killed while the roll
    restarts lab1's first replica. The gateway marks the killed one unhealthy (systemd starts it again); the roll
    leaves lab2's sglang-b out of the gateway, reports it and fails."""
    if host.backend.get_hostname() == WORKER:
        return
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    killed = f"http://{_address(worker)}:{REPLICAS['a']}"
    failing = f"http://{_address(worker)}:{REPLICAS['b']}"
    worker.check_output("echo 'SGLANG_SIM_FAULT=\"crash_on_start\"' >> /etc/sglang/sglang-b.env")
    try:
        with Streams(gateway, key, _model(gateway, key)) as streams:
            result = {}
            # The watch asks the gateway every 0.1 s from inside lab1; it starts before the roll, so the kill still
            # follows lab1's first replica leaving the gateway at once (before the roll can reach lab2's sglang-a).
            with _WorkerWatch(gateway, key, killed, seconds=300) as watch:
                roll = threading.Thread(target=lambda: result.update(zip(("rc", "out"), _roll({}))), daemon=True)
                roll.start()
                deadline = time.monotonic() + 120
                while len(_workers(gateway, key)) == 4 and time.monotonic() < deadline:  # lab1's first one goes out
                    time.sleep(0.5)
                worker.check_output("systemctl kill -s KILL sglang-a.service")
                killed_at = round(time.monotonic() - watch.started, 2)
            if watch.unhealthy is None:  # what the failure below reports: did systemd restart it, what did smg log?
                diagnosis = (
                    f"the unit: {_unit_state(worker, 'sglang-a')}; its watchdog: {_watchdog_log(worker, 'sglang-a')};"
                    f" {_gateway_log(gateway, killed)}"
                )
            roll.join(600)
        counts = f"{streams.requests} requests, {streams.tokens} tokens, {len(streams.failures)} failed"
        warnings.warn(
            f"roll with one replica killed and one failing readiness: {counts}; the gateway's states of the killed"
            f" replica (seconds from the watch's start, the kill at {killed_at} s): {watch.changes}",
            stacklevel=1,
        )
        assert watch.unhealthy is not None, (
            "the gateway never marked the killed replica unhealthy; its states of it (seconds from the watch's start,"
            f" the kill at {killed_at} s): {watch.changes}; {diagnosis}"
        )
        assert result["rc"] != 0, result["out"][-4000:]
        out = " ".join(result["out"].split())
        assert f"sglang-b ({failing}): NOT READY (" in out, out[-4000:]
        assert "left out of the gateway" in out
        workers = _workers(gateway, key)
        assert failing not in workers, workers
        assert len(workers) == 3 and all(w["is_healthy"] for w in workers.values()), workers
        # a stream the killed replica was serving breaks; every other request completes
        assert len(streams.failures) <= CLIENTS, streams.failures
    finally:
        # back as the deploy left it (the crash loop hit the start limit): the lab2 checks run after this one
        worker.run("sed -i '/SGLANG_SIM_FAULT=/d' /etc/sglang/sglang-b.env")
        worker.run("systemctl reset-failed sglang-b.service; systemctl restart sglang-b.service")
        worker.run(
            "for i in $(seq 60); do curl -sf -o /dev/null http://127.0.0.1:30001/health && break; sleep 0.5; done"
        )
