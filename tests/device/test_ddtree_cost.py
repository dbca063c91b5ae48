"""The step-cost harness (ddtree_cost.py) and its report (ddtree_cost_report.py), on a CPU.

The device run times sglang's own decode lines; here the parsing runs on real 0.5.17 lines of the
recorded 27B runs, the launch flags are checked per mode (graphs where sglang uses them), and the
report is built from a record made of those logs with set step times: break-even, memory per slot
against the planner, and the envelopes the planner replay reads.
"""

import json
import pathlib
import random
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import build_tiny_models as btm  # noqa: E402
import ddtree_cost as dc  # noqa: E402
import ddtree_cost_report as rep  # noqa: E402
import envelope_runs  # noqa: E402

RUN5 = HERE / "records" / "2026-12-01-h200-ddtree-hybrid" / "run5-cost"
DFLASH_LINE = (
    "[2026-12-01 22:43:45] Decode batch, #running-req: 1, #full token: 223, full token usage: 0.00, mamba num: 1, "
    "mamba usage: 0.12, accept len: 1.00, accept rate: 0.00, cuda graph: False, gen throughput (token/s): 13.69, "
    "#queue-req: 0"
)


def test_a_decode_line_is_one_step_in_ms():
    (running, accept, graph, ms), = dc.decode_steps(DFLASH_LINE)  # fmt: skip
    assert (running, accept, graph) == (1, 1.0, False)
    assert ms == pytest.approx(1000 / 13.69)
    # the target's lines carry no accept length; 8 requests: 8 tokens per step
    line = DFLASH_LINE.replace("accept len: 1.00, accept rate: 0.00, ", "").replace("running-req: 1", "running-req: 8")
    line = line.replace("cuda graph: False", "cuda graph: True").replace("13.69", "400.00")
    assert dc.decode_steps(line) == [(8, 1.0, True, pytest.approx(20.0))]
    # accepted drafts count as tokens of the step: 2 requests at accept length 2.5 = 5 tokens
    line = DFLASH_LINE.replace("running-req: 1", "running-req: 2").replace("accept len: 1.00", "accept len: 2.50")
    assert dc.decode_steps(line)[0][3] == pytest.approx(5000 / 13.69)


def test_the_recorded_27b_logs_parse():
    for name in ("server-target.log", "server-dflash.log", "server-ddtree16.log"):
        steps = dc.decode_steps((RUN5 / name).read_text(errors="replace"))
        assert steps and all(ms and 10 < ms < 1000 for _r, _a, _g, ms in steps), name
        assert {g for *_x, g, _ms in steps} == {False}  # that run was eager everywhere


def test_the_sample_leaves_out_warmup_and_other_batch_sizes():
    steps = [(1, 1.0, True, 99.0)] + [(8, 1.0, True, 500.0)] * 2 + [(8, 1.0, True, float(v)) for v in range(10, 20)]
    row = dc.summarize(steps, 8, 2)
    assert row["steps"] == 10 and row["warmup_steps_dropped"] == 2
    assert row["step_ms"] == 14.5 and row["min_ms"] == 10 and row["max_ms"] == 19
    assert (row["p10_ms"], row["p90_ms"]) == (11, 18)
    assert row["cuda_graph"] is True
    assert dc.summarize(steps, 4, 2)["step_ms"] is None


def test_graphs_where_sglang_uses_them(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(btm.real_27b_configs()[2]))
    flags = {run: dc.server_flags("/t", tmp_path, run, [1, 8]) for run in ("target", "target-eager", "dflash",
                                                                             "ddtree32")}  # fmt: skip
    for run, (f, _env) in flags.items():
        assert f[f.index("--decode-log-interval") + 1] == "1", run
        assert f[f.index("--max-running-requests") + 1] == "8", run
    for run in ("target", "dflash", "ddtree32"):  # DDTREE verifies on graphs as DFLASH does
        f = flags[run][0]
        at = f.index("--cuda-graph-bs")
        assert "--disable-cuda-graph" not in f and f[at + 1 : at + 3] == ["1", "8"]
    assert "--disable-cuda-graph" in flags["target-eager"][0]
    f, env = flags["ddtree32"]
    assert env == {"SGLANG_DDTREE_BUDGET": "32"}
    assert f[f.index("--speculative-num-draft-tokens") + 1] == "16"


def test_bad_runs_are_refused():
    with pytest.raises(SystemExit):
        dc.parse_args(["--python", "p", "--target", "t", "--draft", "d", "--out", "o", "--runs", "eagle"])
    args = dc.parse_args(["--python", "p", "--target", "t", "--draft", "d", "--out", "o", "--batches", "8,1,8"])
    assert args.batches == [1, 8] and "ddtree64" in args.runs


def test_complete_needs_every_run_and_batch():
    ok = {"run": "target", "rows": [{"step_ms": 1.0}, {"step_ms": 2.0}]}
    assert dc.complete([ok], ["target"])
    assert not dc.complete([ok], ["target", "ddtree64"])
    assert not dc.complete([{"run": "target", "rows": [{"step_ms": None}]}], ["target"])
    assert not dc.complete([{"run": "ddtree64", "skipped": "deadline"}], ["ddtree64"])


def fake_record(tmp_path):
    cond, _causal, draft = btm.real_27b_configs()
    ddir = tmp_path / "27b-draft"
    ddir.mkdir()
    (ddir / "config.json").write_text(json.dumps(draft))
    results = []
    for run, log, ms in (("target", "server-target.log", (20.0, 25.0)), ("dflash", "server-dflash.log", (30.0, 40.0)),
                         ("ddtree16", "server-ddtree16.log", (60.0, 75.0))):  # fmt: skip
        flags, env = dc.server_flags("/m/27b-conditional", ddir, run, [1, 8])
        rows = [{"batch": b, "step_ms": v, "p10_ms": v, "p90_ms": v, "steps": 100, "cuda_graph": run != "ddtree16"}
                for b, v in zip((1, 8), ms)]  # fmt: skip
        memory = envelope_runs.parse_log((RUN5 / log).read_text(errors="replace"))
        results.append({"run": run, "budget": dc.budget_of(run), "launch_flags": flags, "env": env, "ready_s": 50.0,
                        "rows": rows, "memory": memory, "log": log})  # fmt: skip
    results.append({"run": "ddtree64", "skipped": "deadline: 10 s left"})
    return {"target": "/m/27b-conditional", "draft": str(ddir), "batches": [1, 8], "tokens": 160, "warmup_steps": 16,
            "mem_fraction_static": 0.9, "free_gib": None, "target_config": cond, "draft_config": draft,
            "results": results}  # fmt: skip


def test_the_report_reads_break_even_and_memory(tmp_path):
    summary = rep.summarize(fake_record(tmp_path), card_free_gib=95.43, logs_prefix="run5-cost/")
    be = {(r["run"], r["batch"]): r["break_even"] for r in summary["rows"]}
    assert be == {("target", 1): 1.0, ("target", 8): 1.0, ("dflash", 1): 1.5, ("dflash", 8): 1.6,
                  ("ddtree16", 1): 3.0, ("ddtree16", 8): 3.0}  # fmt: skip
    modes = {m["run"]: m for m in summary["modes"]}
    # sglang's snapshots per slot (the recorded run) and the planner's agree to the printed digit
    assert modes["ddtree16"]["snapshots_per_slot_gb"] == 2.294
    assert modes["ddtree16"]["planned_snapshots_per_slot_gb"] == pytest.approx(2.294, abs=0.002)
    assert modes["dflash"]["snapshots_per_slot_gb"] == 2.267
    assert modes["target"]["planned_snapshots_per_slot_gb"] is None
    # refused at 8 requests by the planner: sized from one request, as plan_only_table does
    assert modes["ddtree64"]["skipped"] and modes["ddtree64"]["planned_snapshots_per_slot_gb"] == 9.176
    # the ct200 card (95.43 GB free): the field envelope holds fewer requests with a larger tree
    card = {run: modes[run]["field_card"]["32768"] for run in ("target", "dflash", "ddtree16")}
    assert card["target"] == 16 and card["dflash"] == card["ddtree16"] == 3
    assert [e["name"] for e in summary["envelopes"]] == ["cost-target", "cost-dflash", "cost-ddtree16"]
    env = summary["envelopes"][2]
    assert env["envelope"]["algorithm"] == "DDTREE" and env["envelope"]["num_draft_tokens"] == 16
    assert env["envelope"]["cuda_graph"] is False and env["measured"]["log"] == "run5-cost/server-ddtree16.log"
    assert summary["envelopes"][1]["envelope"]["cuda_graph"] is True


def test_the_report_merges_two_calls(tmp_path):
    first = fake_record(tmp_path)
    second = {**first, "results": [dict(first["results"][0], ready_s=99.0), {"run": "dflash", "skipped": "x"}]}
    merged = rep.merge([first, second])
    by = {r["run"]: r for r in merged["results"]}
    assert by["target"]["ready_s"] == 99.0  # the later call's run
    assert "rows" in by["dflash"]  # a later skip does not hide a measured run
    assert [r["run"] for r in merged["results"]] == ["target", "dflash", "ddtree16", "ddtree64"]
    table = rep.table(rep.summarize(merged, card_free_gib=95.43), merged, 95.43)
    assert "| DDTREE N=16 | 8 | 75.0 [75.0-75.0] | 100 | False | 3.00 |" in table
    assert "| DDTREE N=64 | skipped: deadline: 10 s left |" in table


def test_the_report_envelopes_pass_the_planner_replay(tmp_path):
    # The replay that CI runs on every tests/device/records/*/envelopes.json, here on the report's own.
    sys.path.insert(0, str(HERE.parents[0] / "unit" / "plugins" / "module_utils" / "_plan"))
    import test_envelope_plan_records as replay  # noqa: PLC0415

    summary = rep.summarize(fake_record(tmp_path), card_free_gib=95.43, logs_prefix="run5-cost/")
    assert len(summary["envelopes"]) == 3
    for run in summary["envelopes"]:
        replay.test_planner_matches_the_recorded_run(run)
        parsed = envelope_runs.parse_log((RUN5.parent / run["measured"]["log"]).read_text(errors="replace"))
        assert run["measured"]["kv_tokens"] == parsed["kv_tokens"]  # what test_envelope_runs.py re-reads


def test_a_refused_run_reports_the_planned_size_of_one_request_slot_not_zero():
    # tests/device/records/2026-12-02-h200-ddtree-cost: N=64 at 8 requests, mem 0.9, refused by sglang
    # and by the planner; the planner's pool is empty then, so the slot size comes from one request.
    rec = json.loads((HERE / "records" / "2026-12-02-h200-ddtree-cost" / "cost-b-n64" / "cost.json").read_text())
    (mode,) = rep.summarize(rec, card_free_gib=95.43)["modes"]
    assert mode["error"] and mode["planned_snapshots_per_slot_gb"] == 9.176  # (18.0 + 0.352) / 2 slots
    skipped = dict(rec, results=[{"run": "ddtree64", "skipped": "deadline"}, rec["results"][0]])
    assert rep.summarize(skipped, card_free_gib=95.43)["modes"][0]["planned_snapshots_per_slot_gb"] == 9.176


@pytest.mark.parametrize(
    ("run", "builder", "label"),
    [("ddtree16e", "eager", "eager array"), ("ddtree16g", "graph", "graphed array"), ("ddtree16t", "triton", "Triton")],
)
def test_a_suffixed_run_is_the_same_budget_with_another_tree_builder(tmp_path, run, builder, label):
    (tmp_path / "config.json").write_text(json.dumps(btm.real_27b_configs()[2]))
    plain, plain_env = dc.server_flags("/t", tmp_path, "ddtree16", [1, 8])
    flags, env = dc.server_flags("/t", tmp_path, run, [1, 8])
    assert dc.valid_run(run) and not any(dc.valid_run(bad) for bad in ("ddtree16x", "ddtree16te", "ddtree16gt"))
    assert flags == plain and dc.budget_of(run) == 16 and rep.label(run).endswith(label + " tree builder")
    assert plain_env == {"SGLANG_DDTREE_BUDGET": "16"} and rep.label("ddtree16") == "DDTREE N=16"
    assert env == {"SGLANG_DDTREE_BUDGET": "16", "SGLANG_DDTREE_TREE_BUILDER": builder}


@pytest.mark.parametrize(("run", "level", "builder"), [("ddtree16s0", "0", None), ("ddtree32gs1", "1", "graph")])
def test_a_step_graph_suffix_sets_the_sets_step_graph(tmp_path, run, level, builder):
    (tmp_path / "config.json").write_text(json.dumps(btm.real_27b_configs()[2]))
    flags, env = dc.server_flags("/t", tmp_path, run, [1, 8])
    assert flags == dc.server_flags("/t", tmp_path, "ddtree%d" % dc.budget_of(run), [1, 8])[0]
    assert env["SGLANG_DDTREE_STEP_GRAPH"] == level and env.get("SGLANG_DDTREE_TREE_BUILDER") == builder
    assert rep.label(run).endswith("step graph " + level)
    assert "SGLANG_DDTREE_STEP_GRAPH" not in dc.server_flags("/t", tmp_path, "ddtree16", [1, 8])[1]
    assert not any(dc.valid_run(bad) for bad in ("ddtree16s3", "ddtree16s", "ddtree16s0g", "ddtree16s00"))


def test_prompts_stay_inside_the_targets_vocabulary(tmp_path):
    # The tiny hybrid target's 4096 ids: a prompt id past them is an out-of-bounds embedding gather on the GPU
    # (2026-12-05, the H100: DFLASH died with a device-side assert on ids drawn for the 27B's vocabulary).
    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 4096}}))
    assert dc.vocab_of(tmp_path) == 4096
    rng = random.Random(0)
    assert max(max(dc.random_prompt(rng, dc.vocab_of(tmp_path))) for _ in range(200)) < 4096
    (tmp_path / "config.json").write_text(json.dumps(btm.real_27b_configs()[0]))
    assert dc.vocab_of(tmp_path) == 248320
