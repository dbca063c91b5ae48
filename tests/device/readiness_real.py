#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The readiness code against a real sglang 0.5.17 + DFLASH server, in pid mode, on the device machine.

    tests/device/run-readiness-real         (sets up the scratch sglang like run-ddtree, then this)

The device machine has no systemd, so this is the pid + log-file mode of ``sglang_readiness``: the
module's own code (``plugins/module_utils``: Readiness, ProcessWatcher with the pidfd ExitWaiter, the
prober) with a urllib ``open_url``. One DFLASH server on the tiny random pair of build_tiny_models.py
(it has a tokenizer: the probe sends text), three runs:

1. start -> ``ready`` (the calls in order with their times: warming polls every 0.1 s, the test
   generation, the server info);
2. scheduler SIGSTOPped -> ``wedged`` (the real /health hangs in its own generation: the loop stops
   waiting on it after 1 s and sends the test generation, which times out after --wedge-probe-timeout);
3. scheduler SIGKILLed -> ``scheduler_died`` in phase ``serving``, with the time from the kill to the
   verdict.

Writes DIR/readiness-real.json and DIR/server.log; exit status 0 when all three verdicts are right.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(HERE))

import ddtree_check  # noqa: E402  (the device scripts' server launcher)
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import (  # noqa: E402
    ExitWaiter,
    ProcessWatcher,
)
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness  # noqa: E402


def open_url(url, data=None, headers=None, method=None, timeout=None, **_ignored):
    return urllib.request.urlopen(
        urllib.request.Request(url, data=data, headers=headers or {}, method=method), timeout=timeout
    )


class TimedProber(Prober):
    """The real prober, recording when each call starts (seconds since the run started)."""

    def __init__(self, *args, t0, **kwargs):
        super().__init__(*args, **kwargs)
        self.t0 = t0
        self.calls = []

    def start(self, name, **kwargs):
        self.calls.append([round(time.monotonic() - self.t0, 3), name])
        return super().start(name, **kwargs)


def scheduler_pid(main_pid):
    """The scheduler child of sglang's main process, or None (also run-h200-sglang's)."""
    kids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid, encoding="utf-8") as handle:
                stat = handle.read()
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                cmd = handle.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if stat[stat.rfind(")") + 2 :].split()[1] == str(main_pid):
            kids.append((int(pid), cmd))
    pick = [p for p, c in kids if "scheduler" in c] or [
        p for p, c in kids if "detokenizer" not in c and "resource_tracker" not in c and "spawn_main" in c
    ]
    return pick[0] if pick else None


def readiness_run(server, *, probe_timeout, startup_timeout, settle_label, expect="DFLASH"):
    t0 = time.monotonic()
    waiter = ExitWaiter()
    watcher = ProcessWatcher(pid=server.proc.pid, log_file=str(server.log_path), waiter=waiter)
    prober = TimedProber(server.url, open_url, probe=ProbeSettings(max_new_tokens=16, timeout=probe_timeout), t0=t0)
    params = Params(startup_timeout=startup_timeout, poll_interval=0.5, expect_speculative_algorithm=expect)
    result = Readiness(watcher, prober, params, sleep=waiter).run()
    keep = ("ready", "phase", "failure_class", "cause_class", "failed_in_phase", "reason", "elapsed_s",
            "time_to_ready_s", "exception_line", "probe", "server")  # fmt: skip
    out = {k: result.get(k) for k in keep}
    out.update(label=settle_label, wall_s=round(time.monotonic() - t0, 3), calls=prober.calls,
               pidfd_wakeups=waiter.events, pidfd=waiter.event_driven or waiter.events > 0)  # fmt: skip
    print(
        "[readiness-real] %s: %s" % (settle_label, {k: out[k] for k in ("ready", "failure_class", "wall_s")}),
        flush=True,
    )
    return out


def build_models(python, out):
    """(target, draft) with a tokenizer (the probe sends text), by build_tiny_models.py, or None."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the machine's own transformers
    made = subprocess.run(
        [python, str(HERE / "build_tiny_models.py"), "/tmp/specdec-readiness/models"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    (out / "models.log").write_text(made.stdout + made.stderr)
    if made.returncode != 0:
        print("[readiness-real] build_tiny_models.py failed: %s" % made.stderr[-2000:], flush=True)
        return None
    info = json.loads(made.stdout.strip().splitlines()[-1])
    return info["target"], info["draft"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True, help="the python with sglang 0.5.17 (the scratch site)")
    p.add_argument("--out", required=True)
    p.add_argument("--port", type=int, default=31500)
    p.add_argument("--wedge-probe-timeout", type=float, default=10.0)
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = build_models(args.python, out)
    if models is None:
        return 2
    target, draft = models
    flags = [
        "--model-path", target, "--dtype", "bfloat16", "--attention-backend", "triton", "--sampling-backend",
        "pytorch", "--grammar-backend", "none", "--mem-fraction-static", "0.2", "--context-length", "2048",
        "--max-running-requests", "8", "--disable-cuda-graph",
        "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", draft,
        "--speculative-num-draft-tokens", "4", "--speculative-draft-attention-backend", "triton",
    ]  # fmt: skip
    env = dict(os.environ, HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1")
    server = ddtree_check.Server("dflash", args.python, flags, env=env, port=args.port, out=out)
    report = {"runs": []}
    try:
        report["runs"].append(readiness_run(server, probe_timeout=60, startup_timeout=300, settle_label="start"))
        sched = scheduler_pid(server.proc.pid)
        report["scheduler_pid"] = sched
        if sched:
            os.kill(sched, signal.SIGSTOP)
            report["runs"].append(
                readiness_run(
                    server, probe_timeout=args.wedge_probe_timeout, startup_timeout=120, settle_label="stopped"
                )
            )
            os.kill(sched, signal.SIGCONT)
            time.sleep(2)
            killed_at = time.monotonic()
            os.kill(sched, signal.SIGKILL)
            run = readiness_run(server, probe_timeout=60, startup_timeout=120, settle_label="killed")
            run["kill_to_verdict_s"] = round(time.monotonic() - killed_at, 3)
            report["runs"].append(run)
    finally:
        server.stop()
    want = [("start", None), ("stopped", "wedged"), ("killed", "scheduler_died")]
    got = [(r["label"], r["failure_class"]) for r in report["runs"]]
    report["pass"] = got == want and report["runs"][0]["ready"] is True
    (out / "readiness-real.json").write_text(json.dumps(report, indent=1))
    print("[readiness-real] %s" % ("PASS" if report["pass"] else "FAIL: %s" % got), flush=True)
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
