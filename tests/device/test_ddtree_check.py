"""The replay harness's launch flags and graph check (tests/device/ddtree_check.py), on a CPU.

Until 2026-12-05 every replay server ran eager (``--disable-cuda-graph``) and the hybrid ones with the radix cache
off, which no deploy does (tests/device/records/2026-12-05-h100-ddtree-replay-triton). ``--deploy-config`` keeps
both on and then asks that every DDTREE server verify mostly on graphs, read from sglang's own verify lines.
"""

import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import ddtree_check  # noqa: E402 - tests/device, stdlib only


def _runs(*extra):
    args = ddtree_check.build_parser().parse_args(
        ["--python", "python3", "--target", "/t", "--draft", "/d", "--out", "/tmp/x", *extra]
    )
    return {name: flags for name, flags, _env, _want in ddtree_check.plan_runs(args, [16, 8])}


@pytest.mark.parametrize("hybrid", [False, True])
def test_the_harness_default_is_eager_and_the_deploy_config_is_not(hybrid):
    eager = _runs(*(["--hybrid"] if hybrid else []))
    deployed = _runs("--deploy-config", *(["--hybrid"] if hybrid else []))
    assert set(eager) == set(deployed) == {"dflash", "ddtree-n16", "ddtree-n8", "target"}
    for name in eager:
        assert "--disable-cuda-graph" in eager[name]
        assert ("--disable-radix-cache" in eager[name]) is hybrid
        assert "--disable-cuda-graph" not in deployed[name] and "--disable-radix-cache" not in deployed[name]


LINE = (
    "[2026-12-05 22:46:58] DDTREE verify step %d: bs=1 tree_nodes_per_request=16 budget=16 topk=8 max_depth=15 "
    "accepted_drafts_mean=0.000 recurrent_state=tree verify=greedy cuda_graph=%s\n"
)
START = "[2026-12-05 22:46:17] DDTREE draft tree: block_size=16 budget=16 (requested 16, SGLANG_DDTREE_BUDGET) topk=8\n"


def _result(tmp_path, graphs):
    log = tmp_path / "server.log"
    log.write_text(START + "".join(LINE % (i, g) for i, g in enumerate(graphs, 1)))
    return {"mean_accept_length": 2.0, "budget_log": ddtree_check.budget_lines(log)}


@pytest.mark.parametrize(
    ("graphs", "passes"),
    [(["True"] * 9 + ["False"], True), (["False"] * 10, False), (["True", "False"], False), ([], False)],
)
def test_a_deploy_config_replay_needs_its_verify_steps_on_graphs(tmp_path, graphs, passes):
    results = {"dflash": {"mean_accept_length": 1.5}, "ddtree-n16": _result(tmp_path, graphs)}
    checks = ddtree_check.ddtree_checks(results, [16], True, deploy_config=True)
    assert checks["cuda_graph_ddtree-n16"]["pass"] is passes
    assert checks["cuda_graph_ddtree-n16"]["True"] == graphs.count("True")
    # without --deploy-config the harness's eager servers are not asked for graphs
    assert "cuda_graph_ddtree-n16" not in ddtree_check.ddtree_checks(results, [16], True)
