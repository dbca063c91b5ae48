"""Counting DDTREE's accepted nodes on and off the top-1 chain (tests/device/ddtree_accept_stats.py), on a CPU.

The device run reads these counts from a real server through sglang's own plugin entry points
(tests/device/sglang_plugin); here the counting is checked on hand-built paths, and the plugin, found the way
sglang's load_plugins finds it (importlib.metadata's entry points), on a stand-in for sglang's eagle_utils.
"""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ddtree_accept_stats as das  # noqa: E402


def test_chain_and_off_chain_nodes_are_told_apart():
    # Two requests, N = 8 nodes each (request 1's are 8..15), block 4 (chain nodes 1, 2, 3).
    stats = das.count_step(das.empty(), [[0, 1, 2, -1], [8, 9, 13, 14]], [2, 3], 8)
    assert stats["request_steps"] == 2 and stats["verify_calls"] == 1
    assert stats["accepted_drafts"] == 5
    # request 0: chain nodes 1, 2; request 1: node 1 (chain), then 5 and 6 (off the chain)
    assert stats["off_chain_accepted"] == 2
    assert stats["request_steps_off_chain"] == 1
    assert stats["accepted_by_depth"] == [0, 2, 2, 1]
    assert stats["off_chain_by_depth"] == [0, 0, 1, 1]


def test_an_off_chain_node_at_depth_one_counts_its_whole_path():
    # The path leaves the chain at depth 1 (node 4, a sibling of chain node 1): both accepted nodes are off it.
    stats = das.count_step(das.empty(), [[0, 4, 7, -1]], [2], 16)
    assert (stats["accepted_drafts"], stats["off_chain_accepted"]) == (2, 2)


def test_no_accepted_draft_counts_a_step_and_nothing_else():
    stats = das.count_step(das.empty(), [[0, -1, -1, -1]], [0], 16)
    assert stats["request_steps"] == 1 and stats["accepted_drafts"] == 0 and stats["off_chain_accepted"] == 0


def test_a_node_outside_the_request_tree_is_refused():
    with pytest.raises(ValueError, match="not in its tree"):
        das.count_step(das.empty(), [[0, 1, -1], [8, 3, -1]], [1, 1], 8)  # request 1 points into request 0


def test_delta_between_two_readings():
    before = das.count_step(das.empty(), [[0, 1, -1]], [1], 8)
    after = das.count_step(json.loads(json.dumps(before)), [[0, 5, 6]], [2], 8)
    d = das.delta(before, after)
    assert d["accepted_drafts"] == 2 and d["off_chain_accepted"] == 2 and d["verify_calls"] == 1
    assert d["accepted_by_depth"] == [0, 1, 1] and d["off_chain_by_depth"] == [0, 1, 1]


FAKE_EAGLE_UTILS = textwrap.dedent(
    """
    class T:
        def __init__(self, rows):
            self.rows = rows
            self.shape = (len(rows), len(rows[0])) if rows and isinstance(rows[0], list) else (len(rows),)

        def tolist(self):
            return self.rows

    def verify_tree_greedy_func(predicts, accept_index, accept_token_num, candidates, retrieve_index,
                                retrieve_next_token, retrieve_next_sibling, target_predict, topk=-1):
        return predicts, T([[0, 1, 6, -1]]), T([2])
    """
)
CALL = textwrap.dedent(
    """
    import sys
    from importlib.metadata import entry_points
    for ep in entry_points(group="sglang.srt.plugins"):  # what sglang.srt.plugins.load_plugins does
        ep.load()()
    from sglang.srt.speculative import eagle_utils as eu
    idx = eu.T([list(range(8))])
    out = eu.verify_tree_greedy_func(predicts="p", accept_index=None, accept_token_num=None, candidates=None,
                                     retrieve_index=idx, retrieve_next_token=None, retrieve_next_sibling=None,
                                     target_predict=None)
    print(out[0], hasattr(eu.verify_tree_greedy_func, "__wrapped__"))
    """
)


def _fake_sglang(root):
    pkg = root / "sglang" / "srt" / "speculative"
    pkg.mkdir(parents=True)
    for d in (root / "sglang", root / "sglang" / "srt", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "eagle_utils.py").write_text(FAKE_EAGLE_UTILS)


def _run(root, stats_path=None):
    env = {k: v for k, v in os.environ.items() if k != das.ENV}
    env["PYTHONPATH"] = str(root)
    if stats_path is not None:
        env = das.server_env(env, stats_path)
    return subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True, text=True, check=True).stdout


def test_the_plugin_found_by_sglangs_entry_points_counts_a_verify_call(tmp_path):
    _fake_sglang(tmp_path)
    stats_path = tmp_path / "stats.json"
    out = _run(tmp_path, stats_path)
    assert out.split() == ["p", "True"]  # the result passes through, the function is wrapped
    stats = json.loads(stats_path.read_text())
    assert (stats["accepted_drafts"], stats["off_chain_accepted"]) == (2, 1)


def test_a_server_not_counted_runs_without_the_plugin(tmp_path):
    _fake_sglang(tmp_path)
    assert _run(tmp_path).split() == ["p", "False"]
    env = das.server_env({"PYTHONPATH": "/site", "A": "1"}, tmp_path / "s.json")
    assert env["PYTHONPATH"].split(os.pathsep) == [das.PLUGIN_DIR, str(HERE), "/site"] and env["A"] == "1"
    # the variable alone (no plugin on the path) counts nothing, and the plugin without it wraps nothing
    env = {k: v for k, v in os.environ.items() if k != das.ENV}
    env.update(PYTHONPATH=os.pathsep.join([das.PLUGIN_DIR, str(HERE), str(tmp_path)]))
    run = subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["p", "False"]


def test_the_device_check_holds_the_counts_to_what_the_server_reported():
    import ddtree_check  # noqa: PLC0415 - tests/device, stdlib only

    rows = [{"completion_tokens": 64, "spec_verify_ct": 30}, {"completion_tokens": 64, "spec_verify_ct": 40}]
    stats = das.empty() | {"accepted_drafts": 33 + 23 + 2, "off_chain_accepted": 7, "request_steps": 70}
    check = ddtree_check.accept_stats_check({"rows": rows, "accept_stats": stats}, block=4)
    # first token from the prefill, one bonus token per step: 33 + 23 accepted, up to B - 1 = 3 more each
    assert check["reported_accepted_range"] == [56, 62] and check["pass"]
    assert check["off_chain_share"] == round(7 / 58, 4)
    stats["accepted_drafts"] = 63
    assert not ddtree_check.accept_stats_check({"rows": rows, "accept_stats": stats}, block=4)["pass"]
    assert not ddtree_check.accept_stats_check({"rows": rows}, block=4)["pass"]


def test_the_recorded_h200_counts_pass_with_the_overlap_step_each_request_is_verified_after_it_finished():
    # tests/device/records/2026-12-02-h200-hybrid-trained: the hook counted 8 verify steps more than the
    # 8 requests' spec_verify_ct (one each, the overlap scheduler's step after the request finished), and
    # their accepted drafts put the counts above the old range [low, low + (B - 1) * requests].
    import ddtree_check  # noqa: PLC0415 - tests/device, stdlib only

    record = json.loads((HERE / "records" / "2026-12-02-h200-hybrid-trained" / "ddtree-check.json").read_text())
    for name, (counted, low, dropped) in {"ddtree-n16": (376, 342, 8), "ddtree-n8": (359, 326, 8)}.items():
        res = record["runs"][name]
        assert res["accept_stats"]["accepted_drafts"] == counted
        check = ddtree_check.accept_stats_check(res, block=4)
        assert check["pass"], check
        assert check["dropped_steps"] == dropped == len(res["rows"])
        assert check["reported_accepted_range"] == [low, low + 3 * (8 + dropped)]
        assert counted > low + 3 * 8  # what the old range rejected
        # More steps than one per request, or fewer than reported, is still a failure.
        for steps in (res["accept_stats"]["request_steps"] + 1, check["reported_steps"] - 1):
            stats = res["accept_stats"] | {"request_steps": steps}
            assert not ddtree_check.accept_stats_check(res | {"accept_stats": stats}, block=4)["pass"]


def test_the_device_check_gives_the_plugin_to_counted_servers_only():
    import ddtree_check  # noqa: PLC0415 - tests/device, stdlib only

    base = {"PYTHONPATH": "/site", "HF_HUB_OFFLINE": "1"}
    counted = ddtree_check.server_env(base, {"SGLANG_DDTREE_BUDGET": "16", das.ENV: "/out/a.json"})
    assert counted["PYTHONPATH"].split(os.pathsep)[0] == das.PLUGIN_DIR and counted[das.ENV] == "/out/a.json"
    assert ddtree_check.server_env(base, {"SGLANG_DDTREE_BUDGET": "16"}) == dict(base, SGLANG_DDTREE_BUDGET="16")
    assert (pathlib.Path(das.PLUGIN_DIR) / "specdec_device_plugin-0.dist-info" / "entry_points.txt").is_file()
