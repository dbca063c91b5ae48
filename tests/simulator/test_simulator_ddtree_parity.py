# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The simulator's DDTREE budget rules are the patch set's: same budget, top-k and refusals for every setting."""

import importlib.util
import itertools
import pathlib
import sys

import pytest
from sglang_engine_simulator import ddtree as sim

REPO = pathlib.Path(__file__).resolve().parents[2]
REAL = REPO / "patchsets" / "ddtree-0.5.17" / "files" / "sglang" / "srt" / "speculative" / "ddtree_utils.py"


def _real():
    spec = importlib.util.spec_from_file_location("ddtree_utils_parity", REAL)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


REAL_UTILS = _real()
SETTINGS = list(
    itertools.product(
        [2, 4, 16],
        [None, "", "0", "3", "8", "32", "64", "2000", "many"],
        [None, "1", "2", "0", "x"],
    )
)


def _outcome(resolve, block, env):
    try:
        return "ok", resolve(block, env)
    except ValueError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(("block", "budget", "topk"), SETTINGS)
def test_simulator_resolves_the_tree_budget_as_the_patch_set_does(block, budget, topk):
    env = {k: v for k, v in (("SGLANG_DDTREE_BUDGET", budget), ("SGLANG_DDTREE_TOPK", topk)) if v is not None}
    real_kind, real = _outcome(REAL_UTILS.resolve_ddtree_config, block, env)
    sim_kind, got = _outcome(sim.resolve, block, env)
    assert sim_kind == real_kind, (real, got)
    if real_kind == "error":
        assert got == real
    else:
        assert got == {
            "block_size": real.block_size,
            "requested": real.requested_budget,
            "budget": real.budget,
            "topk": real.topk,
        }
