# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tree speculative sampling (temperature > 0): the reference rule in ddtree_utils.verify_sampling.

On a small synthetic target and a draft that disagrees with it, DDTree steps (tree from the draft's
top-k, sampled verify) emit token pairs whose distribution matches the target's own within a chi-square
test (fixed seed, p in the message). Two wrong rules fail the same test; greedy stays exact.
"""

import math
import random

import pytest
from ddtree_set_files import REPO, SETS, load, set_module

UTILS = {s: set_module(s, "ddtree_utils.py") for s in SETS}
# The chi-square tail of the device harness (one implementation, tested below on known values).
_gamma_q = load(REPO / "tests" / "device" / "ddtree_e2e.py").gamma_q
VOCAB = 5
DEPTH = 3  # drafted positions per block (B = 4)
TOPK = 3
BUDGET = 9
SAMPLES = 12000
ALPHA = 1e-3  # generous: a correct rule fails one run in a thousand


def test_chi_square_tail_matches_known_values():
    # chi-square survival function: df 1 at 3.841 -> 0.05; df 10 at 23.209 -> 0.01; df 24 at 24 -> ~0.462
    assert _gamma_q(0.5, 3.841 / 2) == pytest.approx(0.05, abs=1e-3)
    assert _gamma_q(5.0, 23.209 / 2) == pytest.approx(0.01, abs=1e-4)
    assert _gamma_q(12.0, 12.0) == pytest.approx(0.4616, abs=1e-3)


def _target(context):
    """The synthetic target: a fixed distribution over VOCAB tokens per context (seeded by it)."""
    rng = random.Random("target:%s" % list(context))  # str seeds are hashed with sha512: stable
    raw = [rng.random() ** 2 + 0.02 for _ in range(VOCAB)]
    total = sum(raw)
    return [x / total for x in raw]


def _draft(context):
    """A draft that disagrees with the target: per position a distribution that ignores the context's
    last token, as DFlash's per-position marginals do (top-k log-probabilities, best first)."""
    rng = random.Random("draft:%d" % (len(context) % 2))
    lps, toks = [], []
    for _d in range(DEPTH):
        raw = [rng.random() + 0.05 for _ in range(VOCAB)]
        order = sorted(range(VOCAB), key=lambda t: -raw[t])[:TOPK]
        total = sum(raw)
        lps.append([math.log(raw[t] / total) for t in order])
        toks.append(order)
    return lps, toks


def _tree_step(du, context, rng, verify):
    lps, toks = _draft(context)
    tree = du.build_tree(context[-1], lps, toks, BUDGET)
    paths = {0: list(context)}
    for i in range(1, len(tree)):
        paths[i] = [*paths[tree.parents[i]], tree.tokens[i]]
    probs = [_target(paths[i]) for i in range(len(tree))]
    path, bonus = verify(du, tree.tokens, tree.parents, probs, rng.random)
    return [tree.tokens[i] for i in path[1:]] + [bonus]


def _reference_verify(du, tokens, parents, probs, uniform):
    return du.verify_sampling(tokens, parents, probs, uniform)


def _first_two(du, verify, seed):
    rng = random.Random(seed)
    counts = {}
    for _ in range(SAMPLES):
        context, out = [0], []
        while len(out) < 2:
            emitted = _tree_step(du, context + out, rng, verify)
            out += emitted
        key = tuple(out[:2])
        counts[key] = counts.get(key, 0) + 1
    return counts


def _chi_square_p(counts):
    p1 = _target([0])
    stat, cells = 0.0, 0
    for a in range(VOCAB):
        p2 = _target([0, a])
        for b in range(VOCAB):
            expected = SAMPLES * p1[a] * p2[b]
            stat += (counts.get((a, b), 0) - expected) ** 2 / expected
            cells += 1
    return _gamma_q((cells - 1) / 2.0, stat / 2.0), stat


def _kernel_form(du, tokens, parents, probs, uniform):
    # The form sgl_kernel's tree_speculative_sampling_target_only computes (as transcribed in
    # tests/device/ddtree_worker_sim.py): one coin per node against the cumulative target mass of the
    # siblings tried so far; the rejected tokens' mass removed from the bonus token's distribution.
    first_child, next_sibling = du.retrieve_links(parents)
    path, cur = [0], 0
    while True:
        coin, acc, rejected = uniform(), 0.0, set()
        child, moved = first_child[cur], False
        while child >= 0:
            acc += probs[cur][tokens[child]]
            if coin <= acc:
                path.append(child)
                cur, moved = child, True
                break
            rejected.add(tokens[child])
            child = next_sibling[child]
        if not moved:
            residual = [0.0 if t in rejected else p for t, p in enumerate(probs[cur])]
            return path, du._draw(residual, uniform())


@pytest.mark.parametrize("name", SETS)
@pytest.mark.parametrize("verify", [_reference_verify, _kernel_form])
def test_tree_sampling_emits_the_targets_distribution(name, verify):
    du = UTILS[name]
    counts = _first_two(du, verify, seed=1234)
    p, stat = _chi_square_p(counts)
    assert sum(counts.values()) == SAMPLES
    assert p > ALPHA, f"tree sampling's first two tokens differ from the target's: chi2={stat:.1f}, p={p:.2e}"


def _no_residual(du, tokens, parents, probs, uniform):
    # Wrong: a rejected sibling's mass stays in the distribution the next sibling and the bonus use.
    first_child, next_sibling = du.retrieve_links(parents)
    path, cur = [0], 0
    while True:
        child, moved = first_child[cur], False
        while child >= 0:
            if uniform() < probs[cur][tokens[child]]:
                path.append(child)
                cur, moved = child, True
                break
            child = next_sibling[child]
        if not moved:
            return path, du._draw(probs[cur], uniform())


def _draft_ratio(du, tokens, parents, probs, uniform):
    # Wrong: min(1, p / q) with the draft's own q for tokens the draft did not sample (top-k).
    first_child, next_sibling = du.retrieve_links(parents)
    path, cur = [0], 0
    while True:
        residual = list(probs[cur])
        child, moved = first_child[cur], False
        while child >= 0:
            token = tokens[child]
            if uniform() < min(1.0, residual[token] / 0.5):
                path.append(child)
                cur, moved = child, True
                break
            residual[token] = 0.0
            child = next_sibling[child]
        if not moved:
            return path, du._draw(residual, uniform())


@pytest.mark.parametrize("wrong", [_no_residual, _draft_ratio])
def test_the_statistical_test_fails_a_wrong_rule(wrong):
    du = UTILS[SETS[0]]
    p, stat = _chi_square_p(_first_two(du, wrong, seed=1234))
    assert p < ALPHA, f"{wrong.__name__} passed the distribution test: chi2={stat:.1f}, p={p:.2e}"


@pytest.mark.parametrize("seed", range(40))
def test_greedy_targets_make_sampling_the_greedy_verify(seed):
    du = UTILS[SETS[0]]
    rng = random.Random(seed)
    lps, toks = _draft([seed])
    tree = du.build_tree(rng.randrange(VOCAB), lps, toks, BUDGET)
    predict = [rng.randrange(VOCAB) for _ in range(len(tree))]
    one_hot = [[1.0 if t == predict[i] else 0.0 for t in range(VOCAB)] for i in range(len(tree))]
    assert du.verify_sampling(tree.tokens, tree.parents, one_hot, rng.random) == du.verify_greedy(
        tree.tokens, tree.parents, predict
    )
