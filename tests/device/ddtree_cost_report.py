#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The step-cost record of ddtree_cost.py as the operator reads it: a table, a plot, envelopes.json.

    ddtree_cost_report.py COST.json [COST2.json ...] --out DIR [--logs-prefix run1-cost/] [--no-plot]
                          [--card-free-gib 95.43]

Runs on any machine (stdlib + the collection's planner; matplotlib only for the plot). Several records
merge by run name (a later file's run replaces an earlier one), so a sweep split over two device calls
reads as one. Writes DIR/cost-table.md, DIR/cost-summary.json, DIR/envelopes.json (the records schema
of tests/unit/plugins/module_utils/_plan/test_envelope_plan_records.py, which replays the planner against it)
and DIR/ddtree-cost.png.

Break-even accept length of a mode at batch b = its median step / the target's median decode step at b
(the target as a deploy runs it: on CUDA graphs). A speculative step emits (accept length) tokens per
request; it pays when the accept length is above that ratio. Against the eager target as well, to show
what the graphs are worth.

Memory per request slot: sglang's verify snapshots (intermediate ssm + conv window caches over its
mamba slots + 1) next to what the planner (plugins/module_utils/_plan/envelope_plan.py) predicts for the same
envelope; and, planned only, what each mode leaves of the field envelope on a card with
--card-free-gib free before the load (the ct200 H200 cut to 96 GB: 95.43 GB seen by sglang in
tests/device/records/2026-12-01-h200-hybrid/): the requests it can hold at 32k and 131k context.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(HERE))

from ansible_collections.specdec.sglang.plugins.module_utils._plan import envelope_plan as ep  # noqa: E402
from ddtree_cost import budget_of, builder_of, step_graph_of  # noqa: E402  (the harness's own run names)

BASELINE = "target"  # the graphed target decode: what a deploy without speculation runs
FIELD = {"mem_fraction_static": 0.88, "max_running_requests": 16}  # the field's envelope (docs/envelopes.md)
FIELD_CONTEXTS = (32768, 131072)
ORDER = ("target", "target-eager", "dflash")


def run_key(name):
    if name in ORDER:
        return (ORDER.index(name), 0)
    return (len(ORDER), budget_of(name))


def merge(records):
    """One record from several: the first file's settings, every run by name (the last one wins)."""
    merged = dict(records[0])
    runs = {}
    for rec in records:
        for res in rec["results"]:
            if "skipped" in res and res["run"] in runs:
                continue
            runs[res["run"]] = res
    merged["results"] = sorted(runs.values(), key=lambda r: run_key(r["run"]))
    return merged


# How a row names the tree builder a DDTREE run set (ddtree_cost.builder_of; None: the set's default).
BUILDER_LABELS = {"triton": "Triton", "graph": "graphed array", "eager": "eager array"}


def label(run):
    if run == "dflash":
        return "DFLASH B=16"
    if run.startswith("ddtree"):
        builder, step_graph = builder_of(run), step_graph_of(run)
        return (
            "DDTREE N=%s" % budget_of(run)
            + (", %s tree builder" % BUILDER_LABELS[builder] if builder else "")
            + (", step graph %s" % step_graph if step_graph else "")
        )
    return {"target": "target (graphs)", "target-eager": "target (eager)"}[run]


def draft_tokens(res, draft_config):
    if res["run"] == "dflash":
        return int((draft_config.get("dflash_config") or {}).get("block_size") or draft_config["block_size"])
    return res.get("budget")


def envelope_of(res, record):
    flags = res["launch_flags"]
    algo = "DFLASH" if res["run"] == "dflash" else "DDTREE" if res["run"].startswith("ddtree") else None
    return {
        "context_length": int(flags[flags.index("--context-length") + 1]),
        "mem_fraction_static": float(flags[flags.index("--mem-fraction-static") + 1]),
        "max_running_requests": int(flags[flags.index("--max-running-requests") + 1]),
        "cuda_graph": "--disable-cuda-graph" not in flags and algo != "DDTREE",
        "algorithm": algo,
        "num_draft_tokens": draft_tokens(res, record["draft_config"]) if algo else None,
        "disable_radix_cache": "--disable-radix-cache" in flags,
    }


def plan(record, res, free_gb, envelope):
    algo = envelope.get("algorithm")
    gpus = [{"memory_total_mb": free_gb * 1024, "memory_free_mb": free_gb * 1024}]
    return ep.plan_envelope(
        record["target_config"], record["draft_config"] if algo else None, gpus, 1, envelope,
        disable_radix_cache=bool(envelope.get("disable_radix_cache")),
    )  # fmt: skip


def per_slot(ssm, conv, slots):
    if ssm is None or slots is None:
        return None
    return round((ssm + (conv or 0.0)) / (slots + 1), 3)


def summarize(record, *, card_free_gib, logs_prefix=""):
    """Rows (one per run x batch) with break-even and memory; envelopes for the planner replay."""
    res_by = {r["run"]: r for r in record["results"]}
    base = {row["batch"]: row["step_ms"] for row in res_by.get(BASELINE, {}).get("rows", [])}
    eager = {row["batch"]: row["step_ms"] for row in res_by.get("target-eager", {}).get("rows", [])}
    rows, envelopes, modes = [], [], []
    seen_free = [r["memory"]["gpu_free_gb_before_load"] for r in record["results"]
                 if (r.get("memory") or {}).get("gpu_free_gb_before_load")]  # fmt: skip
    for res in record["results"]:
        if "skipped" in res:
            modes.append({"run": res["run"], "label": label(res["run"]), "skipped": res["skipped"],
                          "planned_snapshots_per_slot_gb": planned_only(record, res["run"], seen_free)})  # fmt: skip
            continue
        mem = res.get("memory") or {}
        env = envelope_of(res, record)
        free = mem.get("gpu_free_gb_before_load")
        planned = plan(record, res, free, env) if free else None
        planned_slot = None
        if planned and env["algorithm"]:
            if planned.get("error") or not planned.get("mamba_slots"):  # refused: size it from one request
                planned = plan(record, res, free, dict(env, max_running_requests=1))
            ssm, conv = planned.get("intermediate_ssm_gb"), planned.get("intermediate_conv_gb")
            planned_slot = per_slot(ssm, conv, planned.get("mamba_slots"))
        mode = {
            "run": res["run"],
            "label": label(res["run"]),
            "ready_s": res.get("ready_s"),
            "error": res.get("error"),
            "snapshots_per_slot_gb": per_slot(
                mem.get("intermediate_ssm_gb"), mem.get("intermediate_conv_gb"), mem.get("mamba_slots")
            ),
            "planned_snapshots_per_slot_gb": planned_slot,
            "mamba_slots": mem.get("mamba_slots"),
            "max_running_requests": mem.get("max_running_requests"),
            "mamba_capped_max_running_requests": mem.get("mamba_capped_max_running_requests"),
            "kv_tokens": mem.get("kv_tokens"),
            "field_card": field_card(record, env, card_free_gib),
        }
        modes.append(mode)
        for row in res.get("rows") or []:
            ms, b = row.get("step_ms"), row["batch"]
            rows.append({
                "run": res["run"], "label": mode["label"], "batch": b, "step_ms": ms,
                "p10_ms": row.get("p10_ms"), "p90_ms": row.get("p90_ms"), "steps": row.get("steps"),
                "cuda_graph": row.get("cuda_graph"), "client_ms_per_step": row.get("client_ms_per_step"),
                "break_even": round(ms / base[b], 3) if ms and base.get(b) else None,
                "break_even_vs_eager": round(ms / eager[b], 3) if ms and eager.get(b) else None,
            })  # fmt: skip
        if free:
            measured = {k: mem.get(k) for k in (
                "weights_gb", "weights_class", "draft_weights_gb", "avail_after_load_gb", "mamba_slots",
                "mamba_conv_gb", "mamba_ssm_gb", "intermediate_ssm_gb", "intermediate_conv_gb", "kv_pools",
                "kv_tokens", "kv_k_gb", "kv_v_gb", "min_viable_mem_fraction", "mamba_capped_max_running_requests",
                "max_total_num_tokens", "max_running_requests", "error")}  # fmt: skip
            measured.update(
                outcome="refused" if mem.get("error") and not res.get("rows") else "serves",
                log=logs_prefix + res["log"],
                note=("environment SGLANG_DDTREE_BUDGET=%s: the tree budget N, which the envelope's "
                      "num_draft_tokens carries for the planner" % res["budget"]) if res.get("budget") else None,
            )  # fmt: skip
            envelopes.append({
                "name": "cost-" + res["run"], "target_config": record["target_config"],
                "draft_config": record["draft_config"] if env["algorithm"] else None,
                "launch_flags": res["launch_flags"], "envelope": env, "measured": measured,
                "gpu_total_gb": None, "gpu_free_gb_before_load": free, "tp_size": 1,
            })  # fmt: skip
    return {"rows": rows, "modes": modes, "envelopes": envelopes}


def planned_only(record, run, seen_free):
    """The planner's snapshots per slot for a run that did not start (same settings as the others)."""
    if not seen_free or not run.startswith(("dflash", "ddtree")):
        return None
    algo = "DFLASH" if run == "dflash" else "DDTREE"
    env = {
        "context_length": 4096, "mem_fraction_static": record["mem_fraction_static"],
        "max_running_requests": max(record["batches"]), "cuda_graph": algo == "DFLASH", "algorithm": algo,
        "num_draft_tokens": None if algo == "DFLASH" else budget_of(run), "disable_radix_cache": True,
    }  # fmt: skip
    p = plan(record, None, seen_free[0], env)
    if p.get("error") or not p.get("mamba_slots"):  # refused: no pool to divide, so one request's size
        p = plan(record, None, seen_free[0], dict(env, max_running_requests=1))
    return per_slot(p.get("intermediate_ssm_gb"), p.get("intermediate_conv_gb"), p.get("mamba_slots"))


def field_card(record, env, card_free_gib):
    """Planned: requests this mode holds in the field's envelope on a card with card_free_gib free."""
    out = {}
    for ctx in FIELD_CONTEXTS:
        field = dict(env, context_length=ctx, disable_radix_cache=False, **FIELD)
        algo = field.get("algorithm")
        gpus = [{"memory_total_mb": card_free_gib * 1024, "memory_free_mb": card_free_gib * 1024}]
        p = ep.plan_envelope(record["target_config"], record["draft_config"] if algo else None, gpus, 1, field)
        out[str(ctx)] = p["max_running_requests"] if p["fits"] else None
    return out


def _num(v, fmt="%.1f"):
    return "-" if v is None else fmt % v


def table(summary, record, card_free_gib):
    lines = [
        "| mode | batch | step ms, median [p10-p90] | steps | CUDA graph | break-even accept length "
        "(vs graphed target) | vs eager target |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary["rows"]:
        lines.append(
            "| %s | %d | %s [%s-%s] | %s | %s | %s | %s |"
            % (r["label"], r["batch"], _num(r["step_ms"]), _num(r["p10_ms"]), _num(r["p90_ms"]), r["steps"],
               r["cuda_graph"], _num(r["break_even"], "%.2f"), _num(r["break_even_vs_eager"], "%.2f"))
        )  # fmt: skip
    lines += [
        "",
        "| mode | ready s | snapshots per slot GB, sglang / planner | mamba slots | running-request cap | "
        "planned requests at %.2f GB free, 32k / 131k context |" % card_free_gib,
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for m in summary["modes"]:
        if "skipped" in m:
            lines.append("| %s | skipped: %s | - / %s | | | |"
                         % (m["label"], m["skipped"], _num(m["planned_snapshots_per_slot_gb"], "%.3f")))  # fmt: skip
            continue
        card = m["field_card"]
        lines.append(
            "| %s | %s | %s / %s | %s | %s | %s / %s |"
            % (m["label"], _num(m["ready_s"]), _num(m["snapshots_per_slot_gb"], "%.3f"),
               _num(m["planned_snapshots_per_slot_gb"], "%.3f"), m["mamba_slots"],
               m["mamba_capped_max_running_requests"] or m["max_running_requests"],
               card["32768"] if card["32768"] is not None else "refused",
               card["131072"] if card["131072"] is not None else "refused")
        )  # fmt: skip
        if m.get("error"):
            lines.append("| %s | error: %s | | | | |" % (m["label"], m["error"][:160].replace("|", "/")))
    card = ", card cut to %.0f GiB free" % record["free_gib"] if record.get("free_gib") else ", whole card"
    lines.append("")
    lines.append(
        "Qwen3.6-27B geometry + its DFlash draft (block 16), dummy weights, %d new tokens per request, first "
        "%d steps left out, sglang's per-step decode lines (--decode-log-interval 1), one server at a time, "
        "mem %.2f%s." % (record["tokens"], record["warmup_steps"], record["mem_fraction_static"], card)
    )
    return "\n".join(lines) + "\n"


def plot(summary, path):
    import matplotlib  # noqa: PLC0415 - only the plot needs it

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    rows = summary["rows"]
    labels = list(dict.fromkeys(r["label"] for r in rows))
    batches = sorted({r["batch"] for r in rows})
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(16, 5.2))
    width = 0.8 / max(1, len(batches))
    for i, b in enumerate(batches):
        xs, ys, lo, hi, be = [], [], [], [], []
        for j, lab in enumerate(labels):
            r = next((r for r in rows if r["label"] == lab and r["batch"] == b), None)
            if r is None or r["step_ms"] is None:
                continue
            xs.append(j + (i - (len(batches) - 1) / 2) * width)
            ys.append(r["step_ms"])
            lo.append(r["step_ms"] - (r["p10_ms"] or r["step_ms"]))
            hi.append((r["p90_ms"] or r["step_ms"]) - r["step_ms"])
            be.append(r["break_even"])
        ax1.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label="batch %d" % b)
        ax2.bar(xs, [v or 0 for v in be], width, label="batch %d" % b)
    for ax in (ax1, ax2):
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=30, ha="right")
        ax.legend()
        ax.grid(axis="y", alpha=0.3)
    ax1.set_ylabel("ms per decode step (median, p10-p90)")
    ax1.set_title("step cost, 27B geometry, dummy weights")
    ax2.axhline(1.0, color="grey", lw=1)
    ax2.set_ylabel("accept length needed to break even")
    ax2.set_title("break-even vs the graphed target decode")
    modes = [m for m in summary["modes"] if m["run"].startswith(("dflash", "ddtree"))]
    ns = [16 if m["run"] == "dflash" else budget_of(m["run"]) for m in modes]
    meas = [m.get("snapshots_per_slot_gb") for m in modes]
    planned = [m["planned_snapshots_per_slot_gb"] for m in modes]
    ax3.plot([n for n, v in zip(ns, planned) if v is not None], [v for v in planned if v is not None], "o--",
             label="planner (envelope_plan.py)")  # fmt: skip
    ax3.plot([n for n, v in zip(ns, meas) if v is not None], [v for v in meas if v is not None], "x", ms=10,
             label="sglang (Mamba Cache line)")  # fmt: skip
    ax3.set_xlabel("verify tokens per request (DFLASH B, DDTREE N)")
    ax3.set_ylabel("GB of verify snapshots per request slot")
    ax3.set_title("memory per request slot")
    ax3.legend()
    ax3.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plan_only_table(card_free_gib, budgets=(16, 32, 64), h200_free_gib=137.61, requests=8):
    """Planner only (no device run): per-slot snapshots and requests held, from the 27B configs.

    h200_free_gib: what sglang saw free before the load on the whole lent H200 (run5 of 2026-12-01).
    """
    sys.path.insert(0, str(HERE))
    import build_tiny_models as btm  # noqa: PLC0415 - plain dicts, no torch

    cond, _causal, draft = btm.real_27b_configs()
    record = {"target_config": cond, "draft_config": draft, "mem_fraction_static": 0.9, "batches": [requests]}
    lines = [
        "| mode | verify snapshots per slot, GB | whole H200 (%.2f GB free), mem 0.9, %d requests | "
        "%.2f GB card, field envelope (0.88, 16 requests, radix cache on): requests held at 32k / 131k |"
        % (h200_free_gib, requests, card_free_gib),
        "| --- | --- | --- | --- |",
    ]
    for run in ("dflash", *("ddtree%d" % n for n in budgets)):
        algo = "DFLASH" if run == "dflash" else "DDTREE"
        n = None if run == "dflash" else budget_of(run)
        env = {
            "context_length": 4096,
            "mem_fraction_static": 0.9,
            "max_running_requests": requests,
            "cuda_graph": algo == "DFLASH",
            "algorithm": algo,
            "num_draft_tokens": n,
            "disable_radix_cache": True,
        }
        whole = plan(record, None, h200_free_gib, env)
        slot = planned_only(record, run, [h200_free_gib])
        if slot is None:  # refused at this many requests: the per-slot size from one request
            one = plan(record, None, h200_free_gib, dict(env, max_running_requests=1))
            slot = per_slot(one["intermediate_ssm_gb"], one["intermediate_conv_gb"], one["mamba_slots"])
        verdict = "serves, %s requests" % whole["max_running_requests"] if whole["fits"] else "refused"
        card = field_card(record, env, card_free_gib)
        lines.append("| %s | %s | %s | %s / %s |" % (
            label(run), _num(slot, "%.3f"), verdict, card["32768"] if card["32768"] is not None else "refused",
            card["131072"] if card["131072"] is not None else "refused"))  # fmt: skip
    return "\n".join(lines) + "\n"


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("records", nargs="*", help="cost.json files of ddtree_cost.py")
    p.add_argument("--out")
    p.add_argument("--plan-only", action="store_true", help="print the planner's memory table and stop")
    p.add_argument("--logs-prefix", default="", help="envelopes.json: each log's path relative to --out")
    p.add_argument("--card-free-gib", type=float, default=95.43)
    p.add_argument("--source", default="", help="envelopes.json 'source': what ran, where")
    p.add_argument("--no-plot", action="store_true")
    return p


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plan_only:
        print(plan_only_table(args.card_free_gib))
        return 0
    if not (args.records and args.out):
        parser.error("cost.json records and --out are required (or --plan-only)")
    record = merge([json.loads(pathlib.Path(p).read_text()) for p in args.records])
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(record, card_free_gib=args.card_free_gib, logs_prefix=args.logs_prefix)
    text = table(summary, record, args.card_free_gib)
    (out / "cost-table.md").write_text(text)
    (out / "cost-summary.json").write_text(json.dumps({k: summary[k] for k in ("rows", "modes")}, indent=1))
    if summary["envelopes"]:
        (out / "envelopes.json").write_text(
            json.dumps({"source": args.source, "runs": summary["envelopes"]}, indent=1) + "\n"
        )
    if not args.no_plot:
        plot(summary, out / "ddtree-cost.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
