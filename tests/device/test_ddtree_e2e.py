# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ddtree_e2e.py's statistics and server plan, on a CPU (the GPU run itself is a device call)."""

import argparse
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
