#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Memory envelopes of the real 27B geometry against the real sglang 0.5.17 (device runs only).

    envelope_runs.py --python PY --models DIR --out OUT [--runs a,b] [--deadline-s N] [--free-gib 96]

DIR holds the config-only model dirs of ``build_tiny_models.py --arch hybrid --with-27b``
(27b-text: Qwen3_5ForCausalLM, 27b-conditional: Qwen3_5ForConditionalGeneration, 27b-draft:
DFlashDraftModel). Each run starts sglang with ``--load-format dummy`` (the draft inherits it) on a
GPU cut to about --free-gib (tests/device/gpu_holder.py holds the rest, started once), waits for a
verdict (ready + one generation of token ids = serves; the process gone = refused; --run-timeout-s
without either = null), stops the server, waits for the memory to come back, and reads sglang's own
log lines (nothing is computed here: a number sglang did not print is null).

Writes OUT/envelopes.json (the record schema of tests/device/records/2026-12-01-h200-hybrid/README.md)
and OUT/logs/<run>.log. Stdlib only; runs one server at a time (each needs the whole cut card).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
ANSI = re.compile(r"\x1b\[[0-9;]*m")
READY = "The server is fired up and ready to roll!"

# name: (target dir, with the draft, envelope). The field's "full" is 131072 / 0.88 / 16 with graphs.
RUNS = {
    "text-131k-0.50-16": ("27b-text", False, dict(context_length=131072, mem_fraction_static=0.50,
                                                  max_running_requests=16, cuda_graph=False)),
    "text-131k-0.88-16": ("27b-text", False, dict(context_length=131072, mem_fraction_static=0.88,
                                                  max_running_requests=16, cuda_graph=False)),
    "text-dflash-131k-0.88-16": ("27b-text", True, dict(context_length=131072, mem_fraction_static=0.88,
                                                        max_running_requests=16, cuda_graph=False)),
    "cond-dflash-131k-0.88-16": ("27b-conditional", True, dict(context_length=131072, mem_fraction_static=0.88,
                                                               max_running_requests=16, cuda_graph=False)),
    "cond-dflash-131k-0.88-16-graphs": ("27b-conditional", True, dict(context_length=131072,
                                                                      mem_fraction_static=0.88,
                                                                      max_running_requests=16, cuda_graph=True)),
    "cond-dflash-32k-0.88-4": ("27b-conditional", True, dict(context_length=32768, mem_fraction_static=0.88,
                                                             max_running_requests=4, cuda_graph=False)),
    "cond-dflash-131k-0.60-16": ("27b-conditional", True, dict(context_length=131072, mem_fraction_static=0.60,
                                                               max_running_requests=16, cuda_graph=False)),
    "cond-131k-0.88-16": ("27b-conditional", False, dict(context_length=131072, mem_fraction_static=0.88,
                                                         max_running_requests=16, cuda_graph=False)),
}  # fmt: skip
NUM_DRAFT_TOKENS = 16  # the real draft's block size (sglang_service_dflash_block_size)


def flags_for(models, target, with_draft, env):
    flags = [
        "--model-path", str(models / target), "--load-format", "dummy", "--dtype", "bfloat16",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
        "--context-length", str(env["context_length"]), "--mem-fraction-static", str(env["mem_fraction_static"]),
        "--max-running-requests", str(env["max_running_requests"]),
    ]  # fmt: skip
    if not env["cuda_graph"]:
        flags.append("--disable-cuda-graph")
    if with_draft:
        flags += [
            "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", str(models / "27b-draft"),
            "--speculative-num-draft-tokens", str(NUM_DRAFT_TOKENS), "--speculative-draft-attention-backend", "triton",
        ]  # fmt: skip
    return flags


def _all(pattern, text):
    return list(re.finditer(pattern, text))


def _f(value):
    return None if value is None else float(value)


def parse_log(text):
    """sglang's own numbers from one start's log (ANSI stripped); None where it printed none."""
    text = ANSI.sub("", text)
    m = {}
    begin = _all(r"Load weight begin\. avail mem=([\d.]+) GB", text)
    ends = _all(r"Load weight end\. .*?type=(\w+).*?avail mem=([\d.]+) GB, mem usage=([\d.]+) GB", text)
    m["gpu_free_gb_before_load"] = _f(begin[0].group(1)) if begin else None
    m["weights_gb"] = _f(ends[0].group(3)) if ends else None
    m["weights_class"] = ends[0].group(1) if ends else None
    m["draft_weights_gb"] = _f(ends[1].group(3)) if len(ends) > 1 else None
    m["avail_after_load_gb"] = _f(ends[-1].group(2)) if ends else None
    mamba = re.search(
        r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: ([\d.]+)GB, "
        r"ssm_state size: ([\d.]+)GB(?: intermediate_ssm_state_cache size: ([\d.]+)GB "
        r"intermediate_conv_window_cache size: ([\d.]+)GB)?",
        text,
    )
    m["mamba_slots"] = int(mamba.group(1)) if mamba else None
    m["mamba_conv_gb"] = _f(mamba.group(2)) if mamba else None
    m["mamba_ssm_gb"] = _f(mamba.group(3)) if mamba else None
    m["intermediate_ssm_gb"] = _f(mamba.group(4)) if mamba else None
    m["intermediate_conv_gb"] = _f(mamba.group(5)) if mamba else None
    pools = [
        {"label": k.group(1).strip() or None, "tokens": int(k.group(2)), "k_gb": float(k.group(3)),
         "v_gb": float(k.group(4))}
        for k in _all(r"(?:\] |^)([\w ]*?)KV Cache is allocated\. dtype: \S+, #tokens: (\d+), K size: ([\d.]+) GB, "
                      r"V size: ([\d.]+) GB", text)
    ]  # fmt: skip
    m["kv_pools"] = pools
    m["kv_tokens"] = pools[0]["tokens"] if pools else None
    m["kv_k_gb"] = pools[0]["k_gb"] if pools else None
    m["kv_v_gb"] = pools[0]["v_gb"] if pools else None
    viable = re.search(r"minimum viable = 1 - available/pre = ([\d.]+)", text)
    m["min_viable_mem_fraction"] = _f(viable.group(1)) if viable else None
    capped = re.search(r"max_running_requests is capped to (\d+) by the mamba state", text)
    m["mamba_capped_max_running_requests"] = int(capped.group(1)) if capped else None
    sched = re.search(r"max_total_num_tokens=(\d+).*?max_running_requests=(\d+)", text)
    m["max_total_num_tokens"] = int(sched.group(1)) if sched else None
    m["max_running_requests"] = int(sched.group(2)) if sched else None
    errors = [
        line.strip()
        for line in text.splitlines()
        if re.match(r"\s*(?:[\w.]+(?:Error|Exception)|AssertionError|KeyboardInterrupt)(?::|$)", line)
    ]
    m["error"] = errors[-1][:400] if errors else None
    return m


def nvidia_smi(query):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=False, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip()


def gpu_free_mib():
    try:
        return int(nvidia_smi("memory.free").split()[0])
    except (IndexError, ValueError):
        return None


def generate(port, timeout):
    body = {"input_ids": list(range(10, 26)), "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    request = urllib.request.Request(
        "http://127.0.0.1:%d/generate" % port, data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)


def wait_verdict(proc, log_path, args, started):
    """(outcome, generation, note): serves once ready and one generation came back; refused when the
    process is gone first; (None, None, why) otherwise."""
    while time.monotonic() - started < args.run_timeout_s:
        time.sleep(1)
        text = log_path.read_text(errors="replace")
        if READY in text:
            try:
                left = args.run_timeout_s - (time.monotonic() - started)
                return "serves", generate(args.port, timeout=max(30, left)), None
            except Exception as exc:  # recorded
                return None, None, "ready, but the generation failed: %s" % exc
        if proc.poll() is not None:
            return "refused", None, None
    return None, None, "no verdict within %ss" % args.run_timeout_s


def one_run(name, args, models, logs, base_free_mib):
    target, with_draft, env = RUNS[name]
    flags = flags_for(models, target, with_draft, env)
    log_path = logs / (name + ".log")
    started = time.monotonic()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [args.python, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(args.port), *flags],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    try:
        outcome, gen, note = wait_verdict(proc, log_path, args, started)
    finally:
        stop(proc)
    seconds = round(time.monotonic() - started, 1)
    # The next start must see the card as the holder left it: wait for the memory to come back.
    deadline = time.monotonic() + 60
    while base_free_mib and time.monotonic() < deadline:
        free = gpu_free_mib()
        if free is not None and free >= base_free_mib - 512:
            break
        time.sleep(1)
    measured = parse_log(log_path.read_text(errors="replace"))
    if outcome == "serves":
        measured["error"] = None
    elif note and not measured["error"]:
        measured["error"] = note
    measured.update(outcome=outcome, log="logs/%s.log" % name, seconds=seconds, note=note)
    if gen is not None:
        meta = gen.get("meta_info", {})
        measured["generation"] = {
            "output_ids": gen.get("output_ids"),
            **{k: meta.get(k) for k in ("completion_tokens", "spec_verify_ct", "spec_accept_length")},
        }
    with open(models / target / "config.json", encoding="utf-8") as handle:
        target_config = json.load(handle)
    draft_config = None
    if with_draft:
        with open(models / "27b-draft" / "config.json", encoding="utf-8") as handle:
            draft_config = json.load(handle)
    envelope = dict(env, algorithm="DFLASH" if with_draft else None,
                    num_draft_tokens=NUM_DRAFT_TOKENS if with_draft else None)  # fmt: skip
    print("[envelope] %s: %s in %ss, %s" % (name, outcome, seconds, measured["error"]), flush=True)
    return {
        "name": name,
        "target_config": target_config,
        "draft_config": draft_config,
        "launch_flags": flags,
        "envelope": envelope,
        "measured": measured,
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True)
    p.add_argument("--models", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--deadline-s", type=float, default=1e9, help="start no run after this many seconds")
    p.add_argument("--run-timeout-s", type=float, default=240)
    p.add_argument("--free-gib", type=float, default=96.1)
    p.add_argument("--port", type=int, default=31900)
    p.add_argument("--holder-python", default=sys.executable)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    models, out = pathlib.Path(args.models), pathlib.Path(args.out)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    record_path = out / "envelopes.json"
    record = json.loads(record_path.read_text()) if record_path.exists() else {"source": None, "runs": []}
    holder = subprocess.Popen(
        [args.holder_python, str(HERE / "gpu_holder.py"), str(args.free_gib)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        held = json.loads(holder.stdout.readline() or "{}")
        print("[envelope] holder: %s" % held, flush=True)
        base_free = gpu_free_mib()
        record["source"] = (
            "sglang 0.5.17 on one lent H200 (%s MiB, %s) cut by tests/device/gpu_holder.py to %s GiB free "
            "(holder: %s); --load-format dummy, triton attention; tests/device/envelope_runs.py"
            % (nvidia_smi("memory.total"), nvidia_smi("name,driver_version"), args.free_gib, held)
        )
        for name in [n for n in args.runs.split(",") if n]:
            if time.monotonic() - t0 > args.deadline_s:
                print("[envelope] %s not run: deadline" % name, flush=True)
                continue
            run = one_run(name, args, models, logs, base_free)
            run["gpu_total_gb"] = held.get("total_gib")
            run["gpu_free_gb_before_load"] = run["measured"].pop("gpu_free_gb_before_load")
            run["tp_size"] = 1
            record["runs"] = [r for r in record["runs"] if r["name"] != name] + [run]
            record_path.write_text(json.dumps(record, indent=1) + "\n")
    finally:
        os.killpg(holder.pid, signal.SIGTERM)
        holder.wait(timeout=20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
