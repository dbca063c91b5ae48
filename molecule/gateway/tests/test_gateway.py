"""gateway: SGLang's real gateway (smg) on lab1 in front of both lab hosts' single-replica deploys.

Each check runs once per molecule host: on lab1 (the gateway host) the gateway's own checks, on lab2 what a
worker behind it shows. The failover check (test_zz_*) stops lab2's unit and sends N sequential generations
through lab1's gateway: 0 may fail. Traffic goes only to the scenario's own containers.
"""

import json
import pathlib
import time

import yaml
from gateway_client import address as _address
from gateway_client import curl as _curl
from gateway_client import gateway_log as _gateway_log
from gateway_client import unit_state as _unit_state
from gateway_client import watchdog_log as _watchdog_log
from gateway_client import workers as _workers
from lab_host import lab_host as _lab_host

GATEWAY, WORKER = "specdec-gateway-lab1", "specdec-gateway-lab2"
REPO = pathlib.Path(__file__).resolve().parents[3]
PIN = yaml.safe_load((REPO / "roles/sglang_gateway/defaults/main.yml").read_text())["sglang_gateway_smg_version"]
UNIT = "/etc/systemd/system/sglang-gateway.service"
ENV_FILE = "/etc/sglang-gateway/sglang-gateway.env"
ROUNDS = 40


def _generate(gateway, key, tokens=8):
    status, text = _curl(gateway, key, "/generate", {"text": "Say hi.", "sampling_params": {"max_new_tokens": tokens}})
    meta = json.loads(text)["meta_info"] if status == 200 else {}
    return status, meta


def test_the_gateway_runs_the_pinned_smg_as_its_own_hardened_unit(host, lab_host):
    if host.backend.get_hostname() == WORKER:
        assert not lab_host.file(UNIT).exists and not lab_host.user("sglang-gateway").exists
        return
    assert lab_host.check_output("/opt/sglang-gateway/venv/bin/smg --version").strip() == f"smg {PIN}"
    assert lab_host.service("sglang-gateway").is_running and lab_host.service("sglang-gateway").is_enabled
    user = lab_host.user("sglang-gateway")
    assert user.exists and user.uid < 1000 and user.shell == "/usr/sbin/nologin"
    lines = lab_host.file(UNIT).content_string.splitlines()
    for directive in ("User=sglang-gateway", "NoNewPrivileges=true", "ProtectSystem=strict", "CapabilityBoundingSet="):
        assert directive in lines, directive
    assert any(line.strip().startswith("--api-key ${SMG_API_KEY}") for line in lines)
    env = lab_host.file(ENV_FILE)
    assert (env.user, env.mode) == ("root", 0o600) and "SMG_API_KEY=" in env.content_string
    assert "lab-only" not in lab_host.file(UNIT).content_string
    assert lab_host.socket("tcp://0.0.0.0:30080").is_listening
    assert lab_host.socket("tcp://127.0.0.1:29000").is_listening


def test_both_workers_are_registered_and_healthy(host, lab_host, key):
    gateway, worker = _lab_host(GATEWAY), _lab_host(WORKER)
    if host.backend.get_hostname() == WORKER:
        # the replica listens on the lab network, where the gateway reaches it
        assert lab_host.socket("tcp://0.0.0.0:30000").is_listening
        return
    expected = {f"http://{_address(h)}:30000" for h in (gateway, worker)}
    workers = _workers(gateway, key)
    assert set(workers) == expected
    assert all(w["is_healthy"] and w["status"] == "ready" for w in workers.values()), workers
    assert {w["runtime_type"] for w in workers.values()} == {"sglang"}


def test_generations_through_the_gateway_reach_this_host_and_a_streamed_chat_comes_back(host, lab_host, key):
    """Round robin: of 4 generations through the gateway, this host's replica serves some (its access log
    shows them from the gateway's address); a streamed chat completion comes back whole."""
    gateway = _lab_host(GATEWAY)
    source = _address(gateway)  # the gateway reaches both replicas on the lab network, its own too
    since = lab_host.check_output("date +%s")
    for _ in range(4):
        status, meta = _generate(gateway, key)
        assert status == 200 and meta["completion_tokens"] == 8 and meta["finish_reason"]["type"] == "length"
    served = lab_host.check_output(f"journalctl -u sglang.service --since @{since} -o cat --no-pager")
    lines = served.splitlines()
    assert any(f"{source}:" in line and '"POST /generate HTTP/1.1" 200' in line for line in lines), served[-2000:]
    status, models = _curl(gateway, key, "/v1/models")
    assert status == 200, models
    model = json.loads(models)["data"][0]["id"]  # smg asks for the model of a chat completion
    body = {"model": model, "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 5, "stream": True}
    status, text = _curl(gateway, key, "/v1/chat/completions", body)
    events = [e[len("data: ") :] for e in text.split("\n\n") if e.startswith("data: ")]
    assert status == 200 and events[-1] == "[DONE]", text
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    metrics = gateway.check_output("curl -sS -m 5 http://127.0.0.1:29000/metrics")
    assert 'smg_worker_health_checks_total{worker_type="regular",result="success"}' in metrics
    assert 'smg_http_responses_total{path="/generate",status_code="200"' in metrics


def test_zz_a_stopped_worker_costs_no_client_request(host, lab_host, key):
    """Stop this host's replica: N sequential generations through the gateway all succeed (the other host
    serves them), the gateway marks this one unhealthy (not_ready, then failed), and once it runs again it is
    healthy (ready) again."""
    gateway = _lab_host(GATEWAY)
    stopped = f"http://{_address(lab_host)}:30000"
    lab_host.check_output("systemctl stop sglang.service")
    try:
        failures, tokens = [], 0
        for _ in range(ROUNDS):
            status, meta = _generate(gateway, key)
            if status != 200 or meta.get("completion_tokens", 0) < 1:
                failures.append(status)
            tokens += meta.get("completion_tokens", 0)
        assert failures == [], f"{len(failures)} of {ROUNDS} generations failed through the gateway: {failures}"
        assert tokens == 8 * ROUNDS
        # Health checks run every second (host_vars); the wait is generous for a loaded 2-core machine. A worker that
        # never turns names the unit's state, its watchdog's last runs (on 2026-12-06 a watchdog run under way
        # restarted the stopped unit within the second: fixed in the watchdog) and the gateway's journal.
        deadline = time.monotonic() + 90
        while (record := _workers(gateway, key)[stopped])["is_healthy"] and time.monotonic() < deadline:
            time.sleep(1)
        assert not record["is_healthy"], (
            "the gateway still counts the stopped worker healthy after 90 s: worker %s; unit %s; its watchdog:\n%s\n"
            "gateway log:\n%s"
            % (
                record,
                _unit_state(lab_host, "sglang"),
                _watchdog_log(lab_host, "sglang"),
                _gateway_log(gateway, stopped),
            )
        )
        # smg 1.13: not_ready after the failure threshold (2), failed after three times as many checks
        while (record := _workers(gateway, key)[stopped])["status"] != "failed" and time.monotonic() < deadline:
            time.sleep(1)
        assert record["status"] == "failed", record
    finally:
        lab_host.run("systemctl start sglang.service")
    deadline = time.monotonic() + 60
    while not _workers(gateway, key)[stopped]["is_healthy"] and time.monotonic() < deadline:
        time.sleep(1)
    assert _workers(gateway, key)[stopped]["is_healthy"], "the restarted worker did not come back healthy"
    assert _workers(gateway, key)[stopped]["status"] == "ready"  # failed is not the end of a worker that recovers
