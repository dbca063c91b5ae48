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
import shlex
import subprocess
import sys
import threading
import time
import warnings

from lab_host import lab_host as _lab_host

GATEWAY, WORKER = "specdec-replicas-lab1", "specdec-replicas-lab2"
REPO = pathlib.Path(__file__).resolve().parents[3]
BASE = "http://127.0.0.1:30080"
REPLICAS = {"a": 30000, "b": 30001}
MAX_TOKENS = 60
CLIENTS = 3


def _curl(lab_host, key, path, body=None, timeout=15):
    """(HTTP status, body text) of one request from lab1 to its gateway, the key in a header file."""
    headers = "Authorization: Bearer %s\nContent-Type: application/json\n" % key
    data = "" if body is None else " --data-binary %s" % shlex.quote(json.dumps(body))
    tag = "%d-%d" % (threading.get_ident(), time.monotonic_ns())
    cmd = (
        "printf %%s %s > /run/h-%s && curl -sS -N -m %d -H @/run/h-%s -o /run/o-%s -w '%%{http_code}'%s %s%s;"
        " rm -f /run/h-%s; echo; cat /run/o-%s; rm -f /run/o-%s"
    ) % (shlex.quote(headers), tag, timeout, tag, tag, data, BASE, path, tag, tag, tag)
    out = lab_host.run(cmd)
    status, _, text = out.stdout.partition("\n")
    return int(status or 0), text


def _address(lab_host):
    return lab_host.check_output("ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1")


def _workers(gateway, key):
    status, text = _curl(gateway, key, "/workers")
    assert status == 200, text
    return {w["url"]: w for w in json.loads(text)["workers"]}


def _main_pid(lab_host, unit):
    return int(lab_host.check_output(f"systemctl show -p MainPID --value {unit}.service"))


class Streams:
    """CLIENTS clients streaming chat completions through the gateway until stopped: requests, tokens, failures."""

    def __init__(self, gateway, key, model):
        self.gateway, self.key, self.model = gateway, key, model
        self.requests, self.tokens, self.failures = 0, 0, []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(CLIENTS)]

    def _client(self):
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": "Count to sixty."}],
            "max_tokens": MAX_TOKENS,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        while not self.stop.is_set():
            status, text = _curl(self.gateway, self.key, "/v1/chat/completions", body, timeout=60)
            events = [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]
            usage = [json.loads(e).get("usage") for e in events[:-1] if e.startswith("{")]
            tokens = next((u["completion_tokens"] for u in usage if u), 0)
            with self.lock:
                self.requests += 1
                self.tokens += tokens
                if status != 200 or not events or events[-1] != "[DONE]" or tokens != MAX_TOKENS:
                    self.failures.append((status, tokens, text[-300:]))

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(120)


def _roll(extra_vars, timeout=600):
    """playbooks/rolling.yml as its own ansible-playbook process over this scenario's inventory: (rc, output)."""
    argv = [
        str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        str(REPO / "playbooks" / "rolling.yml"),
        "-e",
        json.dumps(dict({"sglang_gateway_worker_group": "lab"}, **extra_vars)),
    ]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    done = subprocess.run(argv, cwd=str(REPO), capture_output=True, text=True, timeout=timeout, env=env, check=False)
    return done.returncode, done.stdout + done.stderr


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
    before = {
        (h, n): _main_pid(lab, f"sglang-{n}") for h, lab in ((GATEWAY, gateway), (WORKER, worker)) for n in REPLICAS
    }
    with Streams(gateway, key, _model(gateway, key)) as streams:
        time.sleep(3)
        rc, out = _roll({"sglang_deploy_min_serving": 2})
        time.sleep(2)
    counts = f"{streams.requests} requests, {streams.tokens} tokens, {len(streams.failures)} failed"
    warnings.warn(f"rolling restart of 4 replicas through the gateway: {counts}", stacklevel=1)
    assert rc == 0, out[-6000:]
    assert streams.failures == [], streams.failures[:3]
    assert streams.requests >= 10 and streams.tokens == streams.requests * MAX_TOKENS
    after = {
        (h, n): _main_pid(lab, f"sglang-{n}") for h, lab in ((GATEWAY, gateway), (WORKER, worker)) for n in REPLICAS
    }
    assert all(after[k] and after[k] != before[k] for k in before), (before, after)  # every replica restarted
    assert out.count("back in the gateway") >= 4, out[-4000:]
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
    seen_unhealthy = []
    try:
        with Streams(gateway, key, _model(gateway, key)) as streams:
            result = {}
            roll = threading.Thread(target=lambda: result.update(zip(("rc", "out"), _roll({}))), daemon=True)
            roll.start()
            deadline = time.monotonic() + 120
            while len(_workers(gateway, key)) == 4 and time.monotonic() < deadline:  # lab1's first replica goes out
                time.sleep(0.5)
            worker.check_output("systemctl kill -s KILL sglang-a.service")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not seen_unhealthy:
                state = _workers(gateway, key).get(killed)
                if state and not state["is_healthy"]:
                    seen_unhealthy.append(state)
                time.sleep(0.3)
            roll.join(600)
        counts = f"{streams.requests} requests, {streams.tokens} tokens, {len(streams.failures)} failed"
        warnings.warn(f"roll with one replica killed and one failing readiness: {counts}", stacklevel=1)
        assert seen_unhealthy, "the gateway never marked the killed replica unhealthy"
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
