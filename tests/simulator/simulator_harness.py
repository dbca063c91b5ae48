"""Harness: start the engine simulator as a real process on loopback and talk to it over HTTP."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SIM_SRC = REPO / "lab" / "engine-simulator" / "src"
if str(SIM_SRC) not in sys.path:
    sys.path.insert(0, str(SIM_SRC))

# Short timings so the whole fault matrix runs in seconds; defaults are tested separately.
FAST = {"SGLANG_SIM_LOAD_S": "0.2", "SGLANG_SIM_WARMUP_S": "0.2", "SGLANG_SIM_FAULT_AFTER_S": "0.5"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sim:
    """One simulator process: its logs (files, so a chatty process never blocks), port and exit."""

    def __init__(self, tmp: pathlib.Path, args: list[str], env: dict, port: int):
        self.port = port
        self.out_path, self.err_path = tmp / f"sim-{port}.out", tmp / f"sim-{port}.err"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_SIM_", "SGLANG_HEALTH"))}
        full_env.update({"PYTHONPATH": str(SIM_SRC), "PYTHONUNBUFFERED": "1"}, **env)
        self.started = time.monotonic()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sglang_engine_simulator", *args], stdout=out, stderr=err, env=full_env
            )

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def logs(self) -> str:
        return self.stderr + self.stdout

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def wait_exit(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"simulator still running after {timeout} s; logs:\n{self.logs}")

    def wait_log(self, needle: str, timeout: float) -> float:
        """Seconds since launch when `needle` appeared in stderr+stdout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if needle in self.logs:
                return self.elapsed()
            if self.proc.poll() is not None and needle not in self.logs:
                pytest.fail(f"simulator exited ({self.proc.returncode}) before logging {needle!r}:\n{self.logs}")
            time.sleep(0.02)
        pytest.fail(f"{needle!r} not logged within {timeout} s:\n{self.logs}")

    def port_open(self) -> bool:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
            return True
        return False

    def wait_port(self, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_open():
                return self.elapsed()
            if self.proc.poll() is not None:
                pytest.fail(f"simulator exited ({self.proc.returncode}) before opening its port:\n{self.logs}")
            time.sleep(0.02)
        pytest.fail(f"port {self.port} not open within {timeout} s:\n{self.logs}")

    def wait_ready(self, timeout: float = 5.0) -> float:
        return self.wait_log("The server is fired up and ready to roll!", timeout)

    def http(self, method: str, path: str, body=None, headers=None, timeout: float = 5.0):
        """(status, parsed JSON or None). Raises on timeouts and dropped connections."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = None if body is None else json.dumps(body).encode()
            hdrs = {"content-type": "application/json"} if body is not None else {}
            hdrs.update(headers or {})
            conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else None)
        finally:
            conn.close()

    def generate(self, prompt: str = "Say hi.", max_new_tokens: int = 16, timeout: float = 5.0, headers=None):
        body = {"text": prompt, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": 0}}
        return self.http("POST", "/generate", body, headers=headers, timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(5)


class Launcher:
    """start(extra_args, env, port=None, spec=False) -> Sim; stop_all() kills what it started."""

    def __init__(self, tmp: pathlib.Path, model_dirs: dict):
        self.tmp, self.model_dirs, self.procs = tmp, model_dirs, []

    def start(self, extra_args=(), env=None, port=None, spec=False, model_path=None) -> Sim:
        port = port or free_port()
        args = ["--model-path", model_path or self.model_dirs["target"], "--host", "127.0.0.1", "--port", str(port)]
        if spec:
            args += [
                "--speculative-algorithm", "DFLASH",
                "--speculative-draft-model-path", self.model_dirs["draft"],
                "--speculative-num-draft-tokens", "16",
            ]  # fmt: skip
        sim = Sim(self.tmp, [*args, *extra_args], dict(env or {}), port)
        self.procs.append(sim)
        return sim

    def stop_all(self) -> None:
        for sim in self.procs:
            sim.stop()


def strip_ts(text: str) -> str:
    return re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP\d+)?\] ", "", text, flags=re.M)
