#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a speculative step costs at the real geometry: Qwen3.6-27B text + its DFlash draft, dummy weights.

    ddtree_cost.py --python PY --pair-target T --pair-draft D --out DIR
                   [--layers 64] [--runs target,dflash,ddtree16,ddtree32,ddtree64] [--batches 1,8]

Run on the device machine (tests/device/run-ddtree --cost): sglang 0.5.17 with ddtree-0.5.17 applied.
The model dirs are made from a tiny hybrid pair's (build_tiny_models.build_hybrid_pair: its class,
processor and vision config are what sglang 0.5.17 needs to serve a Qwen3_5ForConditionalGeneration
target with DFLASH), with the text and draft geometry of Qwen3.6-27B / Qwen3.6-27B-DFlash written
into their config.json and no weights (--load-format dummy). --layers below 64 keeps the 3 GDN + 1
attention pattern with fewer layers (the memory figures below are per layer and scale exactly).

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
import shutil
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import ddtree_check  # noqa: E402  (the device scripts' server launcher)

# Qwen3.6-27B text_config and Qwen3.6-27B-DFlash (docs: shared context MISSION-MODEL-H200.md).
TEXT_27B = {
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "vocab_size": 248320,
    "full_attention_interval": 4,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 48,
    "linear_key_head_dim": 128,
    "linear_value_head_dim": 128,
    "linear_conv_kernel_dim": 4,
    "mamba_ssm_dtype": "float32",
    "num_attention_heads": 24,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "attn_output_gate": True,
    "partial_rotary_factor": 0.25,
}
DRAFT_27B = {
    "hidden_size": 5120,
    "intermediate_size": 17408,
    "vocab_size": 248320,
    "num_hidden_layers": 5,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "block_size": 16,
    "layer_types": ["sliding_attention"] * 4 + ["full_attention"],
    "sliding_window": 2048,
}
DRAFT_TARGET_LAYERS_27B = [1, 16, 31, 46, 61]
MASK_TOKEN_27B = 248070
BLOCK = 16
MAMBA_LINE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: ([\d.]+)GB, "
    r"ssm_state size: ([\d.]+)GB intermediate_ssm_state_cache size: ([\d.]+)GB "
    r"intermediate_conv_window_cache size: ([\d.]+)GB"
)


def log(msg):
    print("[ddtree-cost] %s" % msg, flush=True)


def _copy_without_weights(src, dst):
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    for f in pathlib.Path(src).iterdir():
        if f.is_file() and not f.name.endswith((".safetensors", ".bin", ".safetensors.index.json")):
            shutil.copy2(f, dst / f.name)


def make_models(pair_target, pair_draft, out, layers):
    """(target dir, draft dir) at the 27B geometry with `layers` target layers, no weights."""
    if layers % 4:
        raise SystemExit("--layers must be a multiple of 4 (3 GDN + 1 attention), got %d" % layers)
    target, draft = out / "target-27b", out / "draft-27b"
    _copy_without_weights(pair_target, target)
    _copy_without_weights(pair_draft, draft)
    cfg = json.loads((target / "config.json").read_text())
    text = cfg.get("text_config", cfg)
    text.update(TEXT_27B, num_hidden_layers=layers)
    if "layer_types" in text:
        text["layer_types"] = ["linear_attention"] * 3 + ["full_attention"]
        text["layer_types"] = text["layer_types"] * (layers // 4)
    if "vocab_size" in cfg and cfg is not text:
        cfg["vocab_size"] = TEXT_27B["vocab_size"]
    (target / "config.json").write_text(json.dumps(cfg, indent=1))
    dcfg = json.loads((draft / "config.json").read_text())
    dcfg.update(DRAFT_27B, num_target_layers=layers)
    ids = sorted({min(layers - 2, round(i * layers / 64)) for i in DRAFT_TARGET_LAYERS_27B})
    dflash = dict(dcfg.get("dflash_config") or {})
    dflash.update(block_size=BLOCK, mask_token_id=MASK_TOKEN_27B, target_layer_ids=ids)
    dcfg["dflash_config"] = dflash
    (draft / "config.json").write_text(json.dumps(dcfg, indent=1))
    return target, draft


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
        "--speculative-draft-model-path", str(draft), "--speculative-num-draft-tokens", str(BLOCK),
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


def expected_snapshot_gb(run, layers):
    steps = 0 if run == "target" else BLOCK if run == "dflash" else int(run[len("ddtree") :])
    gdn = layers - layers // TEXT_27B["full_attention_interval"]
    t = TEXT_27B
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
    res["expected_snapshots_ssm_per_slot_gib"] = expected_snapshot_gb(run, args.layers)
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


def table(results, layers):
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
    lines.append("%d target layers (Qwen3.6-27B has 64), dummy weights, eager, one server at a time." % layers)
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True)
    p.add_argument("--pair-target", required=True, help="a tiny hybrid target dir (its class, processor)")
    p.add_argument("--pair-draft", required=True, help="its DFlash draft dir")
    p.add_argument("--out", required=True)
    p.add_argument("--layers", type=int, default=64)
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
    target, draft = make_models(args.pair_target, args.pair_draft, out, args.layers)
    t0 = time.monotonic()
    results = []
    for i, run in enumerate(runs):
        res = measure(args, run, (target, draft), out, index=2 * i, batches=args.batches)
        results.append(res)
        if "error" in res and max(args.batches) > 1:
            # Did not start with max(batches) slots (the snapshot pool): batch 1 alone, one slot.
            results.append(measure(args, run, (target, draft), out, index=2 * i + 1, batches=[1]))
        (out / "cost.json").write_text(json.dumps({"layers": args.layers, "results": results}, indent=1))
    (out / "cost-table.md").write_text(table(results, args.layers))
    print(table(results, args.layers))
    log("done in %.1fs" % (time.monotonic() - t0))
    return 0 if all(any("rows" in r for r in results if r["run"] == run) for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
