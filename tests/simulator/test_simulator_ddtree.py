"""DDTREE: the simulator reports the tree budget it was given, as the ddtree patch set makes sglang do."""

import pytest
from simulator_harness import FAST


def _ddtree(model_dirs, block="16"):
    return [
        "--speculative-algorithm", "DDTREE",
        "--speculative-draft-model-path", model_dirs["draft"],
        "--speculative-num-draft-tokens", block,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ({"SGLANG_DDTREE_BUDGET": "32"}, "DDTREE draft tree: block_size=16 budget=32 (requested 32,"),
        ({}, "DDTREE draft tree: block_size=16 budget=32 (requested 32,"),  # default 2 x B
        ({"SGLANG_DDTREE_BUDGET": "0"}, "budget=32 (requested 32, SGLANG_DDTREE_BUDGET) topk=8"),
        ({"SGLANG_DDTREE_BUDGET": "40", "SGLANG_DDTREE_TOPK": "2"}, "block_size=4 budget=15 (requested 40,"),
    ],
)
def test_ddtree_logs_the_budget_it_was_given(start_sim, model_dirs, env, line):
    block = "4" if "SGLANG_DDTREE_TOPK" in env else "16"
    sim = start_sim(_ddtree(model_dirs, block), env={**FAST, **env})
    sim.wait_ready(10)
    assert line in sim.logs
    assert sim.logs.index("DDTREE draft tree:") < sim.logs.index("ready to roll")


def test_dflash_logs_no_tree(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_DDTREE_BUDGET": "32"}, spec=True)
    sim.wait_ready(10)
    assert "DDTREE draft tree" not in sim.logs


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ("8", "ValueError: SGLANG_DDTREE_BUDGET=8 is below the block size 16: the tree must hold the top-1 chain"),
        ("lots", "ValueError: SGLANG_DDTREE_BUDGET='lots' is not an integer"),
        ("4096", "ValueError: SGLANG_DDTREE_BUDGET=4096 exceeds 1024 tree nodes"),
    ],
)
def test_a_bad_budget_fails_at_resolution_with_exit_1(start_sim, model_dirs, budget, message):
    sim = start_sim(_ddtree(model_dirs), env={**FAST, "SGLANG_DDTREE_BUDGET": budget})
    assert sim.wait_exit(10) == 1
    assert message in sim.stderr
    assert "ready to roll" not in sim.stderr
