# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Plots (PNG) and markdown tables from a benchmarks/run results.json.

    .cache/bench-venv/bin/python benchmarks/plot.py benchmarks/results [--record]

Writes verdicts.png (time to verdict per failure mode, ours vs. the /v1/models loop, log
scale) and fleet.png (deploy wall time for 1, 2 and 4 hosts) next to results.json, and prints
the tables of docs/benchmarks.md. With --record: copies results.json and the plots into
docs/benchmarks/ and replaces the recorded-run part of docs/benchmarks.md with the tables.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

DEATH_MODES = (
    "crash_on_start",
    "memory_error",
    "import_abi_error",
    "crash_on_first_generation",
    "scheduler_death",
    "restart_loop",
)


def ours_s(summary):
    """Death -> verdict where there is a death, else launch -> verdict."""
    value = summary.get("death_to_verdict_median_s")
    return value if value is not None else summary["launch_to_verdict_median_s"]


def naive_text(naive):
    if not naive:
        return "-"
    if naive["verdict"] == "healthy":
        return "says healthy after %.1f s (%d polls)" % (naive["verdict_s"], naive["polls"])
    return "no verdict in the %.0f s observed; gives up at 900 s" % naive["observed_s"]


def verdict_table(data):
    v = data["verdicts"]
    rows = [
        "| failure mode | our verdict | correct | death → verdict, median / max (0.5 s polling, no pidfd) "
        "| same, pidfd wake-up (ExitWaiter, as shipped) | launch → verdict, median "
        "| /v1/models loop (cap %g s) | ratio |" % v["naive_cap_s"],
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode, s in v["summary"].items():
        death = (
            "%.2f / %.2f s" % (s["death_to_verdict_median_s"], s["death_to_verdict_max_s"])
            if s["death_to_verdict_median_s"] is not None
            else "-"
        )
        naive = s["naive"]
        ratio = "-"
        if naive and naive["verdict"] != "healthy" and s["verdict"] != "ready":
            ratio = "%.0fx" % (naive["verdict_s"] / ours_s(s))
        elif naive and naive["verdict"] == "healthy" and s["verdict"] not in ("ready",):
            ratio = "loop is wrong"
        event = "-"
        if s.get("event_death_to_verdict_median_s") is not None:
            event = "%.2f / %.2f s (%d/%d correct)" % (
                s["event_death_to_verdict_median_s"],
                s["event_death_to_verdict_max_s"],
                s["event_correct"],
                s["runs"],
            )
        rows.append(
            "| %s | %s | %d/%d | %s | %s | %.2f s | %s | %s |"
            % (
                mode,
                s["verdict"],
                s["correct"],
                s["runs"],
                death,
                event,
                s["launch_to_verdict_median_s"],
                naive_text(naive),
                ratio,
            )
        )
    ro = v["ready_overhead"]
    rows.append("")
    rows.append(
        "Ready overhead (engine's ready line → our `ready`, %d starts): median %.2f s, max %.2f s "
        "(poll interval %.1f s)." % (ro["starts"], ro["median_s"], ro["max_s"], ro["poll_interval_s"])
    )
    return "\n".join(rows)


def plot_verdicts(data, out):
    v = data["verdicts"]
    modes = [m for m in v["summary"] if m != "healthy"]
    ours = [ours_s(v["summary"][m]) for m in modes]
    event = [v["summary"][m].get("event_death_to_verdict_median_s") or 0 for m in modes]
    naive = []
    for m in modes:
        n = v["summary"][m]["naive"]
        naive.append(n["verdict_s"] if n else 0)
    fig, ax = plt.subplots(figsize=(10, 5.5))
    y = range(len(modes))
    shipped = "same, woken by a pidfd (ExitWaiter, as shipped)"
    ax.barh([i + 0.27 for i in y], event, height=0.27, label=shipped, color="#8c4")
    ax.barh(
        list(y),
        ours,
        height=0.27,
        label="sglang_readiness, 0.5 s polling, no pidfd (death → verdict; wedged: launch → verdict)",
        color="#2a7",
    )
    ax.barh([i - 0.27 for i in y], naive, height=0.27, label="GET /v1/models every 5 s, 900 s budget", color="#c44")
    for i, m in enumerate(modes):
        n = v["summary"][m]["naive"]
        ax.text(ours[i] * 1.1, i, "%.2f s" % ours[i], va="center", fontsize=7)
        if event[i]:
            ax.text(event[i] * 1.1, i + 0.27, "%.2f s" % event[i], va="center", fontsize=7)
        if n and n["verdict"] == "healthy":
            ax.text(
                n["verdict_s"] * 1.1, i - 0.2, "%.0f s: says HEALTHY (wrong)" % n["verdict_s"], va="center", fontsize=8
            )
        elif n:
            ax.text(15, i - 0.27, "900 s: gives up, no cause", va="center", fontsize=8, color="white")
    ax.set_yticks(list(y))
    ax.set_yticklabels(modes)
    ax.set_xscale("log")
    ax.set_xlim(0.05, 3000)
    ax.set_xlabel("seconds to a verdict (log scale)")
    m = data["machine"]
    ax.set_title(
        "Time to verdict per failure mode, median of %d runs (loop observed for %g s, its verdict extrapolated)"
        "\n%s, %d CPUs, %s UTC"
        % (v["summary"][modes[0]]["runs"], v["naive_cap_s"], m["cpu_model"], m["cpus"], m["date_utc"]),
        fontsize=9,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3, fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "verdicts.png", dpi=110, bbox_inches="tight")


def plot_fleet(data, out):
    f = data["fleet"]["deploys"]
    counts = ["1", "2", "4"]
    walls = [f[c]["wall_s"] for c in counts]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.bar(counts, walls, color="#47a")
    ax.axhline(walls[0] * 1.5, color="#c44", linestyle="--", label="goal: 4 hosts ≤ 1.5 x 1 host")
    for i, w in enumerate(walls):
        ax.text(i, w, "%.0f s (%.2fx)" % (w, w / walls[0]), ha="center", va="bottom", fontsize=9)
    ax.set_xlabel("lab hosts deployed at once (fresh)")
    ax.set_ylabel("deploy.yml wall time, s")
    m = data["machine"]
    ax.set_title("Fleet deploy, %d CPUs, %s UTC" % (m["cpus"], m["date_utc"]), fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "fleet.png", dpi=110)


def tables(data):
    parts = []
    m = data["machine"]
    parts.append(
        "Machine: %s, %d CPUs (%s), %.0f GiB, kernel %s; load average at start %s; %s UTC; whole run %.0f s."
        % (
            m["host"],
            m["cpus"],
            m["cpu_model"],
            m["memory_gib"],
            m["kernel"],
            " ".join(m["loadavg_at_start"]),
            m["date_utc"],
            data["wall_s"],
        )
    )
    if "verdicts" in data:
        parts.append(verdict_table(data))
    if "redeploy" in data:
        r = data["redeploy"]
        lines = [
            "First deploy of a fresh lab host: %.1f s. Then the same deploy again:" % r["first"]["wall_s"],
            "",
            "| connection | wall | tasks ok | changed | NRestarts before / after | InvocationID, MainPID same |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        for name, row in r["redeploys"].items():
            b, a = row["unit_before"], row["unit_after"]
            same = b.get("InvocationID") == a.get("InvocationID") and b.get("MainPID") == a.get("MainPID")
            lines.append(
                "| %s | %.1f s | %d | %d | %s / %s | %s |"
                % (
                    name,
                    row["deploy"]["wall_s"],
                    row["tasks_ok"],
                    row["changed"],
                    b.get("NRestarts"),
                    a.get("NRestarts"),
                    "yes" if same else "NO",
                )
            )
        parts.append("\n".join(lines))
    if "fleet" in data:
        f = data["fleet"]
        d = f["deploys"]
        parts.append(
            "| hosts | deploy wall | x one host | failed hosts |\n| --- | --- | --- | --- |\n"
            + "".join(
                "| %s | %.1f s | %.2f | %d |\n"
                % (
                    c,
                    d[c]["wall_s"],
                    d[c]["wall_s"] / d["1"]["wall_s"],
                    sum(v["failed"] for v in d[c]["recap"].values()),
                )
                for c in ("1", "2", "4")
            )
        )
    if "venv" in data:
        v = data["venv"]
        parts.append(
            "| venv build, %d pinned packages, warm cache | median of %d | runs |\n| --- | --- | --- |\n"
            "| pip (python3 -m venv + pip install) | %.2f s | %s |\n"
            "| uv (uv venv + uv pip install) | %.2f s | %s |\n| uv speed-up | %.1fx | |"
            % (
                v["packages"],
                len(v["times_s"]["uv"]),
                v["pip_median_s"],
                v["times_s"]["pip"],
                v["uv_median_s"],
                v["times_s"]["uv"],
                v["speedup"],
            )
        )
    return "\n\n".join(parts)


def goals(data):
    """Each goal of issue 13 against this run: measured, met or missed, and by how much."""
    rows = ["| goal | measured | met |", "| --- | --- | --- |"]

    def row(goal, measured, met):
        rows.append("| %s | %s | %s |" % (goal, measured, "yes" if met else "**no**"))

    goals_verdicts(data, row)
    goals_deploys(data, row)
    return "\n".join(rows)


def goals_verdicts(data, row):
    if "verdicts" in data:
        summary = data["verdicts"]["summary"]
        deaths = {m: s for m, s in summary.items() if s.get("death_to_verdict_median_s") is not None}
        worst = max(deaths, key=lambda m: deaths[m]["death_to_verdict_median_s"])
        value = deaths[worst]["death_to_verdict_median_s"]
        row("≤ 1 s median from process death, every death mode", "worst %s: %.2f s" % (worst, value), value <= 1.0)
        ratios = [
            s["naive"]["verdict_s"] / s["death_to_verdict_median_s"]
            for s in deaths.values()
            if s["naive"] and s["naive"]["verdict"] != "healthy"
        ]
        if ratios:
            wrong = [m for m, s in deaths.items() if s["naive"] and s["naive"]["verdict"] == "healthy"]
            measured = "at least %.0fx" % min(ratios)
            if wrong:
                measured += "; the loop calls %s healthy" % ", ".join(wrong)
            row("≥ 100x faster than the /v1/models loop", measured, min(ratios) >= 100)
        correct = sum(s["correct"] for s in summary.values())
        runs = sum(s["runs"] for s in summary.values())
        row("the right verdict every run (0.5 s polling, no pidfd)", "%d/%d" % (correct, runs), correct == runs)
        event_runs = [r for r in data["verdicts"]["runs"] if r.get("wait") == "event"]
        if event_runs:
            ok = sum(r["correct"] for r in event_runs)
            wrong = sorted({"%s as %s" % (r["mode"], r["failure_class"]) for r in event_runs if not r["correct"]})
            measured = "%d/%d" % (ok, len(event_runs)) + ("; wrong: %s" % ", ".join(wrong) if wrong else "")
            row("the right verdict every run (pidfd wake-up, as shipped)", measured, ok == len(event_runs))
        if "wedged" in summary:
            wedged = data["verdicts"]["runs"]
            after_ready = [
                r["ready_line_to_verdict_s"] for r in wedged if r["mode"] == "wedged" and r["ready_line_to_verdict_s"]
            ]
            if after_ready:
                med = statistics.median(after_ready)
                row(
                    "wedged ≤ probe timeout (4 s) + 1 s after the engine is up",
                    "%.2f s after its ready line" % med,
                    med <= 5.0,
                )
        events = [
            s["event_death_to_verdict_median_s"] for s in summary.values() if s.get("event_death_to_verdict_median_s")
        ]
        if events:
            row(
                "stretch: ≤ 0.1 s from death (event-driven)",
                "worst %.2f s with the pidfd wake-up" % max(events),
                max(events) <= 0.1,
            )
        ro = data["verdicts"]["ready_overhead"]
        row(
            "ready overhead ≤ one poll interval (0.5 s)",
            "median %.2f s over %d starts" % (ro["median_s"], ro["starts"]),
            ro["median_s"] <= 0.5,
        )


def goals_deploys(data, row):
    if "redeploy" in data:
        for name, r in data["redeploy"]["redeploys"].items():
            ok = r["deploy"]["rc"] == 0 and r["changed"] == 0 and not r["restarted"] and r["deploy"]["wall_s"] <= 20
            row(
                "re-deploy: 0 changed, 0 restarts, ≤ 20 s (%s)" % name,
                "%d changed, restarted: %s, %.1f s"
                % (r["changed"], "yes" if r["restarted"] else "no", r["deploy"]["wall_s"]),
                ok,
            )
    if "fleet" in data:
        ratio = data["fleet"]["ratio_4_to_1"]
        row("fleet: 4 hosts ≤ 1.5x one host", "%.2fx" % ratio, ratio <= 1.5)
    if "venv" in data:
        row("venv: uv ≥ 5x pip (warm cache)", "%.1fx" % data["venv"]["speedup"], data["venv"]["speedup"] >= 5)


BEGIN, END = "<!-- recorded run: begin (benchmarks/run --record writes this part) -->", "<!-- recorded run: end -->"


def record(out, text, doc):
    """Copy results.json and the plots next to ``doc`` (docs/benchmarks/) and put the tables into it."""
    assets = doc.parent / doc.stem
    assets.mkdir(exist_ok=True)
    for name in ("results.json", "verdicts.png", "fleet.png"):
        if (out / name).exists():
            shutil.copyfile(out / name, assets / name)
    body = doc.read_text()
    head, rest = body.split(BEGIN, 1)
    _old, tail = rest.split(END, 1)
    doc.write_text(head + BEGIN + "\n" + text + "\n" + END + tail)


def main():
    args = [a for a in sys.argv[1:] if a != "--record"]
    out = pathlib.Path(args[0] if args else "benchmarks/results")
    data = json.loads((out / "results.json").read_text())
    if "verdicts" in data:
        plot_verdicts(data, out)
    if "fleet" in data:
        plot_fleet(data, out)
    text = goals(data) + "\n\n" + tables(data)
    (out / "tables.md").write_text(text + "\n")
    print(text)
    if "--record" in sys.argv:
        record(out, text, pathlib.Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
