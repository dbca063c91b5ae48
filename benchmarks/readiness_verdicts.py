"""Benchmark: how fast does readiness reach the right verdict, compared with the field's health loop?

Runs the engine simulator (the test double) as a real process on 127.0.0.1 and, for each
scenario, the collection's readiness logic (plugins/module_utils, pid + log-file mode, the
same code the module runs) and the field report's loop (GET /v1/models every 5 s for up to
15 min) side by side. Loopback only; bounded repetitions; stops by itself.

    .venv/bin/python benchmarks/readiness_verdicts.py [--reps 5] [--json out.json]

Numbers: verdict class, time from launch to verdict, and for crashes the time from the
process's death to the verdict. The field loop is not run to its 15-minute end: its verdict is
computed from what it would see (a dead port keeps it polling; a wedged /v1/models answers 200).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "collections"))
SIM_SRC = REPO / "lab" / "engine-simulator" / "src"

from ansible.module_utils.urls import open_url  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import ProcessWatcher  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness  # noqa: E402

TIMING = {"SGLANG_SIM_LOAD_S": "1.0", "SGLANG_SIM_WARMUP_S": "0.5", "SGLANG_SIM_FAULT_AFTER_S": "1.0"}
SCENARIOS = {
    # name: (fault, extra env, expected class (None = ready))
    "healthy": ("none", {}, None),
    "crash_on_start": ("crash_on_start", {}, "crashed_on_start"),
    "not_enough_memory": ("not_enough_memory", {}, "oom_mem_fraction"),
    "scheduler_death": ("scheduler_death", {"SGLANG_SIM_FAULT_AFTER_S": "0.2"}, "scheduler_died"),
    "wedged": ("wedged", {"SGLANG_SIM_HEALTH_TIMEOUT_S": "3"}, "wedged"),
}
FIELD_POLL_S, FIELD_BUDGET_S = 5.0, 900.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp: pathlib.Path, fault: str, env_extra: dict, port: int):
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    log = tmp / f"sim-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update(TIMING, PYTHONPATH=str(SIM_SRC), PYTHONUNBUFFERED="1", SGLANG_SIM_FAULT=fault, **env_extra)
    args = ["--model-path", str(model), "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_engine_simulator", *args], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    died = {}

    def reap():
        proc.wait()
        died["at"] = time.monotonic()

    threading.Thread(target=reap, daemon=True).start()
    return proc, log, died


def field_loop_verdict(port: int, proc) -> str:
    """What the hand-run loop concludes: healthy as soon as /v1/models answers 200, else keeps polling."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as resp:
            if resp.status == 200:
                return "healthy (by /v1/models)"
    except OSError:
        pass
    if proc.poll() is not None:
        return f"still polling a dead unit: gives up after {FIELD_BUDGET_S:.0f} s"
    return "still polling"


def one_run(name: str) -> dict:
    fault, env_extra, expected = SCENARIOS[name]
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        launched = time.monotonic()
        proc, log, died = launch(pathlib.Path(tmp), fault, env_extra, port)
        watcher = ProcessWatcher(pid=proc.pid, log_file=str(log))
        prober = Prober(f"http://127.0.0.1:{port}", open_url, probe=ProbeSettings(max_new_tokens=16, timeout=4))
        result = Readiness(watcher, prober, Params(startup_timeout=60, poll_interval=0.5)).run()
        verdict_at = time.monotonic()
        field = field_loop_verdict(port, proc)
        if name == "scheduler_death" and result["ready"]:
            # ready first, then the scheduler dies: a second readiness run (what a health check would
            # do next) must see the death.
            result = Readiness(watcher, prober, Params(startup_timeout=30, poll_interval=0.5)).run()
            verdict_at = time.monotonic()
        proc.kill()
        proc.wait()
    death = died.get("at")
    return {
        "scenario": name,
        "ready": result["ready"],
        "class": result["failure_class"],
        "expected": expected,
        "correct": result["failure_class"] == expected if expected else result["ready"],
        "launch_to_verdict_s": round(verdict_at - launched, 3),
        "death_to_verdict_s": round(verdict_at - death, 3) if death and death <= verdict_at else None,
        "field_loop": field,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    names = args.scenario or list(SCENARIOS)
    runs = [one_run(name) for name in names for _ in range(args.reps)]
    print(
        f"{'scenario':<18} {'verdict':<18} {'ok':>3} {'launch->verdict s (median/max)':>31} "
        f"{'death->verdict s (median/max)':>30}  field loop"
    )
    for name in names:
        rows = [r for r in runs if r["scenario"] == name]
        lv = [r["launch_to_verdict_s"] for r in rows]
        dv = [r["death_to_verdict_s"] for r in rows if r["death_to_verdict_s"] is not None]
        verdict = "ready" if rows[0]["ready"] else rows[0]["class"]
        ok = sum(r["correct"] for r in rows)
        dtext = f"{statistics.median(dv):.2f} / {max(dv):.2f}" if dv else "-"
        print(
            f"{name:<18} {verdict:<18} {ok:>2}/{len(rows)} {statistics.median(lv):>20.2f} / {max(lv):<8.2f}"
            f" {dtext:>30}  {rows[0]['field_loop']}"
        )
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2))
    return 0 if all(r["correct"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
