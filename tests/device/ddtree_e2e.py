#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 32 on a GPU: end-to-end decode speed of DFLASH vs DDTREE, and DDTREE's temperature-1 distribution.

    ddtree_e2e.py --python VENV/bin/python --target T --draft D --prompts-file P --out DIR
                  [--budgets 8,16] [--prompts 8] [--tokens 128] [--samples 240] [--apply-patchset SET]
                  [--rounds K] [--interleave K [--interleave-only] [--interleave-mem A,B]]
                  [--ddtree-env KEY=VALUE] [--rendered RENDERED.json]
    ddtree_e2e.py --summarize DIR/e2e.json...   (writes DIR/speed-summary.json beside each)
    ddtree_e2e.py --pool CALL/interleaved-ddtree-nN.json...   (several calls' pairs as one sample, as JSON)

On the trained tiny hybrid pair (train_tiny_hybrid_pair.py), as the collection deploys: radix cache ON
with the mamba ``extra_buffer`` strategy, triton attention, the overlap scheduler. One server at a time
(the whole GPU): DFLASH, DDTREE per budget, then the target alone.

1. **speed** (batch 1): the same held-out prompts one after another, greedy and temperature 1:
   completion tokens / wall per request (prefill included; ``--tokens`` makes it small), the median over
   prompts, the accept length (``spec_accept_length``); the ratio DDTREE / DFLASH per budget (the
   issue's goal: >= 1.1 at batch 1, greedy). ``--rounds K`` runs DFLASH and DDTREE K times, alternating
   on the same machine, and adds each round's paired ratio and their median (one call's ratio moved by
   20-30 % between calls on an H100: tests/device/records/2026-12-05-h100-ddtree-e2e-triton).
   ``--interleave K`` then measures each DDTREE budget against DFLASH with both servers up at once on the
   GPU (their --mem-fraction-static set to ``--interleave-mem``, DDTREE on the next port; nothing else
   of the command changes): every prompt goes to both back to back, the order alternating, K times, so
   the machine's drift (up to 84 % between two starts of one server on an H100:
   tests/device/records/2026-12-05-h100-ddtree-e2e-block16) moves both sides of every pair alike. The
   ratio is the geometric mean of the pairs' tokens/s ratios with its 95 % interval (Student t on the
   log ratios), and the ratio of the summed tokens over the summed wall times. ``--interleave-only``
   skips the one-at-a-time pass (its lossless and distribution checks then do not run). The DFLASH server
   starts once for every budget (each DDTREE budget starts and stops its own; after a failed pair DFLASH
   starts anew): one server start less per budget after the first.
2. **greedy lossless**: each speculative server's greedy output_ids against the target's (exact match
   count; a near-tie is not excused here: ddtree_check.py's replay is the lossless proof).
3. **temperature 1 in distribution**: per prompt ``--samples`` generations of 3 tokens at temperature 1
   (8 at once, so the tree sampling runs batched) from DDTREE (the largest budget) and from the target;
   the tokens at positions 1 and 2 (drawn by speculative steps; position 0 is the prefill's) are
   compared with a two-sample chi-square test per prompt and position (cells under 5 expected pooled).
   The run passes when the smallest p is above ``--alpha`` / the number of tests (Bonferroni); every p is
   recorded.

Writes DIR/e2e.json, DIR/speed-summary.json (every server's summed tokens over summed wall time, the
accept length weighted by tokens; ``--summarize`` writes it for an older e2e.json) and DIR/e2e-summary.txt;
server logs in DIR. Stdlib only here (the statistics are
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
import re
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ddtree_check  # tests/device: Server, http_json, apply_patchset
import ddtree_host_time  # tests/device: the host-time probe (--host-time)

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


def aggregate(rows):
    """One server's requests taken together: the summed completion tokens over the summed wall times
    (prefill and HTTP included), the accept length weighted by tokens (tokens over verify steps) and the
    wall time per verify step. None where a row has no accept length (the target alone)."""
    tokens = sum(r.get("completion_tokens") or 0 for r in rows)
    wall = sum(r.get("wall_s") or 0 for r in rows)
    accepts = [r.get("spec_accept_length") for r in rows]
    steps = None
    if rows and all(accepts):
        steps = sum((r.get("completion_tokens") or 0) / a for r, a in zip(rows, accepts))
    return {
        "requests": len(rows),
        "tokens": tokens,
        "wall_s": round(wall, 4),
        "tokens_per_s": round(tokens / wall, 2) if wall else None,
        "accept_length_by_tokens": round(tokens / steps, 4) if steps else None,
        "ms_per_step": round(1000 * wall / steps, 3) if steps else None,
    }


# Student t's 97.5 % quantile by degrees of freedom; between two rows the smaller df's (the wider interval).
_T975 = ((1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306),
         (9, 2.262), (10, 2.228), (12, 2.179), (15, 2.131), (20, 2.086), (25, 2.060), (30, 2.042),
         (40, 2.021), (60, 2.000), (120, 1.980))  # fmt: skip


def t975(df):
    if df < 1:
        raise ValueError("a t interval needs at least 2 pairs")
    return [t for d, t in _T975 if d <= df][-1] if df < 1000 else 1.960


def rate(row):
    tokens, wall = row.get("completion_tokens"), row.get("wall_s")
    return tokens / wall if tokens and wall else None


def paired_speed(pairs):
    """``pairs``: [(a_row, b_row)], the same prompt on server a and on server b back to back. b over a:
    the geometric mean of the pairs' tokens/s ratios with its 95 % interval (Student t on the log
    ratios), and the summed tokens over summed wall times of each side."""
    rates = [(rate(a), rate(b)) for a, b in pairs]
    logs = [math.log(rb / ra) for ra, rb in rates if ra and rb]
    out = {"pairs": len(pairs), "measured": len(logs)}
    if len(logs) >= 2:
        mean, sd = statistics.fmean(logs), statistics.stdev(logs)
        half = t975(len(logs) - 1) * sd / math.sqrt(len(logs))
        out.update(
            ratio_geomean=round(math.exp(mean), 4),
            ratio_ci95=[round(math.exp(mean - half), 4), round(math.exp(mean + half), 4)],
            log_ratio_sd=round(sd, 4),
        )
    side_a, side_b = aggregate([a for a, _ in pairs]), aggregate([b for _, b in pairs])
    out.update(a=side_a, b=side_b)
    if side_a["tokens_per_s"] and side_b["tokens_per_s"]:
        out["ratio_aggregate"] = round(side_b["tokens_per_s"] / side_a["tokens_per_s"], 4)
    return out


def interleave_order(prompts, repeats):
    """[(prompt index, b first?)]: every prompt ``repeats`` times, the order of the two servers alternating
    from one visit to the next and from one prompt to the next (each order equally often when
    ``prompts * repeats`` is even)."""
    return [(i, (i + r) % 2 == 1) for r in range(repeats) for i in range(prompts)]


def server_runs(args, env, out):
    """``[(name, flags, env, command)]``: the deploy's own argv and environment from ``--rendered`` (systemd's:
    nothing inherited), else plan_runs' flags on ``env``; --ddtree-env and --host-time applied."""
    if args.rendered:
        runs = [(name, [], rendered_env, argv) for name, argv, rendered_env in rendered_runs(args.rendered)]
    else:
        runs = [(name, flags, dict(env, **extra), None) for name, flags, extra in plan_runs(args)]
    runs = with_ddtree_env(runs, args.ddtree_env)
    return with_host_time(runs, out) if args.host_time else runs


def budget_servers_missing(budget_list, names):
    """The ``--budgets`` whose DDTREE server is not among the runs (a ``--rendered`` file without that case): the
    distribution test takes the largest budget, and a missing one would end the run with "no test ran" after every
    other server had run (2026-12-06: --budgets 32 against the cases dflash ddtree16 ddtree8)."""
    return ["ddtree-n%d" % n for n in budget_list if "ddtree-n%d" % n not in names]


def interleave_pairs(runs):
    """[(DFLASH run, DDTREE run)] for --interleave: every DDTREE budget against the DFLASH run (none without one)."""
    dflash = [r for r in runs if r[0] == "dflash"]
    return [(dflash[0], r) for r in runs if r[0].startswith("ddtree-")] if dflash else []


def interleaved_launch(run, port, mem):
    """(name, flags, env, command) of a run for two servers at once: its --mem-fraction-static ``mem``, a
    rendered command's --port ``port`` (launch flags get theirs from ddtree_check.Server); nothing else."""
    name, flags, env, command = run
    if command is not None:
        return name, flags, env, with_flag(with_flag(command, "--port", port), "--mem-fraction-static", mem)
    return name, with_flag(flags, "--mem-fraction-static", mem), env, None


def with_flag(argv, flag, value):
    """``argv`` with ``flag``'s value set to ``value`` (replaced where it is given, else appended)."""
    out = list(argv)
    if flag in out:
        out[out.index(flag) + 1] = str(value)
    else:
        out += [flag, str(value)]
    return out


def speed_summary(result):
    """speed-summary.json: per server and mode, aggregate(rows); per round, DDTREE over DFLASH of the
    aggregate tokens/s (the same pairing as paired_ratios); per --interleave pair, paired_speed's summary."""
    runs = result.get("runs") or {}
    servers = {}
    for name, res in runs.items():
        for mode in ("greedy", "temperature_1"):
            rows = ((res or {}).get(mode) or {}).get("rows")
            if rows:
                servers.setdefault(name, {})[mode] = aggregate(rows)
    ratios = {}
    for tree in dict.fromkeys(base_name(name) for name in servers if name.startswith("ddtree-")):
        for ref, name in round_pairs(servers, tree):
            for mode, agg in servers.get(name, {}).items():
                a, b = (servers[ref].get(mode) or {}).get("tokens_per_s"), agg.get("tokens_per_s")
                if a and b:
                    ratios.setdefault(name, {})[mode] = round(b / a, 4)
    ratios = {name: ratios[name] for name in servers if name in ratios}  # in the order the servers ran
    interleaved = {name: pair.get("summary") or pair for name, pair in (result.get("interleaved") or {}).items()}
    return {"servers": servers, "ratio_over_dflash_same_round": ratios, "interleaved": interleaved}


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


def host_time_file(name):
    """Where a --host-time server's probe keeps its totals (a run started twice keeps its last process's)."""
    return "host-time-%s.json" % name


def with_host_time(runs, out):
    """``runs`` with every server timed by the host-time probe (ddtree_host_time.server_env: the plugin on its path)."""
    return [
        (name, flags, ddtree_host_time.server_env(env, pathlib.Path(out) / host_time_file(name)), command)
        for name, flags, env, command in runs
    ]


def host_time_report(names, out):
    """{run: host milliseconds per decode step, per part} from the probe's files (ddtree_host_time.summarize)."""
    return {
        name: ddtree_host_time.summarize(ddtree_host_time.read(pathlib.Path(out) / host_time_file(name)))
        for name in names
    }


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


def round_pairs(names, tree):
    """[(DFLASH's name, ``tree``'s name)] per round (``dflash``/``tree``, ``dflash@2``/``tree@2``, ...)."""
    return [(name, tree + name[len("dflash") :]) for name in names if base_name(name) == "dflash"]


def paired_ratios(results, tree, mode):
    """Per round, ``tree``'s tokens/s over DFLASH's in the same round (None where either side has none)."""
    ratios = []
    for ref, name in round_pairs(results, tree):
        a = ((results.get(name) or {}).get(mode) or {}).get("tokens_per_s_median")
        b = ((results[ref] or {}).get(mode) or {}).get("tokens_per_s_median")
        ratios.append(round(a / b, 3) if a and b else None)
    return ratios


STEP_GRAPH_MIB = re.compile(r"([0-9.]+) MiB by the step graphs in all")


def step_graph_mib(log_text):
    """The GPU memory DDTREE's step graphs reserved (outside --mem-fraction-static), the last total a server's log
    gives after a capture (ddtree_worker._memory_note); None when it captured none (or is not DDTREE)."""
    found = STEP_GRAPH_MIB.findall(log_text)
    return float(found[-1]) if found else None


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
        res["step_graph_mib"] = step_graph_mib(server.log_path.read_text(errors="replace"))
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


def interleaved_file(name):
    """Where run_interleaved keeps one DDTREE server's pairs as soon as they are measured."""
    return "interleaved-%s.json" % name


def run_interleaved(run_a, run_b, args, *, prompts, out, index, kept):
    """Servers ``run_a`` (DFLASH) and ``run_b`` (a DDTREE budget) up at once, each prompt greedy on both back to
    back (interleave_order), ``args.interleave`` times; their --mem-fraction-static ``args.interleave_mem`` (a's,
    b's), a on ``args.port`` + 10 * index, b on the port after it. ``kept`` (name -> server) holds a started
    ``run_a`` from one budget to the next: it is started (and warmed) only when not there, and left up for the
    caller to stop; a failure stops it too, so that the next budget starts it anew. Returns {"a", "b", "rows": [...],
    "summary": paired_speed}, or {"error"}."""
    fresh, b_server = [], None
    try:
        a_server = kept.get(run_a[0])
        if a_server is None:
            a_server = _interleaved_server(run_a, 0, args.port + 10 * index, args, out=out, label="a%s" % (index or ""))
            kept[run_a[0]] = a_server
            fresh.append(a_server)
        b_server = _interleaved_server(run_b, 1, args.port + 10 * index + 1, args, out=out, label="b")
        fresh.append(b_server)
        servers = (a_server, b_server)
        for server in fresh:  # first-use compiles, before any timing (a kept server had them with the first budget)
            generate(server, prompts[0], 8, 0.0)
            generate(server, prompts[0], args.tokens, 0.0)
        rows, pairs = [], []
        for i, b_first in interleave_order(len(prompts), args.interleave):
            order = (1, 0) if b_first else (0, 1)
            got = {k: generate(servers[k], prompts[i], args.tokens, 0.0) for k in order}
            pairs.append((got[0], got[1]))
            same = got[0]["output_ids"] == got[1]["output_ids"]
            slim = {k: {f: v for f, v in got[k].items() if f != "output_ids"} for k in got}
            rows.append({"prompt": i, "b_first": b_first, "same_output": same, "a": slim[0], "b": slim[1]})
        summary = paired_speed(pairs)
        log(
            "%s / %s interleaved: geometric mean %s, 95 %% interval %s, aggregate %s (%d pairs)"
            % (run_b[0], run_a[0], summary.get("ratio_geomean"), summary.get("ratio_ci95"),
               summary.get("ratio_aggregate"), summary["measured"])
        )  # fmt: skip
        done = {"a": run_a[0], "b": run_b[0], "mem": args.interleave_mem, "rows": rows, "summary": summary}
        # Written before the servers stop: a call's time limit that ends the run while they shut down (a SIGTERM
        # there skips main's e2e.json) still leaves every pair (2026-12-06-h100-ddtree-step-graph lost them so).
        (pathlib.Path(out) / interleaved_file(run_b[0])).write_text(json.dumps(done, indent=1) + "\n")
        return done
    except Exception as exc:  # recorded: the next pair still runs, on a DFLASH server started anew
        log("%s / %s interleaved FAILED: %r" % (run_b[0], run_a[0], exc))
        failed = kept.pop(run_a[0], None)
        if failed is not None:
            failed.stop()
        return {"a": run_a[0], "b": run_b[0], "error": repr(exc)}
    finally:
        if b_server is not None:
            b_server.stop()


def _interleaved_server(run, k, port, args, *, out, label):
    """One of the two servers of an interleaved pair (k 0: a, 1: b: its --interleave-mem), started and ready, named
    <run>+<label> (a DFLASH server started anew for budget ``index`` > 0 is a<index>: its log keeps the first's)."""
    name, flags, env, command = interleaved_launch(run, port, args.interleave_mem[k])
    server = ddtree_check.Server(
        "%s+%s" % (name, label), args.python, flags, env=env, port=port, out=out, command=command
    )
    try:
        log("%s ready in %.1fs (interleaved)" % (server.name, server.wait_ready(args.ready_timeout)))
    except BaseException:
        server.stop()
        raise
    return server


def interleaved_pass(pairs, args, *, prompts, out, t0):
    """run_interleaved for every pair, the DFLASH server started once for all of them (each DDTREE budget starts
    and stops its own), stopped at the end."""
    done, kept = {}, {}
    try:
        for index, (run_a, run_b) in enumerate(pairs):
            if args.deadline_s and time.monotonic() - t0 > args.deadline_s:
                done[run_b[0]] = {"error": "skipped: past --deadline-s %s" % args.deadline_s}
                log("%s interleaved skipped (deadline)" % run_b[0])
                continue
            done[run_b[0]] = run_interleaved(run_a, run_b, args, prompts=prompts, out=out, index=index, kept=kept)
    finally:
        for server in kept.values():
            server.stop()
    return done


def compare(results, args, interleaved=None):
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
    for name, pair in (interleaved or {}).items():
        summary = pair.get("summary") or {}
        n = name[len("ddtree-n") :]
        checks["speed_ratio_n%s_greedy_interleaved" % n] = summary.get("ratio_geomean")
        checks["speed_ratio_n%s_greedy_interleaved_ci95" % n] = summary.get("ratio_ci95")
        checks["speed_ratio_n%s_greedy_interleaved_aggregate" % n] = summary.get("ratio_aggregate")
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


def mem_pair(text):
    """--interleave-mem: two fractions "A,B", each in (0, 1)."""
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("takes two fractions A,B, got %r" % text) from None
    if not (0 < a < 1 and 0 < b < 1):
        raise argparse.ArgumentTypeError("fractions in (0, 1), got %r" % text)
    return a, b


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
    p.add_argument(
        "--interleave", type=int, default=0, metavar="K",
        help="then each DDTREE budget against DFLASH, both servers up at once, every prompt on both K times",
    )  # fmt: skip
    p.add_argument("--interleave-only", action="store_true", help="skip the one-server-at-a-time pass")
    p.add_argument(
        "--interleave-mem", type=mem_pair, default=(0.3, 0.6), metavar="A,B",
        help="--mem-fraction-static of DFLASH and of DDTREE, both up at once (the deploy's value does not fit twice;"
        " the second is larger: sglang sizes it after the first has taken its share)",
    )  # fmt: skip
    p.add_argument("--extra-flag", action="append", default=[])
    p.add_argument(
        "--host-time", action="store_true",
        help="time each decode step's parts on the host in every server (tests/device/ddtree_host_time.py); the "
        "report is e2e.json's host_time. A probe adds two clock reads a part: keep speed records apart",
    )  # fmt: skip
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


def pool(paths):
    """--pool: the interleaved pairs of several calls (interleaved-ddtree-n<N>.json files of one budget) read as one
    sample: every pair, the pairs whose two outputs are identical (where the two servers decoded the same text, so
    the ratio is the tree's and not a different continuation's), and each prompt's own ratio."""
    rows = [row for path in paths for row in json.loads(pathlib.Path(path).read_text())["rows"]]
    pairs = [(r["a"], r["b"]) for r in rows]
    by_prompt = {}
    for r in rows:
        by_prompt.setdefault(r["prompt"], []).append((r["a"], r["b"]))
    return {
        "files": [str(p) for p in paths],
        "all": paired_speed(pairs),
        "identical_outputs": paired_speed([(r["a"], r["b"]) for r in rows if r.get("same_output")]),
        "by_prompt": {str(k): paired_speed(v).get("ratio_geomean") for k, v in sorted(by_prompt.items())},
        "differing_prompts": sorted({r["prompt"] for r in rows if not r.get("same_output")}),
    }


def summarize(paths):
    """--summarize: speed-summary.json beside each e2e.json (for a record written before it existed)."""
    for path in map(pathlib.Path, paths):
        summary = speed_summary(json.loads(path.read_text()))
        (path.parent / "speed-summary.json").write_text(json.dumps(summary, indent=1) + "\n")
        print("%s: %s" % (path.parent / "speed-summary.json", summary["ratio_over_dflash_same_round"]))
    return 0


def summary_lines(result, results):
    """e2e-summary.txt: the checks, each one-at-a-time server, each --host-time report."""
    lines = ["%s: %s" % (k, v) for k, v in result["checks"].items() if k != "distribution_tests"]
    lines += [
        "%s: ready %s s, greedy %s tok/s (accept %s), temperature 1 %s tok/s (accept %s), step graphs %s MiB"
        % (
            name,
            res.get("ready_s"),
            (res.get("greedy") or {}).get("tokens_per_s_median"),
            (res.get("greedy") or {}).get("accept_length_mean"),
            (res.get("temperature_1") or {}).get("tokens_per_s_median"),
            (res.get("temperature_1") or {}).get("accept_length_mean"),
            res.get("step_graph_mib"),
        )
        if "error" not in res
        else "%s: %s" % (name, res["error"])
        for name, res in results.items()
    ]
    for name, report in result.get("host_time", {}).items():
        parts = ", ".join("%s %s" % (k, v["ms_per_step"]) for k, v in report.get("parts", {}).items())
        lines.append(
            "%s host ms per decode step: %s (%s steps): %s"
            % (name, report.get("step_ms"), report["decode_steps"], parts)
        )
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--summarize"]:
        return summarize(argv[1:])
    if argv[:1] == ["--pool"]:
        print(json.dumps(pool(argv[1:]), indent=1))
        return 0
    ddtree_check.stop_on_sigterm()
    p = build_parser()
    args = p.parse_args(argv)
    if args.interleave < 0 or (args.interleave_only and not args.interleave):
        p.error("--interleave takes K >= 1 repeats; --interleave-only needs it")
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
    runs = server_runs(args, env, out)
    names = [name for name, *_rest in runs]  # every server, before the rounds and pairs rename or drop them
    missing = budget_servers_missing(args.budget_list, names)
    if missing:
        p.error(
            "--budgets %s names %s, which %s does not start (its servers: %s); render that case or drop the budget"
            % (args.budgets, ", ".join(missing), args.rendered or "the plan", ", ".join(names))
        )
    pairs = interleave_pairs(runs) if args.interleave else []
    runs = [] if args.interleave_only else with_rounds(runs, args.rounds)
    for name, flags, run_env, command in runs:
        if args.deadline_s and time.monotonic() - t0 > args.deadline_s:
            results[name] = {"error": "skipped: past --deadline-s %s" % args.deadline_s}
            log("%s skipped (deadline)" % name)
            continue
        results[name] = run_server(
            name, flags, run_env, args, prompts=prompts, dist_prompts=dist_prompts, out=out, command=command
        )
    interleaved = interleaved_pass(pairs, args, prompts=prompts, out=out, t0=t0)
    result["runs"] = results
    result["interleaved"] = interleaved
    result["checks"] = compare(results, args, interleaved)
    if args.host_time:
        result["host_time"] = host_time_report(names, out)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    (out / "e2e.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "speed-summary.json").write_text(json.dumps(speed_summary(result), indent=1) + "\n")
    lines = summary_lines(result, results)
    (out / "e2e-summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    errors = [r for r in [*results.values(), *interleaved.values()] if "error" in r]
    ok = (result["checks"]["distribution"]["pass"] or args.interleave_only) and not errors
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
