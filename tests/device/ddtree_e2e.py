#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 32 on a GPU: end-to-end decode speed of DFLASH vs DDTREE, and DDTREE's temperature-1 distribution.

    ddtree_e2e.py --python VENV/bin/python --target T --draft D --prompts-file P --out DIR
                  [--budgets 8,16] [--prompts 8] [--tokens 128] [--samples 240] [--apply-patchset SET]
                  [--rounds K] [--ddtree-env KEY=VALUE] [--rendered RENDERED.json]

On the trained tiny hybrid pair (train_tiny_hybrid_pair.py), as the collection deploys: radix cache ON
with the mamba ``extra_buffer`` strategy, triton attention, the overlap scheduler. One server at a time
(the whole GPU): DFLASH, DDTREE per budget, then the target alone.

1. **speed** (batch 1): the same held-out prompts one after another, greedy and temperature 1:
   completion tokens / wall per request (prefill included; ``--tokens`` makes it small), the median over
   prompts, the accept length (``spec_accept_length``); the ratio DDTREE / DFLASH per budget (the
   issue's goal: >= 1.1 at batch 1, greedy). ``--rounds K`` runs DFLASH and DDTREE K times, alternating
   on the same machine, and adds each round's paired ratio and their median (one call's ratio moved by
   20-30 % between calls on an H100: tests/device/records/2026-12-05-h100-ddtree-e2e-triton).
2. **greedy lossless**: each speculative server's greedy output_ids against the target's (exact match
   count; a near-tie is not excused here: ddtree_check.py's replay is the lossless proof).
3. **temperature 1 in distribution**: per prompt ``--samples`` generations of 3 tokens at temperature 1
   (8 at once, so the tree sampling runs batched) from DDTREE (the largest budget) and from the target;
   the tokens at positions 1 and 2 (drawn by speculative steps; position 0 is the prefill's) are
   compared with a two-sample chi-square test per prompt and position (cells under 5 expected pooled).
   The run passes when the smallest p is above ``--alpha`` / the number of tests (Bonferroni); every p is
   recorded.

Writes DIR/e2e.json and DIR/e2e-summary.txt; server logs in DIR. Stdlib only here (the statistics are
tested on a CPU: tests/device/test_ddtree_e2e.py). Exit status 0 when the distribution test passes
and every server ran.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ddtree_check  # tests/device: Server, http_json, apply_patchset

log = ddtree_check.log


# --- statistics (pure; tests/device/test_ddtree_e2e.py) ------------------------------------------


def gamma_q(a, x):
    """Regularised upper incomplete gamma Q(a, x): the chi-square survival function is Q(df / 2, x / 2)."""
    if x <= 0:
        return 1.0
    gln = math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        ap = a
        for _ in range(10000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(-x + a * math.log(x) - gln))
    b, c, d = x + 1 - a, 1e300, 1.0 / (x + 1 - a)
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1.0 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(-x + a * math.log(x) - gln) * h


def two_sample_chi_square(a, b, min_expected=5.0):
    """Homogeneity of two samples of categories (lists of hashables): (statistic, df, p, cells).

    Categories whose expected count falls under ``min_expected`` in either sample are pooled into one
    cell (dropped if the pool itself stays under it)."""
    na, nb = len(a), len(b)
    if not na or not nb:
        raise ValueError("both samples must be non-empty")
    counts = {}
    for sample, col in ((a, 0), (b, 1)):
        for item in sample:
            counts.setdefault(item, [0, 0])[col] += 1
    total = na + nb

    def small(cell):
        return min(na, nb) * (cell[0] + cell[1]) / total < min_expected

    cells = [c for c in counts.values() if not small(c)]
    pooled = [sum(c[0] for c in counts.values() if small(c)), sum(c[1] for c in counts.values() if small(c))]
    if pooled != [0, 0] and not small(pooled):
        cells.append(pooled)
    if len(cells) < 2:
        return 0.0, 0, 1.0, len(cells)
    stat = 0.0
    for ca, cb in cells:
        row = ca + cb
        for observed, n in ((ca, na), (cb, nb)):
            expected = n * row / total
            stat += (observed - expected) ** 2 / expected
    df = len(cells) - 1
    return stat, df, gamma_q(df / 2.0, stat / 2.0), len(cells)


def distribution_verdict(tests, alpha):
    """tests: [{"p": ...}]; passes when the smallest p is above alpha / len(tests) (Bonferroni)."""
    if not tests:
        return {"pass": False, "why": "no test ran"}
    threshold = alpha / len(tests)
    worst = min(t["p"] for t in tests)
    return {"pass": worst > threshold, "min_p": worst, "threshold": threshold, "tests": len(tests)}


# --- servers --------------------------------------------------------------------------------------


def plan_runs(args):
    common = [
        "--model-path", args.target, "--dtype", "bfloat16", "--attention-backend", "triton",
        "--sampling-backend", "pytorch", "--grammar-backend", "none", "--mem-fraction-static", str(args.mem),
        "--context-length", "2048", "--max-running-requests", "8", "--skip-tokenizer-init",
        # as the collection deploys a hybrid target: the radix cache on, the mamba extra_buffer strategy
        "--mamba-radix-cache-strategy", "extra_buffer",
        *args.extra_flag,
    ]  # fmt: skip
    spec = [
        "--speculative-draft-model-path", args.draft, "--speculative-num-draft-tokens", str(args.block),
        "--speculative-draft-attention-backend", "triton",
    ]  # fmt: skip
    runs = [("dflash", [*common, "--speculative-algorithm", "DFLASH", *spec], {})]
    # The largest budget and the target first: the distribution test needs both, the smaller
    # budgets come last (a deadline skips them first).
    for n in sorted(args.budget_list, reverse=True):
        runs.append(
            ("ddtree-n%d" % n, [*common, "--speculative-algorithm", "DDTREE", *spec], {"SGLANG_DDTREE_BUDGET": str(n)})
        )
    runs.insert(2, ("target", common, {}))
    return runs


def generate(server, ids, tokens, temperature):
    payload = {
        "input_ids": ids,
        "sampling_params": {"temperature": temperature, "max_new_tokens": tokens, "ignore_eos": True},
    }
    start = time.monotonic()
    ans = ddtree_check.http_json(server.url + "/generate", payload, timeout=300)
    wall = time.monotonic() - start
    meta = ans.get("meta_info", {})
    return {
        "output_ids": ans.get("output_ids"),
        "completion_tokens": meta.get("completion_tokens"),
        "spec_accept_length": meta.get("spec_accept_length"),
        "wall_s": round(wall, 4),
    }


def speed(server, prompts, tokens, temperature):
    generate(server, prompts[0], 8, temperature)  # warm-up (first-use compiles)
    rows = [generate(server, ids, tokens, temperature) for ids in prompts]
    rates = [r["completion_tokens"] / r["wall_s"] for r in rows if r["completion_tokens"] and r["wall_s"]]
    accepts = [r["spec_accept_length"] for r in rows if r["spec_accept_length"] is not None]
    return {
        "rows": rows,
        "tokens_per_s_median": round(statistics.median(rates), 2) if rates else None,
        "tokens_per_s_each": [round(x, 2) for x in rates],
        "accept_length_mean": round(statistics.fmean(accepts), 4) if accepts else None,
    }


def samples(server, prompt, count, tokens=3):
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda _i: generate(server, prompt, tokens, 1.0), range(count)))
    return [a["output_ids"] for a in answers]


def rendered_runs(path):
    """``[(name, argv, env)]`` from deploy_command_run.py --render-only: the deploy's own commands, in the
    order plan_runs gives (the largest budget and the target first)."""
    rendered = json.loads(pathlib.Path(path).read_text())
    budgets = sorted((int(k[len("ddtree-n") :]) for k in rendered if k.startswith("ddtree-n")), reverse=True)
    order = ["dflash", *("ddtree-n%d" % n for n in budgets)]
    order.insert(2, "target")
    return [(name, rendered[name]["argv"], rendered[name]["env"]) for name in order if name in rendered]


def with_ddtree_env(runs, pairs):
    """``runs`` with each KEY=VALUE of ``pairs`` added to the DDTREE runs' environment (the others unchanged)."""
    extra = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError("--ddtree-env takes KEY=VALUE, got %r" % pair)
        extra[key] = value
    return [
        (name, flags, dict(env, **extra) if name.startswith("ddtree-") else env, command)
        for name, flags, env, command in runs
    ]


def with_rounds(runs, rounds):
    """``runs`` once, then ``rounds - 1`` more times without the target (its reference and samples are taken
    once), each later server named ``<name>@<round>``: DFLASH and DDTREE alternate on one machine, so a drift
    of the machine over minutes moves both sides of a round's ratio alike."""
    if rounds < 1:
        raise ValueError("--rounds must be at least 1, got %r" % rounds)
    out = list(runs)
    for r in range(2, rounds + 1):
        out += [("%s@%d" % (name, r), *rest) for name, *rest in runs if name != "target"]
    return out


def base_name(name):
    """``dflash@2`` -> ``dflash``: the server a later round repeats."""
    return name.partition("@")[0]


def paired_ratios(results, tree, mode):
    """Per round, ``tree``'s tokens/s over DFLASH's in the same round (None where either side has none)."""
    ratios = []
    for name in results:
        if base_name(name) != "dflash":
            continue
        suffix = name[len("dflash") :]
        a = ((results.get(tree + suffix) or {}).get(mode) or {}).get("tokens_per_s_median")
        b = ((results[name] or {}).get(mode) or {}).get("tokens_per_s_median")
        ratios.append(round(a / b, 3) if a and b else None)
    return ratios


def run_server(name, flags, env, args, *, prompts, dist_prompts, out, command=None):
    server = ddtree_check.Server(name, args.python, flags, env=env, port=args.port, out=out, command=command)
    try:
        ready = server.wait_ready(args.ready_timeout)
        log("%s ready in %.1fs" % (name, ready))
        res = {"ready_s": round(ready, 1), "command": server.cmd, "rendered": command is not None}
        res["greedy"] = speed(server, prompts, args.tokens, 0.0)
        res["temperature_1"] = speed(server, prompts, args.tokens, 1.0)
        if name in ("target", args.dist_run):
            res["samples"] = [samples(server, p, args.samples) for p in dist_prompts]
        log(
            "%s: greedy %.1f tok/s accept %s; temperature 1 %.1f tok/s accept %s"
            % (
                name,
                res["greedy"]["tokens_per_s_median"] or 0,
                res["greedy"]["accept_length_mean"],
                res["temperature_1"]["tokens_per_s_median"] or 0,
                res["temperature_1"]["accept_length_mean"],
            )
        )
        return res
    except Exception as exc:  # recorded: the next server still runs
        log("%s FAILED: %r" % (name, exc))
        return {"error": repr(exc)}
    finally:
        server.stop()


def compare(results, args):
    checks = {}
    dflash = results.get("dflash", {})
    for n in args.budget_list:
        tree = results.get("ddtree-n%d" % n, {})
        for mode in ("greedy", "temperature_1"):
            a = (tree.get(mode) or {}).get("tokens_per_s_median")
            b = (dflash.get(mode) or {}).get("tokens_per_s_median")
            checks["speed_ratio_n%d_%s" % (n, mode)] = round(a / b, 3) if a and b else None
            paired = paired_ratios(results, "ddtree-n%d" % n, mode)
            if len(paired) > 1:  # --rounds: every round's ratio, and their median
                checks["speed_ratio_n%d_%s_rounds" % (n, mode)] = paired
                measured = [x for x in paired if x is not None]
                checks["speed_ratio_n%d_%s_median" % (n, mode)] = (
                    round(statistics.median(measured), 3) if measured else None
                )
    target_rows = (results.get("target", {}).get("greedy") or {}).get("rows") or []
    for name, res in results.items():
        rows = (res.get("greedy") or {}).get("rows") or []
        if name != "target" and "@" not in name and rows and target_rows:
            same = sum(1 for x, y in zip(rows, target_rows) if x["output_ids"] == y["output_ids"])
            checks["greedy_identical_%s" % name] = "%d/%d" % (same, len(rows))
    tests = []
    ref, tree = results.get("target", {}).get("samples"), results.get(args.dist_run, {}).get("samples")
    if ref and tree:
        for i, (sa, sb) in enumerate(zip(tree, ref)):
            for pos in (1, 2):
                a = [s[pos] for s in sa if s and len(s) > pos]
                b = [s[pos] for s in sb if s and len(s) > pos]
                stat, df, p, cells = two_sample_chi_square(a, b)
                tests.append({"prompt": i, "position": pos, "chi2": round(stat, 3), "df": df, "p": p, "cells": cells})
    checks["distribution_tests"] = tests
    checks["distribution"] = distribution_verdict(tests, args.alpha)
    return checks


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--draft", required=True)
    p.add_argument("--prompts-file", required=True, help="JSON list of prompts (token id lists)")
    p.add_argument("--out", required=True)
    p.add_argument("--budgets", default="8,16")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--samples", type=int, default=240, help="temperature-1 generations per prompt and server")
    p.add_argument("--dist-prompts", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--mem", type=float, default=0.5)
    p.add_argument("--port", type=int, default=31700)
    p.add_argument("--ready-timeout", type=int, default=300)
    p.add_argument("--apply-patchset")
    p.add_argument("--deadline-s", type=float, default=0, help="start no server after this many seconds (0: none)")
    p.add_argument(
        "--rounds", type=int, default=1,
        help="run the speculative servers this many times, alternating (the target once); ratios paired by round",
    )  # fmt: skip
    p.add_argument("--extra-flag", action="append", default=[])
    p.add_argument(
        "--ddtree-env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an environment variable for the DDTREE servers only (e.g. SGLANG_DDTREE_TREE_BUILDER=triton), recorded",
    )
    p.add_argument(
        "--rendered",
        help="deploy_command_run.py --render-only's JSON: run the deploy's own command and environment per server",
    )
    return p


def main(argv=None):
    ddtree_check.stop_on_sigterm()
    p = build_parser()
    args = p.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.budget_list = [int(b) for b in args.budgets.split(",") if b.strip()]
    args.dist_run = "ddtree-n%d" % max(args.budget_list)
    draft = json.loads((pathlib.Path(args.draft) / "config.json").read_text())
    args.block = int((draft.get("dflash_config") or {}).get("block_size") or draft.get("block_size") or 4)
    result = {
        "args": {k: v for k, v in vars(args).items()},
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    t0 = time.monotonic()
    if args.apply_patchset:
        result["patchset"] = ddtree_check.apply_patchset(args.python, args.apply_patchset, out)
    prompts = json.loads(pathlib.Path(args.prompts_file).read_text())[: args.prompts]
    dist_prompts = prompts[: args.dist_prompts]
    env = dict(os.environ, HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1")
    env.pop("SGLANG_DDTREE_BUDGET", None)
    results = {}
    if args.rendered:  # the deploy's own argv and environment (systemd's: nothing inherited)
        runs = [(name, [], rendered_env, argv) for name, argv, rendered_env in rendered_runs(args.rendered)]
    else:
        runs = [(name, flags, dict(env, **extra), None) for name, flags, extra in plan_runs(args)]
    runs = with_rounds(with_ddtree_env(runs, args.ddtree_env), args.rounds)
    for name, flags, run_env, command in runs:
        if args.deadline_s and time.monotonic() - t0 > args.deadline_s:
            results[name] = {"error": "skipped: past --deadline-s %s" % args.deadline_s}
            log("%s skipped (deadline)" % name)
            continue
        results[name] = run_server(
            name, flags, run_env, args, prompts=prompts, dist_prompts=dist_prompts, out=out, command=command
        )
    result["runs"] = results
    result["checks"] = compare(results, args)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "e2e.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = ["%s: %s" % (k, v) for k, v in result["checks"].items() if k != "distribution_tests"]
    lines += [
        "%s: ready %s s, greedy %s tok/s (accept %s), temperature 1 %s tok/s (accept %s)"
        % (
            name,
            res.get("ready_s"),
            (res.get("greedy") or {}).get("tokens_per_s_median"),
            (res.get("greedy") or {}).get("accept_length_mean"),
            (res.get("temperature_1") or {}).get("tokens_per_s_median"),
            (res.get("temperature_1") or {}).get("accept_length_mean"),
        )
        if "error" not in res
        else "%s: %s" % (name, res["error"])
        for name, res in results.items()
    ]
    (out / "e2e-summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = result["checks"]["distribution"]["pass"] and not any("error" in r for r in results.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
