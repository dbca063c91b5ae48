# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Runs INSIDE a lab host (benchmarks/run copies it there): time to verdict per failure mode.

Each run starts the engine simulator (a test double for sglang) as a transient systemd unit,
as the service role does (Type=simple, Restart as given), and waits with the collection's
readiness logic in unit mode (plugins/module_utils, the code the sglang_readiness module runs:
with the pidfd-driven ExitWaiter, as the module ships, and for the death modes also with plain
0.5 s polling, what a host without pidfds gets). Death ->
verdict comes from systemd's own exit timestamp
(ExecMainExitTimestampMonotonic, the clock readiness uses). Then, once per
mode, the field report's loop (GET /v1/models every 5 s, 900 s budget) runs alone against
its own start of the engine (so nothing else sends a generation), capped at --naive-cap
seconds: what it concludes in that time, and when its verdict would come.

Stdlib only (python3 of the lab image). Prints one JSON document on stdout.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, "/opt/bench")
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import ExitWaiter
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.settle import extend as settle_window
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import UnitWatcher

SIM = "/opt/bench/sim/bin/python"
MODEL = "/opt/bench/model"
TIMING = {"SGLANG_SIM_LOAD_S": "1.0", "SGLANG_SIM_WARMUP_S": "0.5", "SGLANG_SIM_FAULT_AFTER_S": "1.0"}
NAIVE_POLL_S, NAIVE_BUDGET_S = 5.0, 900.0
PROBE_TIMEOUT_S = 4
SETTLE_S = 10  # stability window after a ready verdict (the module's settle_s; deploys use 30)

# mode: (simulator fault, extra env, systemd Restart=, expected verdict class or None for ready)
DEATH_MODES = (
    "crash_on_start",
    "memory_error",
    "import_abi_error",
    "crash_on_first_generation",
    "scheduler_death",
    "restart_loop",
)
MODES = {
    "healthy": ("none", {}, "no", None),
    "crash_on_start": ("crash_on_start", {}, "no", "crashed_on_start"),
    "memory_error": ("not_enough_memory", {}, "no", "oom_mem_fraction"),
    "import_abi_error": ("abi_mismatch", {}, "no", "abi_mismatch"),
    "crash_on_first_generation": ("crash_on_first_generation", {}, "no", "cuda_error"),
    "scheduler_death": (
        "scheduler_death",
        {"SGLANG_SIM_FAULT_AFTER_S": "0.5", "SGLANG_SIM_DEATH_GRACE_S": "0"},
        "no",
        "scheduler_died",
    ),
    "wedged": ("wedged", {"SGLANG_SIM_HEALTH_TIMEOUT_S": "3"}, "no", "wedged"),
    "restart_loop": ("crash_on_start", {}, "on-failure", "restart_loop"),
}


def sh(argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise RuntimeError("%s: rc %d: %s" % (argv, proc.returncode, proc.stderr.strip()))
    return proc


def run_command(argv):
    proc = subprocess.run(
        argv, capture_output=True, text=True, check=False, env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"}
    )
    return proc.returncode, proc.stdout, proc.stderr


def open_url(url, data=None, headers=None, method=None, timeout=None, **_ignored):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    return urllib.request.urlopen(request, timeout=timeout)


def mono_of_line(unit, pattern):
    """CLOCK_MONOTONIC seconds of the first journal line of ``unit`` matching ``pattern``."""
    out = sh(["journalctl", "-u", unit, "-o", "json", "--no-pager"], check=False).stdout
    for line in out.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if re.search(pattern, str(entry.get("MESSAGE", ""))):
            return int(entry["__MONOTONIC_TIMESTAMP"]) / 1e6
    return None


def naive_loop(port, cap_s, out):
    """The field's loop: GET /v1/models every 5 s until 200 or the 900 s budget; observed for cap_s."""
    start = time.monotonic()
    polls = 0
    while True:
        polls += 1
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/v1/models" % port, timeout=2) as resp:
                if resp.status == 200:
                    out.update(verdict="healthy", verdict_s=round(time.monotonic() - start, 3), polls=polls)
                    return
        except OSError:
            pass
        if time.monotonic() - start + NAIVE_POLL_S > cap_s:
            out.update(verdict="still polling", verdict_s=NAIVE_BUDGET_S, polls=polls, observed_s=cap_s, capped=True)
            return
        time.sleep(NAIVE_POLL_S)


def start_unit(mode, index, port, tag):
    fault, extra, restart, _expected = MODES[mode]
    unit = "bench-%s-%s%d-%d.service" % (mode.replace("_", "-"), tag, index, time.time_ns() // 1000000)
    env = dict(TIMING, SGLANG_SIM_FAULT=fault, PYTHONUNBUFFERED="1", **extra)
    argv = ["systemd-run", "--unit", unit, "--property=Type=simple", "--property=Restart=" + restart]
    argv += ["--property=RestartSec=1", "--property=StartLimitIntervalSec=0", "--property=TimeoutStopSec=2"]
    argv += ["--setenv=%s=%s" % item for item in sorted(env.items())]
    argv += [SIM, "-m", "sglang_engine_simulator", "--model-path", MODEL, "--host", "127.0.0.1", "--port", str(port)]
    sh(argv)
    return unit


def stop_unit(unit):
    sh(["systemctl", "kill", "--signal=SIGKILL", unit], check=False)
    sh(["systemctl", "stop", unit], check=False)
    sh(["systemctl", "reset-failed", unit], check=False)


def naive_run(mode, port, cap_s):
    """The field's loop alone on its own start of the engine (nothing else sends a generation)."""
    unit = start_unit(mode, 0, port, "naive")
    out = {}
    try:
        naive_loop(port, cap_s, out)
    finally:
        stop_unit(unit)
    return out


def one_run(mode, index, port, wait="poll"):
    """One start and readiness run. wait: "poll" (sleep 0.5 s between polls: a host without pidfds) or
    "event" (process_state.ExitWaiter, as the module ships: a pidfd on the main PID ends the sleep at the exit)."""
    expected = MODES[mode][3]
    launched = time.monotonic()
    unit = start_unit(mode, index, port, wait[0])
    waiter = ExitWaiter() if wait == "event" else None
    watcher = UnitWatcher(unit, run_command, waiter=waiter)
    settings = ProbeSettings(max_new_tokens=16, timeout=PROBE_TIMEOUT_S)
    prober = Prober("http://127.0.0.1:%d" % port, open_url, probe=settings)
    sleep = waiter if waiter is not None else time.sleep
    readiness = Readiness(watcher, prober, Params(startup_timeout=60, poll_interval=0.5), sleep=sleep)
    result = readiness.run()
    verdict_at = time.monotonic()
    first_ready_s = None
    if mode == "scheduler_death" and result["ready"]:
        # Ready first, then the scheduler dies: the stability window that follows a ready verdict
        # (module_utils/_readiness/settle.py, what the module runs with settle_s) must see the death.
        first_ready_s = round(verdict_at - launched, 3)
        result = settle_window(readiness, result, SETTLE_S)
        verdict_at = time.monotonic()
    ready_line = mono_of_line(unit, r"fired up and ready to roll")
    stop_unit(unit)
    unit_info = result.get("unit") or {}
    got = result["failure_class"]
    return {
        "mode": mode,
        "wait": wait,
        "event_wakeups": waiter.events if waiter is not None else None,
        "run": index,
        "ready": result["ready"],
        "failure_class": got,
        "cause_class": result.get("cause_class"),
        "expected": expected,
        "correct": result["ready"] if expected is None else expected in (got, result.get("cause_class")),
        "launch_to_verdict_s": round(verdict_at - launched, 3),
        "death_to_verdict_s": unit_info.get("death_to_verdict_s"),
        "ready_line_to_verdict_s": round(verdict_at - ready_line, 3) if ready_line else None,
        "time_to_ready_s": result.get("time_to_ready_s"),
        "first_ready_s": first_ready_s,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ready-reps", type=int, default=10, help="starts of the healthy mode (ready overhead)")
    parser.add_argument("--naive-cap", type=float, default=11.0)
    parser.add_argument("--mode", action="append", choices=sorted(MODES))
    args = parser.parse_args()
    modes = args.mode or list(MODES)
    runs = []
    port = 31000
    for mode in modes:
        reps = args.ready_reps if mode == "healthy" else args.reps
        for index in range(reps):
            port += 1
            for wait in ("poll", "event") if mode in DEATH_MODES else ("poll",):
                port += 1
                runs.append(one_run(mode, index, port, wait))
                print("%s #%d %s: %s" % (mode, index, wait, runs[-1]["failure_class"] or "ready"), file=sys.stderr)
    naive = {}
    for mode in modes:
        if args.naive_cap:
            port += 1
            naive[mode] = naive_run(mode, port, args.naive_cap)
            print("%s: naive loop %s" % (mode, naive[mode]), file=sys.stderr)
    summary = {}
    for mode in modes:
        rows = [r for r in runs if r["mode"] == mode and r["wait"] == "poll"]
        death = [r["death_to_verdict_s"] for r in rows if r["death_to_verdict_s"] is not None]
        event = [r["death_to_verdict_s"] for r in runs if r["mode"] == mode and r["wait"] == "event"]
        event = [v for v in event if v is not None]
        summary[mode] = {
            "event_death_to_verdict_median_s": statistics.median(event) if event else None,
            "event_death_to_verdict_max_s": max(event) if event else None,
            "event_correct": sum(r["correct"] for r in runs if r["mode"] == mode and r["wait"] == "event"),
            "runs": len(rows),
            "correct": sum(r["correct"] for r in rows),
            "verdict": rows[0]["failure_class"] or "ready",
            "launch_to_verdict_median_s": statistics.median(r["launch_to_verdict_s"] for r in rows),
            "death_to_verdict_median_s": statistics.median(death) if death else None,
            "death_to_verdict_max_s": max(death) if death else None,
            "naive": naive.get(mode),
        }
    json.dump({"runs": runs, "summary": summary}, sys.stdout, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
