# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree_e2e.py's statistics and server plan, on a CPU (the GPU run itself is a device call)."""

import argparse
import json
import os
import pathlib
import random
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ddtree_e2e as e2e


def test_chi_square_survival_matches_known_values():
    assert e2e.gamma_q(0.5, 3.841 / 2) == pytest.approx(0.05, abs=1e-3)
    assert e2e.gamma_q(5.0, 23.209 / 2) == pytest.approx(0.01, abs=1e-4)
    assert e2e.gamma_q(1.0, 0.0) == 1.0


def _draw(rng, weights, n):
    return rng.choices(range(len(weights)), weights=weights, k=n)


def test_two_samples_of_one_distribution_pass_and_of_two_fail():
    rng = random.Random(7)
    same = [
        e2e.two_sample_chi_square(_draw(rng, [5, 3, 1, 1], 300), _draw(rng, [5, 3, 1, 1], 300))[2] for _ in range(20)
    ]
    assert min(same) > 0.001, same  # 20 draws: a correct sampler is not flagged at 0.001
    p = e2e.two_sample_chi_square(_draw(rng, [5, 3, 1, 1], 300), _draw(rng, [3, 5, 1, 1], 300))[2]
    assert p < 1e-4


def test_rare_categories_are_pooled():
    a = [0] * 100 + [1] * 100 + [7, 8]
    b = [0] * 100 + [1] * 100 + [9]
    _stat, df, p, cells = e2e.two_sample_chi_square(a, b)
    assert cells == 2 and df == 1 and p > 0.5  # 7, 8, 9 pooled and the pool dropped (under 5 expected)
    with pytest.raises(ValueError):
        e2e.two_sample_chi_square([], [1])


def test_the_verdict_is_bonferroni_over_every_test():
    tests = [{"p": 0.003}, {"p": 0.5}, {"p": 0.9}]
    assert e2e.distribution_verdict(tests, 0.01) == {"pass": False, "min_p": 0.003, "threshold": 0.01 / 3, "tests": 3}
    assert e2e.distribution_verdict(tests, 0.001)["pass"] is True
    assert e2e.distribution_verdict([], 0.01)["pass"] is False


def test_servers_run_as_the_deploy_runs_them_radix_cache_on():
    args = argparse.Namespace(target="/t", draft="/d", mem=0.5, extra_flag=[], block=4, budget_list=[8, 16])
    runs = e2e.plan_runs(args)
    assert [name for name, *_ in runs] == ["dflash", "ddtree-n16", "target", "ddtree-n8"]
    for _name, flags, _env in runs:
        assert "--disable-radix-cache" not in flags
        assert flags[flags.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
        assert "--disable-cuda-graph" not in flags
    assert runs[1][2] == {"SGLANG_DDTREE_BUDGET": "16"} and runs[0][2] == {} and runs[2][2] == {}


def test_a_budget_the_rendered_commands_lack_is_refused_before_any_server_starts(monkeypatch, tmp_path, capsys):
    assert e2e.budget_servers_missing([32], ["dflash", "ddtree-n16", "target"]) == ["ddtree-n32"]
    assert e2e.budget_servers_missing([16, 8], ["dflash", "ddtree-n16", "target", "ddtree-n8"]) == []
    (tmp_path / "draft").mkdir()
    (tmp_path / "draft" / "config.json").write_text(json.dumps({"dflash_config": {"block_size": 8}}))
    (tmp_path / "prompts.json").write_text(json.dumps([[1, 2, 3]]))
    rendered = {name: {"argv": ["sglang", name], "env": {}} for name in ("dflash", "ddtree-n16", "ddtree-n8", "target")}
    (tmp_path / "rendered.json").write_text(json.dumps(rendered))
    monkeypatch.setattr(e2e, "run_server", lambda *a, **k: pytest.fail("a server started"))
    argv = ["--python", "py", "--target", "t", "--draft", str(tmp_path / "draft"), "--out", str(tmp_path / "out")]
    argv += ["--prompts-file", str(tmp_path / "prompts.json"), "--rendered", str(tmp_path / "rendered.json")]
    with pytest.raises(SystemExit) as stop:
        e2e.main([*argv, "--budgets", "32"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "ddtree-n32" in err and "ddtree-n16" in err and "--budgets 32" in err


def test_the_step_graphs_memory_is_read_from_the_log_line_the_worker_writes():
    worker = "patchsets/ddtree-0.5.17/files/sglang/srt/speculative/ddtree_worker.py"
    source = (pathlib.Path(__file__).resolve().parents[2] / worker).read_text()
    assert "%.1f MiB by the step graphs in all" in source  # the lines below are in the worker's format
    log = (
        "[t] DDTREE: draft top-k and tree build captured in a CUDA graph for bs=1 N=32 (mask capacity 65536 bytes;"
        " 1 graphs; 12.0 MiB more reserved, 12.0 MiB by the step graphs in all), equal to the eager path on this step\n"
        "[t] DDTREE: tree verify and commit captured in a CUDA graph for bs=1 N=32 (1 graphs; 40.5 MiB more reserved,"
        " 52.5 MiB by the step graphs in all), equal to the eager path\n"
    )
    assert e2e.step_graph_mib(log) == 52.5
    assert e2e.step_graph_mib("[t] DDTREE: draft top-k, tree build, verify and commit launched eagerly\n") is None


def test_ddtree_env_reaches_the_ddtree_servers_only():
    runs = [("dflash", [], {"A": "1"}, None), ("ddtree-n16", [], {"A": "1"}, ["x"]), ("target", [], {}, None)]
    out = e2e.with_ddtree_env(runs, ["SGLANG_DDTREE_TREE_BUILDER=triton"])
    assert out[1] == ("ddtree-n16", [], {"A": "1", "SGLANG_DDTREE_TREE_BUILDER": "triton"}, ["x"])
    assert out[0] == runs[0] and out[2] == runs[2] and runs[1][2] == {"A": "1"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        e2e.with_ddtree_env(runs, ["SGLANG_DDTREE_TREE_BUILDER"])


def test_rounds_alternate_the_speculative_servers_and_pair_their_ratios():
    runs = [("dflash", [], {}, None), ("ddtree-n16", [], {}, None), ("target", [], {}, None)]
    named = [name for name, *_ in e2e.with_rounds(runs, 3)]
    assert named == ["dflash", "ddtree-n16", "target", "dflash@2", "ddtree-n16@2", "dflash@3", "ddtree-n16@3"]
    assert e2e.with_rounds(runs, 1) == runs
    with pytest.raises(ValueError, match="at least 1"):
        e2e.with_rounds(runs, 0)

    def rate(x):
        return {"greedy": {"tokens_per_s_median": x, "rows": []}}

    # DFLASH drifts 30 % between rounds; the paired ratio does not
    results = {"dflash": rate(100.0), "ddtree-n16": rate(110.0), "target": rate(50.0)}
    results.update({"dflash@2": rate(130.0), "ddtree-n16@2": rate(143.0)})
    results.update({"dflash@3": rate(120.0), "ddtree-n16@3": {"error": "x"}})
    assert e2e.paired_ratios(results, "ddtree-n16", "greedy") == [1.1, 1.1, None]
    args = argparse.Namespace(budget_list=[16], dist_run="ddtree-n16", alpha=0.01)
    checks = e2e.compare(results, args)
    assert checks["speed_ratio_n16_greedy_rounds"] == [1.1, 1.1, None]
    assert checks["speed_ratio_n16_greedy_median"] == 1.1 and checks["speed_ratio_n16_greedy"] == 1.1
    assert not any(k.startswith("greedy_identical_dflash@") for k in checks)


def _row(tokens, wall, accept=None):
    return {"completion_tokens": tokens, "wall_s": wall, "spec_accept_length": accept}


def test_aggregate_sums_tokens_and_wall_and_weights_the_accept_length_by_tokens():
    rows = [_row(256, 0.5, 4.0), _row(256, 0.25, 16.0)]
    agg = e2e.aggregate(rows)
    # 512 tokens in 0.75 s; 64 + 16 = 80 verify steps: 6.4 tokens a step (the mean of requests would say 10)
    assert agg["tokens_per_s"] == pytest.approx(682.67, abs=0.01)
    assert agg["accept_length_by_tokens"] == 6.4 and agg["ms_per_step"] == pytest.approx(9.375)
    target = e2e.aggregate([_row(128, 0.2), _row(128, 0.3)])
    assert target["tokens_per_s"] == 512.0 and target["accept_length_by_tokens"] is None
    assert e2e.aggregate([])["tokens_per_s"] is None


def test_t_quantiles_widen_for_few_pairs_and_refuse_one():
    assert e2e.t975(1) == 12.706 and e2e.t975(11) == 2.228 and e2e.t975(5000) == 1.96
    assert e2e.t975(16) == e2e.t975(15) > e2e.t975(20)  # between rows: the smaller df's, the wider interval
    with pytest.raises(ValueError, match="2 pairs"):
        e2e.t975(0)


def test_paired_speed_cancels_a_drift_that_moves_both_sides_of_a_pair():
    rng = random.Random(3)
    pairs = []
    for _ in range(32):
        machine = rng.uniform(0.55, 1.0)  # the machine's speed now: 45 % swings, as on the lent H100
        wall_a = 0.3 / machine
        pairs.append((_row(256, wall_a), _row(256, wall_a / (1.12 * rng.uniform(0.98, 1.02)))))
    out = e2e.paired_speed(pairs)
    assert out["measured"] == 32 and out["ratio_geomean"] == pytest.approx(1.12, abs=0.01)
    lo, hi = out["ratio_ci95"]
    assert 1.1 < lo < 1.12 < hi < 1.14
    assert out["ratio_aggregate"] == pytest.approx(1.12, abs=0.02)
    # the same speeds unpaired (b's measured while the machine was elsewhere): no such interval
    shuffled = [(a, b) for (a, _), (_, b) in zip(pairs, reversed(pairs))]
    lo2, hi2 = e2e.paired_speed(shuffled)["ratio_ci95"]
    assert hi2 - lo2 > 5 * (hi - lo)
    one = e2e.paired_speed(pairs[:1])
    assert "ratio_geomean" not in one and one["measured"] == 1
    assert e2e.paired_speed([(_row(0, 0.1), _row(10, 0.1))] * 3)["measured"] == 0


def test_interleaving_alternates_which_server_goes_first():
    order = e2e.interleave_order(8, 3)
    assert len(order) == 24 and sorted({i for i, _ in order}) == list(range(8))
    assert sum(first for _, first in order) == 12  # each order equally often when prompts * repeats is even
    for i in range(8):
        visits = [first for j, first in order if j == i]
        assert visits == [bool((i + r) % 2) for r in range(3)]  # a prompt's visits alternate


def test_interleaved_servers_change_only_memory_and_port():
    rendered = ["sglang", "serve", "--port", "30001", "--mem-fraction-static", "0.88", "--max-running-requests", "3"]
    run = ("ddtree-n32", [], {"SGLANG_DDTREE_BUDGET": "32"}, rendered)
    name, flags, env, command = e2e.interleaved_launch(run, 31711, 0.6)
    assert command == [
        "sglang",
        "serve",
        "--port",
        "31711",
        "--mem-fraction-static",
        "0.6",
        "--max-running-requests",
        "3",
    ]
    assert (name, flags, env) == run[:3] and rendered[3] == "30001"
    _n, flags, _e, command = e2e.interleaved_launch(("dflash", ["--x", "1"], {}, None), 31710, 0.3)
    assert flags == ["--x", "1", "--mem-fraction-static", "0.3"] and command is None
    runs = [
        ("dflash", [], {}, None),
        ("ddtree-n32", [], {}, None),
        ("target", [], {}, None),
        ("ddtree-n16", [], {}, None),
    ]
    assert [(a[0], b[0]) for a, b in e2e.interleave_pairs(runs)] == [("dflash", "ddtree-n32"), ("dflash", "ddtree-n16")]
    assert e2e.interleave_pairs(runs[1:]) == []
    assert e2e.mem_pair("0.3,0.6") == (0.3, 0.6)
    for bad in ("0.3", "0.3,1.2", "a,b"):
        with pytest.raises(argparse.ArgumentTypeError):
            e2e.mem_pair(bad)


def test_interleaved_ratios_reach_the_checks():
    args = argparse.Namespace(budget_list=[32], dist_run="ddtree-n32", alpha=0.01)
    interleaved = {
        "ddtree-n32": {"summary": {"ratio_geomean": 1.13, "ratio_ci95": [1.1, 1.16], "ratio_aggregate": 1.12}}
    }
    checks = e2e.compare({}, args, interleaved)
    assert checks["speed_ratio_n32_greedy_interleaved"] == 1.13
    assert checks["speed_ratio_n32_greedy_interleaved_ci95"] == [1.1, 1.16]
    assert checks["speed_ratio_n32_greedy_interleaved_aggregate"] == 1.12
    assert e2e.build_parser().parse_args(
        ["--python", "p", "--target", "t", "--draft", "d", "--prompts-file", "f", "--out", "o", "--interleave", "4"]
    ).interleave_mem == (0.3, 0.6)


def test_speed_summary_pairs_each_round_by_summed_tokens_and_wall(tmp_path):
    def server(tokens_per_s, accept):
        return {"greedy": {"rows": [_row(256, 256 / tokens_per_s, accept)] * 2}}

    result = {"runs": {
        "dflash": server(600.0, 4.0), "ddtree-n32": server(660.0, 4.5), "target": server(500.0, None),
        "dflash@2": server(900.0, 4.0), "ddtree-n32@2": server(990.0, 4.5), "ddtree-n16@2": {"error": "x"},
    }}  # fmt: skip
    out = e2e.speed_summary(result)
    assert out["ratio_over_dflash_same_round"] == {"ddtree-n32": {"greedy": 1.1}, "ddtree-n32@2": {"greedy": 1.1}}
    assert out["servers"]["target"]["greedy"]["accept_length_by_tokens"] is None
    assert out["interleaved"] == {}
    result["interleaved"] = {"ddtree-n32": {"summary": {"ratio_geomean": 1.12}}, "ddtree-n64": {"error": "x"}}
    assert e2e.speed_summary(result)["interleaved"] == {
        "ddtree-n32": {"ratio_geomean": 1.12},
        "ddtree-n64": {"error": "x"},
    }
    path = tmp_path / "call" / "e2e.json"
    path.parent.mkdir()
    path.write_text(json.dumps(result))
    assert e2e.main(["--summarize", str(path)]) == 0
    written = json.loads((path.parent / "speed-summary.json").read_text())
    assert written["ratio_over_dflash_same_round"]["ddtree-n32@2"] == {"greedy": 1.1}


def test_an_interleaved_pass_starts_both_servers_sends_each_prompt_to_both_and_stops_them(monkeypatch, tmp_path):
    started, stopped, sent = [], [], []

    class FakeServer:
        def __init__(self, name, python, flags, *, env, port, out, command=None):
            self.name, self.port, self.command = name, port, command
            started.append((name, port, command))

        def wait_ready(self, timeout):
            return 1.0

        def stop(self):
            stopped.append(self.name)

    def fake_generate(server, ids, tokens, temperature):
        sent.append((server.name, ids[0], tokens))
        speed = 1000.0 if server.name.startswith("ddtree") else 900.0
        return {"output_ids": [1, 2], "completion_tokens": tokens, "spec_accept_length": 4.0, "wall_s": tokens / speed}

    monkeypatch.setattr(e2e.ddtree_check, "Server", FakeServer)
    monkeypatch.setattr(e2e, "generate", fake_generate)
    rendered = ["sglang", "serve", "--port", "30001", "--mem-fraction-static", "0.88"]
    runs = [("dflash", [], {}, rendered), ("ddtree-n32", [], {}, rendered)]
    argv = "--python p --target t --draft d --prompts-file f --interleave 2 --tokens 64 --port 31700".split()
    args = e2e.build_parser().parse_args([*argv, "--out", str(tmp_path)])
    done = e2e.interleaved_pass(e2e.interleave_pairs(runs), args, prompts=[[10], [11], [12]], out=tmp_path, t0=0)
    res = done["ddtree-n32"]
    assert [(n, p) for n, p, _c in started] == [("dflash+a", 31700), ("ddtree-n32+b", 31701)]
    assert started[0][2][3:6] == ["31700", "--mem-fraction-static", "0.3"] and started[1][2][5] == "0.6"
    assert sorted(stopped) == ["ddtree-n32+b", "dflash+a"]
    timed = sent[4:]  # after two warm-up requests on each server
    assert len(timed) == 12 and {(n[0], i) for n, i, _t in timed} == {(s, i) for s in "dd" for i in (10, 11, 12)}
    assert [n for n, i, _t in timed[:2]] == ["dflash+a", "ddtree-n32+b"] and timed[2][0] == "ddtree-n32+b"
    assert res["summary"]["ratio_geomean"] == pytest.approx(1000 / 900, abs=1e-3)
    assert all(r["same_output"] and "output_ids" not in r["a"] for r in res["rows"])

    def broken(self, timeout):
        raise RuntimeError("exited with -9 before ready")

    monkeypatch.setattr(FakeServer, "wait_ready", broken)
    stopped.clear()
    failed = e2e.interleaved_pass(e2e.interleave_pairs(runs), args, prompts=[[10]], out=tmp_path, t0=0)
    assert "before ready" in failed["ddtree-n32"]["error"] and stopped == ["dflash+a"]


def test_an_interleaved_pass_starts_dflash_once_for_every_budget_and_anew_after_a_failure(monkeypatch, tmp_path):
    events = []

    class FakeServer:
        def __init__(self, name, python, flags, *, env, port, out, command=None):
            self.name, self.port = name, port
            events.append(("start", name, port))

        def wait_ready(self, timeout):
            if self.name == "ddtree-n64+b":
                raise RuntimeError("exited with -9 before ready")
            return 1.0

        def stop(self):
            events.append(("stop", self.name, self.port))

    def fake_generate(server, ids, tokens, temperature):
        events.append(("generate", server.name, server.port))
        return {"output_ids": [1], "completion_tokens": tokens, "spec_accept_length": 3.0, "wall_s": tokens / 1000}

    monkeypatch.setattr(e2e.ddtree_check, "Server", FakeServer)
    monkeypatch.setattr(e2e, "generate", fake_generate)
    runs = [(name, ["--flag"], {}, None) for name in ("dflash", "ddtree-n32", "ddtree-n64", "ddtree-n16")]
    argv = "--python p --target t --draft d --prompts-file f --interleave 1 --tokens 32 --port 31700".split()
    args = e2e.build_parser().parse_args([*argv, "--out", str(tmp_path)])
    done = e2e.interleaved_pass(e2e.interleave_pairs(runs), args, prompts=[[10]], out=tmp_path, t0=0)
    assert (
        "summary" in done["ddtree-n32"]
        and "before ready" in done["ddtree-n64"]["error"]
        and "summary" in done["ddtree-n16"]
    )
    starts = [(name, port) for kind, name, port in events if kind == "start"]
    # DFLASH once for n32 and n64; n64's failure stops it, so n16 starts it anew on its own ports
    assert starts == [
        ("dflash+a", 31700),
        ("ddtree-n32+b", 31701),
        ("ddtree-n64+b", 31711),
        ("dflash+a2", 31720),
        ("ddtree-n16+b", 31721),
    ]
    stops = [(name, port) for kind, name, port in events if kind == "stop"]
    assert stops == [
        ("ddtree-n32+b", 31701),
        ("ddtree-n64+b", 31711),
        ("dflash+a", 31700),
        ("ddtree-n16+b", 31721),
        ("dflash+a2", 31720),
    ]
    warmups = [e for e in events if e[0] == "generate"]
    # the kept DFLASH server is warmed once (2 requests), then each pair sends 1 prompt to both
    assert [e[1:] for e in warmups].count(("dflash+a", 31700)) == 2 + 1
    assert [e[1:] for e in warmups].count(("dflash+a2", 31720)) == 2 + 1


def test_interleaved_pairs_are_on_disk_before_the_servers_stop(monkeypatch, tmp_path):
    """A time limit's SIGTERM while the servers shut down ends main before e2e.json: the pairs must already be kept."""

    class SlowToStop:
        def __init__(self, name, python, flags, *, env, port, out, command=None):
            self.name = name

        def wait_ready(self, timeout):
            return 1.0

        def stop(self):
            raise SystemExit(143)  # what ddtree_check.stop_on_sigterm does when the limit arrives now

    def fake_generate(server, ids, tokens, temperature):
        speed = 1000.0 if server.name.startswith("ddtree") else 800.0
        return {"output_ids": [1], "completion_tokens": tokens, "spec_accept_length": 3.0, "wall_s": tokens / speed}

    monkeypatch.setattr(e2e.ddtree_check, "Server", SlowToStop)
    monkeypatch.setattr(e2e, "generate", fake_generate)
    runs = [("dflash", ["--flag"], {}, None), ("ddtree-n16", ["--flag"], {}, None)]
    argv = "--python p --target t --draft d --prompts-file f --interleave 2 --tokens 32 --port 31700".split()
    args = e2e.build_parser().parse_args([*argv, "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        e2e.interleaved_pass(e2e.interleave_pairs(runs), args, prompts=[[10], [11]], out=tmp_path, t0=0)
    kept = json.loads((tmp_path / e2e.interleaved_file("ddtree-n16")).read_text())
    assert len(kept["rows"]) == 4 and kept["summary"]["ratio_geomean"] == pytest.approx(1000 / 800, abs=1e-3)


def test_host_time_times_every_server_into_its_own_file_and_reports_ms_per_step(tmp_path):
    runs = [
        ("dflash", [], {"PYTHONPATH": "/site"}, ["sglang"]),
        ("ddtree-n16", [], {"PYTHONPATH": "/site"}, ["sglang"]),
    ]
    timed = e2e.with_host_time(runs, tmp_path)
    paths = [env[e2e.ddtree_host_time.ENV] for _n, _f, env, _c in timed]
    assert paths == [str(tmp_path / "host-time-dflash.json"), str(tmp_path / "host-time-ddtree-n16.json")]
    assert all(env["PYTHONPATH"].endswith(os.pathsep + "/site") for _n, _f, env, _c in timed)
    stats = e2e.ddtree_host_time.empty()
    for ms in (4.0, 6.0):
        e2e.ddtree_host_time.tally(stats, "step", ms)
        e2e.ddtree_host_time.tally(stats, "ddtree_commit", ms / 10)
    (tmp_path / "host-time-ddtree-n16.json").write_text(json.dumps(stats))
    report = e2e.host_time_report([name for name, *_rest in timed], tmp_path)
    assert report["dflash"] == {"decode_steps": 0}  # no file: nothing measured, said so
    assert (
        report["ddtree-n16"]["step_ms"] == 5.0 and report["ddtree-n16"]["parts"]["ddtree_commit"]["ms_per_step"] == 0.5
    )
    lines = e2e.summary_lines({"checks": {}, "host_time": report}, {})
    assert "ddtree-n16 host ms per decode step: 5.0 (2 steps): ddtree_commit 0.5" in lines


def test_pooling_reads_every_calls_pairs_and_sets_apart_the_pairs_whose_outputs_differ(tmp_path):
    def call(name, rows):
        path = tmp_path / name
        path.write_text(json.dumps({"rows": rows}))
        return path

    def pair(prompt, a_wall, b_wall, same=True):
        return {"prompt": prompt, "same_output": same, "a": _row(100, a_wall), "b": _row(100, b_wall)}

    first = call("one.json", [pair(0, 1.0, 1.0), pair(1, 1.0, 0.5, same=False)])
    second = call("two.json", [pair(0, 1.0, 1.0), pair(1, 1.0, 0.5, same=False), pair(0, 2.0, 2.0)])
    pooled = e2e.pool([first, second])
    assert pooled["all"]["pairs"] == 5 and pooled["identical_outputs"]["pairs"] == 3
    assert pooled["identical_outputs"]["ratio_geomean"] == 1.0  # the differing prompt's 2x is not the tree's
    assert pooled["all"]["ratio_geomean"] == round(2 ** (2 / 5), 4)
    assert pooled["by_prompt"] == {"0": 1.0, "1": 2.0} and pooled["differing_prompts"] == [1]
