#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a decode step costs at the real geometry: Qwen3.6-27B text + its DFlash draft, dummy weights.

    ddtree_cost.py --python PY --target DIR --draft DIR --out DIR
                   [--runs target,dflash,ddtree16,ddtree32,ddtree64,target-eager] [--batches 1,8]
                   [--tokens 160] [--warmup-steps 16] [--temperature 0] [--deadline-s 500] [--free-gib GIB]
                   [--sync-check]

Run on the device machine (tests/device/run-ddtree --cost): sglang 0.5.17 with ddtree-0.5.17 applied.
The model dirs are config-only, Qwen3.6-27B's geometry (Qwen3_5ForConditionalGeneration) and its
DFlash draft's (block 16) (build_tiny_models.py --arch hybrid --with-27b), served with
--load-format dummy. One server at a time (each holds a 51 GB target), on the whole card unless
--free-gib cuts it with gpu_holder.py.

The timing is sglang's own: every server runs with --decode-log-interval 1, so each "Decode batch"
line of its log is one scheduler step, and its gen throughput is that step's tokens over the time since
the previous line (tokens = #running-req x accept len; with dummy weights nothing is accepted and the
accept length is 1). Per server and batch size b: b requests of 128 random prompt tokens sent at once,
--tokens new tokens each (ignore_eos); the steps at #running-req == b after the first --warmup-steps
(the prefill and the first-use compiles) are the sample: median, p10 / p90, min, max, and the client's
wall time per step as a cross-check.

Modes, as a deploy runs them: the target alone, DFLASH and DDTREE on sglang's decode CUDA graphs (captured
for the batch sizes measured; ddtree-0.5.17 captures the target's verify at the tree's width N), and the
target alone eager (target-eager) to separate the graphs' share from the work's. Every decode line also
says whether that step ran on a graph; the summary records it. --sync-check counts the host
synchronisations inside every decode step instead of timing it cleanly (tests/device/ddtree_sync_check.py).

Memory: sglang's own lines (tests/device/envelope_runs.parse_log): weights, mamba slots, the verify
snapshots (intermediate ssm / conv), KV tokens, the running-request cap.

Writes DIR/cost.json after every server (a time-out keeps what ran) and DIR/server-<run>.log; a run
that would start after --deadline-s is recorded as skipped. tests/device/ddtree_cost_report.py turns
cost.json into the table, the plot and envelopes.json. Exit status 0 when every requested run measured
every batch size.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import re
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ddtree_check  # noqa: E402  (the device scripts' server launcher)
import ddtree_sync_check  # noqa: E402  (--sync-check)
import envelope_runs  # noqa: E402  (sglang's own memory lines)

RUN_NAMES = ("target", "target-eager", "dflash")
DECODE_LINE = re.compile(
    r"Decode batch.*?#running-req: (?P<running>\d+),.*?(?:accept len: (?P<accept>[\d.]+), .*?)?"
    r"cuda graph: (?P<graph>True|False), gen throughput \(token/s\): (?P<tput>[\d.]+)"
)
PROMPT_LEN = 128
# Seconds a server needs before its first step (dummy 27B load, pools, graphs): a run is not started
# when less than this is left before --deadline-s.
START_ALLOWANCE_S = 90


def log(msg):
    print("[ddtree-cost] %s" % msg, flush=True)


def vocab_of(target):
    """The target's vocabulary size (a conditional model's text_config): prompt ids are drawn below it."""
    cfg = json.loads((pathlib.Path(target) / "config.json").read_text())
    return int((cfg.get("text_config") or cfg)["vocab_size"])


def random_prompt(rng, vocab):
    return [rng.randrange(10, vocab) for _ in range(PROMPT_LEN)]


def block_of(draft):
    cfg = json.loads((pathlib.Path(draft) / "config.json").read_text())
    return int((cfg.get("dflash_config") or {}).get("block_size") or cfg["block_size"])


# The tree builder of a DDTREE run, by the name's suffix (SGLANG_DDTREE_TREE_BUILDER): ddtree16 the set's
# default (one Triton program per request since 2026-12-05), ddtree16t the same named, ddtree16g the array
# builder replayed from a CUDA graph (the default before), ddtree16e the array builder launched op by op. A last
# suffix s0 / s1 / s2 sets SGLANG_DDTREE_STEP_GRAPH (none: the set's default, 2 since 2026-12-06): ddtree16s0 is
# the eager step the cost rows before that date measured.
BUILDER_SUFFIXES = {"": None, "t": "triton", "g": "graph", "e": "eager"}
DDTREE_RUN = re.compile(r"ddtree(\d+)([%s]?)(?:s([012]))?" % "".join(BUILDER_SUFFIXES))


def budget_of(run):
    """N of a DDTREE run (``ddtree16``, ``ddtree16t``, ``ddtree16g``, ``ddtree16e``, ``ddtree16s0``, ...)."""
    found = DDTREE_RUN.fullmatch(run)
    return int(found.group(1)) if found else None


def builder_of(run):
    """The SGLANG_DDTREE_TREE_BUILDER a DDTREE run sets (None: the set's default, triton)."""
    found = DDTREE_RUN.fullmatch(run)
    return BUILDER_SUFFIXES[found.group(2)] if found else None


def step_graph_of(run):
    """The SGLANG_DDTREE_STEP_GRAPH a DDTREE run sets (None: the set's default)."""
    found = DDTREE_RUN.fullmatch(run)
    return found.group(3) if found else None


def ddtree_env(run):
    """The environment a DDTREE run's server gets: its budget, and the builder and step graph its name sets."""
    env = {
        "SGLANG_DDTREE_BUDGET": str(budget_of(run)),
        "SGLANG_DDTREE_TREE_BUILDER": builder_of(run),
        "SGLANG_DDTREE_STEP_GRAPH": step_graph_of(run),
    }
    return {name: value for name, value in env.items() if value}


def valid_run(run):
    return run in RUN_NAMES or DDTREE_RUN.fullmatch(run) is not None


def server_flags(target, draft, run, batches, *, mem=0.9, context=4096):
    """(launch flags, extra environment) of one run. Graphs where sglang uses them for that mode."""
    common = [
        "--model-path", str(target), "--load-format", "dummy", "--dtype", "bfloat16",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
        "--mem-fraction-static", str(mem), "--context-length", str(context),
        "--max-running-requests", str(max(batches)), "--disable-radix-cache", "--skip-tokenizer-init",
        "--decode-log-interval", "1",
    ]  # fmt: skip
    if run == "target-eager":
        return [*common, "--disable-cuda-graph"], {}
    if run == "target":
        return [*common, "--cuda-graph-bs", *map(str, sorted(set(batches)))], {}
    spec = [
        "--speculative-draft-model-path", str(draft), "--speculative-num-draft-tokens", str(block_of(draft)),
        "--speculative-draft-attention-backend", "triton",
    ]  # fmt: skip
    if run == "dflash":
        return [*common, "--cuda-graph-bs", *map(str, sorted(set(batches))), "--speculative-algorithm", "DFLASH",
                *spec], {}  # fmt: skip
    # DDTREE: graphs as DFLASH's (the set captures the target's verify at the tree's width N with triton
    # attention; a decode line says cuda graph False where a batch ran eager).
    return [*common, "--cuda-graph-bs", *map(str, sorted(set(batches))), "--speculative-algorithm", "DDTREE",
            *spec], ddtree_env(run)  # fmt: skip


def decode_steps(text):
    """[(running, accept length, on a graph, ms)] of every "Decode batch" line (interval 1: one step each)."""
    steps = []
    for m in DECODE_LINE.finditer(envelope_runs.ANSI.sub("", text)):
        running, tput = int(m["running"]), float(m["tput"])
        accept = float(m["accept"]) if m["accept"] else 1.0
        ms = 1000.0 * running * accept / tput if tput > 0 else None
        steps.append((running, accept, m["graph"] == "True", ms))
    return steps


def _pct(sorted_vals, q):
    """Nearest-rank percentile of an already sorted list."""
    k = max(0, min(len(sorted_vals) - 1, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[k]


def summarize(steps, batch, warmup):
    """The sample: steps at #running-req == batch after the first ``warmup`` of them."""
    at_batch = [s for s in steps if s[0] == batch and s[3] is not None]
    sample = at_batch[warmup:]
    if not sample:
        return {"batch": batch, "steps": 0, "step_ms": None, "error": "no decode step at this batch size"}
    ms = sorted(s[3] for s in sample)
    graphs = {s[2] for s in sample}
    return {
        "batch": batch,
        "steps": len(sample),
        "warmup_steps_dropped": len(at_batch) - len(sample),
        "step_ms": round(statistics.median(ms), 3),
        "p10_ms": round(_pct(ms, 0.10), 3),
        "p90_ms": round(_pct(ms, 0.90), 3),
        "min_ms": round(ms[0], 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
        "accept_length_mean": round(statistics.fmean(s[1] for s in sample), 3),
        "cuda_graph": graphs.pop() if len(graphs) == 1 else "mixed",
    }


def generate(server, prompts, tokens, temperature=0.0):
    def one(ids):
        payload = {
            "input_ids": ids,
            "sampling_params": {"temperature": temperature, "max_new_tokens": tokens, "ignore_eos": True},
        }
        return ddtree_check.http_json(server.url + "/generate", payload, timeout=300)

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(one, prompts))
    wall = time.monotonic() - start
    metas = [a.get("meta_info", {}) for a in answers]
    steps = max((m.get("spec_verify_ct") or m.get("completion_tokens") or 0) for m in metas)
    return {"wall_s": round(wall, 3), "client_steps": steps, "client_ms_per_step": round(1000 * wall / steps, 2)}


def measure_batch(server, batch, args, rng):
    prompts = [random_prompt(rng, vocab_of(args.target)) for _ in range(batch)]
    offset = server.log_path.stat().st_size
    client = generate(server, prompts, args.tokens, args.temperature)
    time.sleep(0.5)  # the last decode line
    with open(server.log_path, "rb") as handle:
        handle.seek(offset)
        text = handle.read().decode(errors="replace")
    row = summarize(decode_steps(text), batch, args.warmup_steps)
    row.update(client)
    log("%s batch %d: %s" % (server.name, batch, row))
    return row


def measure(args, run, index, out):
    flags, extra_env = server_flags(args.target, args.draft, run, args.batches, mem=args.mem)
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_DDTREE_BUDGET"}
    env.update(HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1", **extra_env)
    res = {"run": run, "budget": budget_of(run), "launch_flags": flags, "env": extra_env}
    sync_file = out / ("sync-check-%s.json" % run)
    if args.sync_check:
        env = ddtree_sync_check.server_env(env, sync_file)
    server = ddtree_check.Server(run, args.python, flags, env=env, port=args.port + index, out=out)
    try:
        res["ready_s"] = round(server.wait_ready(args.ready_timeout), 1)
        rng = random.Random(1202)
        generate(server, [random_prompt(rng, vocab_of(args.target))], 8)  # first-use compiles
        res["rows"] = [measure_batch(server, b, args, rng) for b in args.batches]
    except Exception as exc:
        res["error"] = str(exc)
        log("%s FAILED: %s" % (run, exc))
    finally:
        server.stop()
    if args.sync_check:
        res["sync_check"] = ddtree_sync_check.summarize(ddtree_sync_check.read(sync_file))
        log("%s sync check: %s" % (run, res["sync_check"]))
    res["memory"] = envelope_runs.parse_log(server.log_path.read_text(errors="replace"))
    res["log"] = server.log_path.name
    return res


def start_holder(args, out):
    """gpu_holder.py keeping --free-gib free (the ct200 card's ~96 GiB); (process, what it saw)."""
    proc = subprocess.Popen(
        [args.python, str(HERE / "gpu_holder.py"), str(args.free_gib)],
        stdout=subprocess.PIPE, stderr=open(out / "gpu-holder.log", "wb"), text=True,
    )  # fmt: skip
    seen = json.loads(proc.stdout.readline())
    log("gpu holder: %s" % seen)
    return proc, seen


def complete(results, runs):
    """Every requested run measured every batch size."""

    def measured(r):
        return bool(r.get("rows")) and all(row.get("step_ms") is not None for row in r["rows"])

    return all(any(r["run"] == run and measured(r) for r in results) for run in runs)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True)
    p.add_argument("--target", required=True, help="config-only 27B target dir (build_tiny_models --with-27b)")
    p.add_argument("--draft", required=True, help="config-only 27B DFlash draft dir")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--runs", default="target,dflash,ddtree16,ddtree32,ddtree64,target-eager",
        help="target, target-eager, dflash, ddtree<N>[t|g|e][s0|s1|s2] (tree builder, step graph level)",
    )  # fmt: skip
    p.add_argument("--batches", default="1,8")
    p.add_argument("--tokens", type=int, default=160, help="new tokens per request (steps per sample)")
    p.add_argument("--warmup-steps", type=int, default=16, help="first steps at the batch size left out")
    p.add_argument(
        "--temperature", type=float, default=0.0,
        help="every request's temperature (0: greedy; above 0 DDTREE verifies by tree speculative sampling)",
    )  # fmt: skip
    p.add_argument("--mem", type=float, default=0.9, help="--mem-fraction-static")
    p.add_argument("--port", type=int, default=31600)
    p.add_argument("--ready-timeout", type=int, default=300)
    p.add_argument("--deadline-s", type=float, default=500, help="start no run after this many seconds")
    p.add_argument("--free-gib", type=float, help="cut the card to this much free memory (gpu_holder.py)")
    p.add_argument("--apply-patchset", help="apply this patch set to the python's sglang first")
    p.add_argument(
        "--sync-check", action="store_true",
        help="count the host synchronisations inside every decode step (tests/device/ddtree_sync_check.py; a "
        "run's sync_check in cost.json): a correctness run, keep it apart from speed records",
    )  # fmt: skip
    return p


def parse_args(argv=None):
    p = build_parser()
    args = p.parse_args(argv)
    args.batches = sorted({int(b) for b in args.batches.split(",") if b.strip()})
    args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in args.runs if not valid_run(r)]
    if bad or not args.runs or not args.batches or min(args.batches) < 1:
        p.error("--runs: each of target, target-eager, dflash or ddtreeN; --batches: sizes >= 1 (got %s)" % bad)
    if args.warmup_steps >= args.tokens:
        p.error("--warmup-steps must be below --tokens")
    return args


def main(argv=None):
    ddtree_check.stop_on_sigterm()
    args = parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    record = {
        "target": args.target, "draft": args.draft, "batches": args.batches, "tokens": args.tokens,
        "warmup_steps": args.warmup_steps, "temperature": args.temperature, "mem_fraction_static": args.mem,
        "free_gib": args.free_gib,
        "target_config": json.loads((pathlib.Path(args.target) / "config.json").read_text()),
        "draft_config": json.loads((pathlib.Path(args.draft) / "config.json").read_text()),
        "results": [],
    }  # fmt: skip
    if args.apply_patchset:
        record["patchset"] = ddtree_check.apply_patchset(args.python, args.apply_patchset, out)
    holder = None
    if args.free_gib:
        holder, record["gpu_holder"] = start_holder(args, out)
    try:
        for i, run in enumerate(args.runs):
            left = args.deadline_s - (time.monotonic() - t0)
            if left < START_ALLOWANCE_S:
                record["results"].append({"run": run, "skipped": "deadline: %.0f s left" % left})
                log("%s skipped (%.0f s left)" % (run, left))
                continue
            record["results"].append(measure(args, run, i, out))
            (out / "cost.json").write_text(json.dumps(record, indent=1))
    finally:
        if holder is not None:
            holder.terminate()
            holder.wait(30)
    record["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "cost.json").write_text(json.dumps(record, indent=1))
    log("done in %.1fs" % record["wall_s"])
    return 0 if complete(record["results"], args.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
