#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a speculative step costs at the real geometry: Qwen3.6-27B text + its DFlash draft, dummy weights.

    ddtree_cost.py --python PY --target DIR --draft DIR --out DIR
                   [--runs target,dflash,ddtree16,ddtree32,ddtree64] [--batches 1,8]

Run on the device machine (tests/device/run-ddtree --cost): sglang 0.5.17 with ddtree-0.5.17 applied.
The model dirs are config-only, Qwen3.6-27B's geometry (Qwen3_5ForConditionalGeneration with its
processor) and Qwen3.6-27B-DFlash's (build_tiny_models.py --arch hybrid --with-27b: 27b-conditional,
27b-draft), served with --load-format dummy.

One server at a time (two 27B targets do not fit one H200 with their snapshot pools), eager
(--disable-cuda-graph: DDTREE verifies eagerly; DFLASH and the target alone are measured the same way
so the ratios compare like with like). Per server and batch size b: b requests of 128 prompt tokens at
once, decoded twice (8 and 72 new tokens, ignore_eos); the step cost is the extra wall time divided by
the extra steps (spec_verify_ct for speculative servers, new tokens for the target alone), so prefill
and the HTTP round trip cancel. With dummy weights a draft is never accepted: every step emits one
token, and the break-even accept length of a speculative step is its cost over the target's decode
step (the accepted tokens per step it needs to match the target alone).

Memory per request slot: from sglang's own "Mamba Cache is allocated" line (intermediate_ssm_state_cache
and intermediate_conv_window_cache over max_mamba_cache_size + 1 slots), next to what config.json
gives (verify tokens x GDN layers x value heads x key dim x value dim x 4 bytes). A server that does
not start (the snapshot pool does not fit) is recorded with its error: that is an answer too.

Writes DIR/cost.json and DIR/cost-table.md; exit status 0 when every requested server produced its rows.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import re
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ddtree_check  # noqa: E402  (the device scripts' server launcher)

MAMBA_LINE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: ([\d.]+)GB, "
    r"ssm_state size: ([\d.]+)GB intermediate_ssm_state_cache size: ([\d.]+)GB "
    r"intermediate_conv_window_cache size: ([\d.]+)GB"
)


def log(msg):
    print("[ddtree-cost] %s" % msg, flush=True)


def block_of(draft):
    cfg = json.loads((pathlib.Path(draft) / "config.json").read_text())
    return int((cfg.get("dflash_config") or {}).get("block_size") or cfg["block_size"])


def server_flags(target, draft, run, max_running=8):
    common = [
        "--model-path", str(target), "--load-format", "dummy", "--dtype", "bfloat16",
        "--attention-backend", "triton", "--sampling-backend", "pytorch", "--grammar-backend", "none",
        "--mem-fraction-static", "0.9", "--context-length", "4096", "--max-running-requests", str(max_running),
        "--disable-cuda-graph", "--disable-radix-cache", "--skip-tokenizer-init",
    ]  # fmt: skip
    if run == "target":
        return common, {}
    spec = [
        "--speculative-draft-model-path", str(draft), "--speculative-num-draft-tokens", str(block_of(draft)),
        "--speculative-draft-attention-backend", "triton",
    ]  # fmt: skip
    if run == "dflash":
        return [*common, "--speculative-algorithm", "DFLASH", *spec], {}
    budget = int(run[len("ddtree") :])
    return [*common, "--speculative-algorithm", "DDTREE", *spec], {"SGLANG_DDTREE_BUDGET": str(budget)}


def _batch(server, prompts, tokens):
    rows = ddtree_check.run_prompts(server, prompts, tokens, False)
    steps = [r["spec_verify_ct"] or r["completion_tokens"] or 0 for r in rows["rows"]]
    return rows["wall_s"], max(steps)


def step_cost(server, batch, rng, vocab):
    """Milliseconds per decode step at this batch size (difference of a short and a long decode)."""
    prompts = [[rng.randrange(10, vocab) for _ in range(128)] for _ in range(batch)]
    short_wall, short_steps = _batch(server, prompts, 8)
    long_wall, long_steps = _batch(server, prompts, 72)
    steps = long_steps - short_steps
    return {
        "batch": batch,
        "step_ms": round(1000.0 * (long_wall - short_wall) / steps, 2) if steps > 0 else None,
        "steps": [short_steps, long_steps],
        "walls_s": [short_wall, long_wall],
    }


def memory_of(log_path):
    m = MAMBA_LINE.search(log_path.read_text(errors="replace"))
    if not m:
        return None
    slots, conv, ssm, inter_ssm, inter_conv = int(m[1]), float(m[2]), float(m[3]), float(m[4]), float(m[5])
    return {
        "slots": slots,
        "ssm_state_gb": ssm,
        "conv_state_gb": conv,
        "snapshots_ssm_gb": inter_ssm,
        "snapshots_conv_gb": inter_conv,
        "snapshots_per_slot_gb": round((inter_ssm + inter_conv) / (slots + 1), 3),
    }


def expected_snapshot_gb(run, target, draft):
    """GiB of ssm snapshots per request slot from config.json: steps x GDN layers x HV x K x V x 4."""
    cfg = json.loads((pathlib.Path(target) / "config.json").read_text())
    t = cfg.get("text_config") or cfg
    steps = 0 if run == "target" else block_of(draft) if run == "dflash" else int(run[len("ddtree") :])
    layers = int(t["num_hidden_layers"])
    gdn = layers - layers // int(t["full_attention_interval"])
    ssm = steps * gdn * t["linear_num_value_heads"] * t["linear_key_head_dim"] * t["linear_value_head_dim"] * 4
    return round(ssm / (1 << 30), 3)


def measure(args, run, models, out, *, index, batches):
    target, draft = models
    flags, extra_env = server_flags(target, draft, run, max(batches))
    env = {k: v for k, v in os.environ.items() if k != "SGLANG_DDTREE_BUDGET"}
    env.update(HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1", **extra_env)
    name = run if batches == args.batches else "%s-bs%d" % (run, max(batches))
    server = ddtree_check.Server(name, args.python, flags, env=env, port=args.port + index, out=out)
    res = {"run": run, "max_running": max(batches)}
    res["expected_snapshots_ssm_per_slot_gib"] = expected_snapshot_gb(run, target, draft)
    try:
        res["ready_s"] = round(server.wait_ready(args.ready_timeout), 1)
        rng = random.Random(1201)
        res["rows"] = [step_cost(server, b, rng, 240000) for b in batches]
    except Exception as exc:
        res["error"] = str(exc)
        log("%s FAILED: %s" % (run, exc))
    finally:
        server.stop()
    res["memory"] = memory_of(server.log_path)
    log("%s: %s" % (run, {k: v for k, v in res.items() if k != "rows"}))
    return res


def table(results):
    target = next((r for r in results if r["run"] == "target" and "rows" in r), None)
    base = {row["batch"]: row["step_ms"] for row in target["rows"]} if target else {}
    lines = [
        "| run | batch | step ms | break-even accept length | snapshots per slot GB (sglang) "
        "| ssm snapshots per slot GiB (config) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        mem = r.get("memory") or {}
        for row in r.get("rows", []) or [{"batch": "-", "step_ms": None}]:
            ms, b = row["step_ms"], row["batch"]
            be = round(ms / base[b], 2) if ms and base.get(b) else None
            lines.append(
                "| %s | %s | %s | %s | %s | %s |"
                % (r["run"], b, ms, be if r["run"] != "target" else 1.0, mem.get("snapshots_per_slot_gb"),
                   r["expected_snapshots_ssm_per_slot_gib"])
            )  # fmt: skip
        if "error" in r:
            lines.append("| %s | - | error: %s | | | |" % (r["run"], r["error"][:120]))
    lines.append("")
    lines.append("Qwen3.6-27B geometry, dummy weights, eager (--disable-cuda-graph), one server at a time.")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True)
    p.add_argument("--target", required=True, help="config-only 27B target dir (build_tiny_models --with-27b)")
    p.add_argument("--draft", required=True, help="config-only 27B DFlash draft dir")
    p.add_argument("--out", required=True)
    p.add_argument("--runs", default="target,dflash,ddtree16,ddtree32,ddtree64")
    p.add_argument("--batches", default="1,8")
    p.add_argument("--port", type=int, default=31600)
    p.add_argument("--ready-timeout", type=int, default=400)
    p.add_argument("--apply-patchset", help="apply this patch set to the python's sglang first")
    args = p.parse_args(argv)
    args.batches = [int(b) for b in args.batches.split(",") if b.strip()]
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    for r in runs:
        if r not in ("target", "dflash") and not re.fullmatch(r"ddtree\d+", r):
            p.error("--runs: %r is not target, dflash or ddtreeN" % r)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.apply_patchset:
        ddtree_check.apply_patchset(args.python, args.apply_patchset, out)
    target, draft = args.target, args.draft
    t0 = time.monotonic()
    results = []
    for i, run in enumerate(runs):
        res = measure(args, run, (target, draft), out, index=2 * i, batches=args.batches)
        results.append(res)
        if "error" in res and max(args.batches) > 1:
            # Did not start with max(batches) slots (the snapshot pool): batch 1 alone, one slot.
            results.append(measure(args, run, (target, draft), out, index=2 * i + 1, batches=[1]))
        (out / "cost.json").write_text(json.dumps({"target": target, "draft": draft, "results": results}, indent=1))
    (out / "cost-table.md").write_text(table(results))
    print(table(results))
    log("done in %.1fs" % (time.monotonic() - t0))
    return 0 if all(any("rows" in r for r in results if r["run"] == run) for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
