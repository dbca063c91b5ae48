# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The DDTree tree builder that the ddtree patch sets install into sglang (ddtree_utils.py).

The file is pure Python, so CI tests the very bytes the patch set overlays, on a CPU. The GPU half
(ddtree_worker.py: tensors, the tree mask, sgl_kernel's verify_tree_greedy) is checked against this
reference on the H200 by tests/device/ddtree_check.py.
"""

import itertools
import math
import random
import sys

import pytest
from ddtree_set_files import SETS, set_file_path, set_module

du = set_module("ddtree-0.5.17", "ddtree_utils.py")
# Each set's own copy (the sets ship the same file: test_every_ddtree_set_ships_the_same_tree_builder).
SET_UTILS = {name.removeprefix("ddtree-"): set_module(name, "ddtree_utils.py") for name in SETS}


@pytest.fixture(params=sorted(SET_UTILS))
def each_set(request, monkeypatch):
    """Runs the test on each set's ddtree_utils.py: the module-level `du` the helpers use is that set's."""
    monkeypatch.setattr(sys.modules[__name__], "du", SET_UTILS[request.param])
    return request.param


def test_every_ddtree_set_ships_the_same_tree_builder():
    assert list(SETS)[:1] == ["ddtree-0.5.17"]
    blobs = {s: set_file_path(s, "ddtree_utils.py").read_bytes() for s in SETS}
    assert len(set(blobs.values())) == 1, "the sets' ddtree_utils.py differ: %s" % sorted(blobs)


def _draft(rng, depth, topk, vocab=1000):
    """Random per-depth top-k (distinct tokens per depth, log-probabilities best first)."""
    lps, toks = [], []
    for _ in range(depth):
        raw = sorted((rng.random() for _ in range(topk)), reverse=True)
        total = sum(raw) * (1.0 + rng.random())
        lps.append([math.log(x / total) for x in raw])
        toks.append(rng.sample(range(vocab), topk))
    return lps, toks


def _paths(tree):
    """Node -> tuple of top-k ranks from the root (its identity in the full tree)."""
    out = {}
    for i in range(len(tree)):
        ranks, j = [], i
        while j > 0:
            ranks.append(tree.ranks[j])
            j = tree.parents[j]
        out[i] = tuple(reversed(ranks))
    return out


def _score(lps, ranks):
    return sum(lps[d][r] for d, r in enumerate(ranks))


# --- budget -------------------------------------------------------------------------------------


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize(
    ("block", "topk", "budget"), [(4, 4, 4), (4, 4, 16), (4, 2, 15), (4, 2, 40), (16, 8, 64), (8, 1, 8)]
)
def test_tree_holds_exactly_the_budget_or_all_that_top_k_allows(block, topk, budget):
    lps, toks = _draft(random.Random(block * 100 + budget), block - 1, topk)
    tree = du.build_tree(7, lps, toks, budget)
    assert len(tree) == min(budget, du.tree_capacity(block, topk))
    assert len(tree.tokens) == len(tree.parents) == len(tree.depths) == len(tree.ranks)
    assert max(tree.depths) <= block - 1


@pytest.mark.usefixtures("each_set")
def test_capacity_counts_a_full_top_k_tree():
    assert du.tree_capacity(4, 2) == 1 + 2 + 4 + 8
    assert du.tree_capacity(2, 8) == 9
    assert du.tree_capacity(16, 8) == du.MAX_BUDGET


# --- the top-1 chain ----------------------------------------------------------------------------


@pytest.mark.usefixtures("each_set")
def test_chain_is_seeded_even_where_best_first_alone_would_drop_it():
    # Depth 1 has two near-equal candidates, deeper depths are flat: the best 5 paths by score are
    # shallow ones, so a pure best-first tree of 5 nodes would not reach depth 3 of the chain.
    lps = [[math.log(0.50), math.log(0.49)], [math.log(0.25)] * 2, [math.log(0.25)] * 2]
    toks = [[10, 11], [20, 21], [30, 31]]
    all_paths = [p for n in range(1, 4) for p in itertools.product(range(2), repeat=n)]
    best4 = sorted(all_paths, key=lambda p: (-_score(lps, p), p))[:4]
    assert (0, 0, 0) not in best4  # what best-first alone would verify

    tree = du.build_tree(1, lps, toks, 5)
    assert tree.tokens[:4] == [1, 10, 20, 30] and tree.parents[:4] == [-1, 0, 1, 2]
    assert len(tree) == 5
    assert tree.tokens[4] == 11 and tree.parents[4] == 0  # the best non-chain node


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize("seed", range(20))
def test_chain_first_then_the_best_scoring_other_nodes(seed):
    rng = random.Random(seed)
    block, topk = rng.randint(2, 7), rng.randint(1, 5)
    budget = rng.randint(block, 3 * block + 8)
    lps, toks = _draft(rng, block - 1, topk)
    tree = du.build_tree(5, lps, toks, budget)
    paths = _paths(tree)
    chain = [tuple([0] * d) for d in range(block)]
    assert [paths[i] for i in range(block)] == chain
    assert tree.tokens[1:block] == [toks[d][0] for d in range(block - 1)]
    # Every other node is among the best-scoring paths not on the chain (ties impossible here).
    others = [p for n in range(1, block) for p in itertools.product(range(topk), repeat=n) if p not in chain]
    others.sort(key=lambda p: -_score(lps, p))
    taken = sorted((paths[i] for i in range(block, len(tree))), key=lambda p: -_score(lps, p))
    assert taken == others[: len(taken)]


# --- structure: parents, depths, positions, mask, retrieve links --------------------------------


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize("seed", range(10))
def test_parent_depth_position_and_links_agree_with_the_mask(seed):
    rng = random.Random(1000 + seed)
    block, topk = rng.randint(2, 6), rng.randint(1, 4)
    lps, toks = _draft(rng, block - 1, topk)
    tree = du.build_tree(3, lps, toks, rng.randint(block, 30))
    n = len(tree)
    mask = du.ancestor_mask(tree.parents)
    prefix = rng.randint(0, 500)
    pos = du.positions(tree.depths, prefix)
    first_child, next_sibling = du.retrieve_links(tree.parents)
    assert tree.parents[0] == -1 and tree.depths[0] == 0
    for i in range(n):
        ancestors = {j for j in range(n) if mask[i][j]}
        chain, j = set(), i
        while j >= 0:
            chain.add(j)
            j = tree.parents[j]
        assert ancestors == chain
        assert all(j <= i for j in ancestors)  # topological order: ancestors come first
        assert tree.depths[i] == len(ancestors) - 1 == pos[i] - prefix
        if i:
            p = tree.parents[i]
            assert tree.depths[i] == tree.depths[p] + 1
            assert tree.tokens[i] == toks[tree.depths[i] - 1][tree.ranks[i]]
        children = []
        c = first_child[i]
        while c >= 0:
            children.append(c)
            c = next_sibling[c]
        assert children == [k for k in range(n) if tree.parents[k] == i]
        assert len({tree.tokens[c] for c in children}) == len(children)  # siblings differ


@pytest.mark.usefixtures("each_set")
def test_mask_refuses_a_parent_after_its_child():
    with pytest.raises(ValueError, match="topological"):
        du.ancestor_mask([-1, 2, 0])


# --- verification on hand-made logits -----------------------------------------------------------


def _argmax(row):
    return max(range(len(row)), key=lambda t: row[t])


@pytest.mark.usefixtures("each_set")
def test_greedy_verify_accepts_exactly_the_expected_path():
    # root(1) -> 10 -> 20 -> 30 is the chain, 11 and 21 are alternatives:
    #   0:1  1:10  2:20  3:30  4:11  5:21 (child of 1)  6:31 (child of 5)
    tokens = [1, 10, 20, 30, 11, 21, 31]
    parents = [-1, 0, 1, 2, 0, 1, 5]
    vocab = 40

    def logits(best):
        row = [0.0] * vocab
        row[best] = 5.0
        row[(best + 1) % vocab] = 4.0
        return row

    # The target wants 10, then 21 (not the chain's 20), then 31, then 7: path 0 -> 1 -> 5 -> 6.
    target_logits = [logits(10), logits(21), logits(0), logits(0), logits(0), logits(31), logits(7)]
    predict = [_argmax(r) for r in target_logits]
    path, bonus = du.verify_greedy(tokens, parents, predict)
    assert path == [0, 1, 5, 6] and bonus == 7
    # The chain alone would have accepted one draft (10), the tree three (10, 21, 31).
    chain_predict = [predict[0], predict[1], predict[2]]
    assert du.chain_accept_length([1, 10, 20, 30], chain_predict) == 1

    # A target that rejects the first depth accepts nothing; the bonus is its own choice.
    assert du.verify_greedy(tokens, parents, [12, 0, 0, 0, 0, 0, 0]) == ([0], 12)


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize("seed", range(25))
def test_tree_verify_is_lossless_and_never_shorter_than_the_chain(seed):
    """A deterministic 'target' (next token = function of the whole context): the accepted tokens
    plus the bonus are exactly the target's own greedy continuation, and at least as long as what
    the linear chain gets."""
    rng = random.Random(5000 + seed)
    vocab = 6
    block, topk = rng.randint(2, 6), rng.randint(1, 4)

    def target_next(context):
        return hash((seed, *context)) % vocab

    lps, toks = [], []
    for _ in range(block - 1):
        raw = sorted((rng.random() for _ in range(topk)), reverse=True)
        lps.append([math.log(x / sum(raw)) for x in raw])
        toks.append(rng.sample(range(vocab), topk))
    root = rng.randrange(vocab)
    tree = du.build_tree(root, lps, toks, rng.randint(block, 25))

    def context(i):
        seq, j = [], i
        while j >= 0:
            seq.append(tree.tokens[j])
            j = tree.parents[j]
        return list(reversed(seq))

    predict = [target_next(context(i)) for i in range(len(tree))]
    path, bonus = du.verify_greedy(tree.tokens, tree.parents, predict)
    emitted = [tree.tokens[i] for i in path[1:]] + [bonus]
    greedy, ctx = [], [root]
    for _ in range(len(emitted)):
        greedy.append(target_next(ctx))
        ctx.append(greedy[-1])
    assert emitted == greedy
    assert all(tree.parents[b] == a for a, b in zip(path, path[1:]))
    chain_predict = [target_next([root] + [toks[d][0] for d in range(t)]) for t in range(block)]
    chain = [root] + [toks[d][0] for d in range(block - 1)]
    assert len(path) - 1 >= du.chain_accept_length(chain, chain_predict)


# --- configuration: SGLANG_DDTREE_BUDGET / SGLANG_DDTREE_TOPK -----------------------------------


@pytest.mark.usefixtures("each_set")
def test_the_budget_variable_changes_the_tree_size():
    lps, toks = _draft(random.Random(3), 15, 8)
    sizes = {}
    for raw in ("16", "32", "64", ""):
        config = du.resolve_ddtree_config(16, {"SGLANG_DDTREE_BUDGET": raw} if raw else {})
        sizes[raw] = len(du.build_tree(0, lps, toks, config.budget))
    assert sizes == {"16": 16, "32": 32, "64": 64, "": 2 * 16}
    assert du.format_budget_log(du.resolve_ddtree_config(16, {"SGLANG_DDTREE_BUDGET": "32"})).startswith(
        "DDTREE draft tree: block_size=16 budget=32 (requested 32, SGLANG_DDTREE_BUDGET) topk=8"
    )


@pytest.mark.usefixtures("each_set")
def test_budget_zero_means_the_default_and_top_k_caps_it():
    assert du.resolve_ddtree_config(4, {"SGLANG_DDTREE_BUDGET": "0"}) == du.DDTreeConfig(4, 8, 8, 8)
    capped = du.resolve_ddtree_config(4, {"SGLANG_DDTREE_BUDGET": "40", "SGLANG_DDTREE_TOPK": "2"})
    assert (capped.requested_budget, capped.budget, capped.topk) == (40, 15, 2)


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SGLANG_DDTREE_BUDGET": "3"}, "below the block size 4"),
        ({"SGLANG_DDTREE_BUDGET": "2048"}, "exceeds 1024"),
        ({"SGLANG_DDTREE_BUDGET": "many"}, "not an integer"),
        ({"SGLANG_DDTREE_TOPK": "-1"}, "must be >= 1"),
    ],
)
def test_bad_settings_are_refused_at_start_up(env, message):
    with pytest.raises(ValueError, match=message):
        du.resolve_ddtree_config(4, env)


@pytest.mark.usefixtures("each_set")
def test_a_block_of_one_token_has_no_tree():
    with pytest.raises(ValueError, match="at least 2"):
        du.resolve_ddtree_config(1, {})


@pytest.mark.usefixtures("each_set")
def test_the_controller_plans_with_the_budget_the_set_defaults_to():
    """The envelope planner and the speculation verdict size an unset budget as the engine will (one owner on the
    controller, speculation_cost); a set whose default moved without it would plan memory for another tree."""
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import (  # noqa: PLC0415
        envelope_plan,
        speculation_cost,
    )

    per_block = speculation_cost.DDTREE_DEFAULT_BUDGET_PER_BLOCK_TOKEN
    for block in (4, 8, 16):
        engine = du.resolve_ddtree_config(block, {}).requested_budget
        assert engine == per_block * block
        assert speculation_cost.effective_budget("DDTREE", block, 0) == engine
        envelope = {"algorithm": "DDTREE", "num_draft_tokens": 0}
        assert envelope_plan.draft_tokens_of(envelope, {"block_size": block}) == engine
