# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The draft tree built as array operations (ddtree_tree.py) against the reference builder.

ddtree_tree.build_tree_arrays is what the ddtree patch sets' verify step runs on the GPU (torch); the
same code runs here on numpy (CI has no torch). It must give, request by request, exactly the tree of
ddtree_utils.build_tree (heapq, Python): the same nodes in the same order, ties included, with the
same links, ancestor mask and positions. The comparison is proven able to fail: builders that break
ties the other way, pop stale frontier entries, or drop the seeded chain are caught on the same inputs.
"""

import ast

import numpy as np
import pytest
from ddtree_set_files import SETS, set_file_path, set_module

du = set_module(SETS[0], "ddtree_utils.py")
TREES = {s: set_module(s, "ddtree_tree.py") for s in SETS}
dt = TREES[SETS[0]]


def test_every_ddtree_set_ships_the_same_array_builder():
    blobs = {s: set_file_path(s, "ddtree_tree.py").read_bytes() for s in SETS}
    assert len(set(blobs.values())) == 1, "the sets' ddtree_tree.py differ"


def _corpus(seed=0, groups=260, bs=16):
    """Random batches: discrete log-probabilities (many ties, equal path sums, zeros), continuous ones,
    -inf entries; depth 0..6, top-k 1..4, budgets from 1 to past the capacity."""
    rng = np.random.default_rng(seed)
    cases = []
    for g in range(groups):
        depth = int(rng.integers(0, 7))
        k = int(rng.integers(1, 5))
        cap = du.tree_capacity(depth + 1, k)
        budget = int(rng.integers(1, min(cap + 3, 48)))
        kind = g % 3
        if kind == 0:
            lp = -rng.integers(0, 4, size=(bs, depth, k)).astype(np.float64)
        elif kind == 1:
            lp = np.log(rng.random((bs, depth, k)))
        else:
            lp = -rng.integers(0, 3, size=(bs, depth, k)).astype(np.float64) * 0.5
            lp[rng.random(lp.shape) < 0.2] = -np.inf
        tokens = np.stack([rng.permutation(1000)[: depth * k].reshape(depth, k) for _ in range(bs)])
        roots = rng.integers(0, 1000, size=bs)
        prefix = rng.integers(0, 50, size=bs)
        cases.append((roots, lp, tokens.reshape(bs, depth, k), budget, prefix))
    return cases


CORPUS = _corpus()


def _reference(root, lp, tokens, budget, prefix):
    tree = du.build_tree(int(root), lp.tolist(), tokens.tolist(), budget)
    first, sibling = du.retrieve_links(tree.parents)
    return {
        "tokens": tree.tokens,
        "parents": tree.parents,
        "depths": tree.depths,
        "ranks": tree.ranks,
        "first_child": first,
        "next_sibling": sibling,
        "ancestor_mask": du.ancestor_mask(tree.parents),
        "positions": du.positions(tree.depths, int(prefix)),
    }


REFERENCE = [
    [_reference(r, lp, t, budget, p) for r, lp, t, p in zip(roots, lps, toks, prefix)]
    for roots, lps, toks, budget, prefix in CORPUS
]


def _mismatches(build):
    """Requests whose tree differs from the reference's in any node, order, link, mask or position."""
    bad, total, first = 0, 0, None
    for (roots, lp, toks, budget, prefix), refs in zip(CORPUS, REFERENCE):
        out = build(roots, lp, toks, budget, prefix)
        for b, ref in enumerate(refs):
            total += 1
            m = int(out["num_nodes"][b])
            got = {key: np.asarray(out[key][b])[:m].tolist() for key in ref if key != "ancestor_mask"}
            got["ancestor_mask"] = np.asarray(out["ancestor_mask"][b])[:m, :m].tolist()
            if m != len(ref["tokens"]) or got != ref:
                bad += 1
                first = first or (lp[b].tolist(), budget, got["tokens"], ref["tokens"])
    return bad, total, first


def _real(module):
    def build(roots, lp, toks, budget, prefix):
        return module.build_tree_arrays(roots, lp, toks, budget, prefix_lens=prefix)

    return build


@pytest.mark.parametrize("name", SETS)
def test_array_builder_equals_the_reference_on_thousands_of_trees_ties_included(name):
    bad, total, first = _mismatches(_real(TREES[name]))
    assert total >= 4000
    ties = sum(
        1 for _roots, lp, _t, _b, _p in CORPUS for row in lp for depth in row if len(set(depth.tolist())) < len(depth)
    )
    assert ties > 1000, "the corpus must hold ties"
    assert bad == 0, f"{bad} of {total} trees differ from ddtree_utils.build_tree; first: {first}"


def test_the_comparison_catches_ties_broken_the_other_way(monkeypatch):
    def last_pushed_first(ops, valid, score, counter, big):
        best = ops.max_last(ops.where(valid, score, float("-inf")))
        tied = valid & (score == best)
        return ops.argmin_last(ops.where(tied, -counter, big))

    monkeypatch.setattr(dt, "_pop_index", last_pushed_first)
    bad, total, _first = _mismatches(_real(dt))
    assert bad > 0, f"a builder breaking ties by the newest entry passed on all {total} trees"


def test_the_comparison_catches_a_builder_that_pops_stale_entries(monkeypatch):
    # Ignores the frontier's validity: nodes already taken come back, the tree stops being the
    # reference's prefix-closed best-first set.
    def any_entry(ops, valid, score, counter, big):
        best = ops.max_last(score)
        return ops.argmin_last(ops.where(score == best, counter, big))

    monkeypatch.setattr(dt, "_pop_index", any_entry)
    bad, total, _first = _mismatches(_real(dt))
    assert bad > 0, f"a builder popping stale entries passed on all {total} trees"


def test_the_comparison_catches_a_builder_without_the_seeded_chain():
    # Plain best-first over every node (no top-1 chain seeded first), the same outputs otherwise.
    def unseeded(roots, lp, toks, budget, prefix):
        bs, depth, k = lp.shape
        out = {key: np.full((bs, budget), -1, dtype=np.int64) for key in ("tokens", "parents", "depths", "ranks")}
        out["num_nodes"] = np.zeros(bs, dtype=np.int64)
        masks, links = np.zeros((bs, budget, budget), dtype=bool), {"first_child": [], "next_sibling": []}
        positions = np.zeros((bs, budget), dtype=np.int64)
        for b in range(bs):
            nodes = [((), 0.0)]
            frontier = [((r,), float(lp[b, 0, r])) for r in range(k)] if depth else []
            while frontier and len(nodes) < budget:
                frontier.sort(key=lambda item: (-item[1], item[0]))
                path, score = frontier.pop(0)
                nodes.append((path, score))
                if len(path) < depth:
                    frontier += [((*path, r), score + float(lp[b, len(path), r])) for r in range(k)]
            index = {path: i for i, (path, _s) in enumerate(nodes)}
            parents = [-1] + [index[path[:-1]] for path, _s in nodes[1:]]
            out["tokens"][b, : len(nodes)] = [int(roots[b])] + [int(toks[b, len(p) - 1, p[-1]]) for p, _s in nodes[1:]]
            out["parents"][b, : len(nodes)] = parents
            out["depths"][b, : len(nodes)] = [len(p) for p, _s in nodes]
            out["ranks"][b, : len(nodes)] = [p[-1] if p else 0 for p, _s in nodes]
            out["num_nodes"][b] = len(nodes)
            positions[b, : len(nodes)] = [int(prefix[b]) + len(p) for p, _s in nodes]
            masks[b, : len(nodes), : len(nodes)] = du.ancestor_mask(parents)
            first, sibling = du.retrieve_links(parents)
            links["first_child"].append(first + [-1] * (budget - len(nodes)))
            links["next_sibling"].append(sibling + [-1] * (budget - len(nodes)))
        out.update({key: np.array(val) for key, val in links.items()})
        out["ancestor_mask"], out["positions"] = masks, positions
        return out

    bad, total, _first = _mismatches(unseeded)
    assert bad > 0, f"a builder without the seeded chain passed on all {total} trees"


def test_shapes_are_static_for_a_batch_size_and_budget():
    rng = np.random.default_rng(3)
    shapes = set()
    for _ in range(20):
        lp = -rng.integers(0, 5, size=(4, 5, 3)).astype(np.float64)
        toks = rng.integers(0, 100, size=(4, 5, 3))
        out = dt.build_tree_arrays(rng.integers(0, 100, size=4), lp, toks, 12, prefix_lens=rng.integers(0, 9, size=4))
        shapes.add(tuple((key, tuple(np.asarray(val).shape)) for key, val in sorted(out.items())))
    assert len(shapes) == 1
    assert dict(next(iter(shapes)))["ancestor_mask"] == (4, 12, 12)
    assert dict(next(iter(shapes)))["chain"] == (4, 6)


def test_every_output_is_contiguous_row_major_memory():
    # sglang's kernels (verify_tree_greedy, the tree sampling, the recurrent tree kernels) read the
    # token and link arrays as raw row-major memory: a strided view would be misread.
    roots, lp, toks, budget, prefix = CORPUS[7]
    out = dt.build_tree_arrays(roots, lp, toks, budget, prefix_lens=prefix)
    for key, val in out.items():
        assert val.flags["C_CONTIGUOUS"], key


def test_the_chain_layout_is_the_seeded_top_one_chain():
    roots, lp, toks, budget, prefix = CORPUS[1]
    out = dt.build_tree_arrays(roots, lp, toks, budget, prefix_lens=prefix)
    depth = lp.shape[1]
    chain = out["chain"]
    assert chain.shape[1] == min(depth, budget - 1) + 1
    for b in range(len(roots)):
        nodes = chain[b].tolist()
        assert nodes == list(range(len(nodes)))
        for d, node in enumerate(nodes[1:]):
            best = int(np.argmax(lp[b, d]))  # first best rank on ties, as the reference
            assert int(out["tokens"][b, node]) == int(toks[b, d, best])
            assert int(out["parents"][b, node]) == d


def test_full_mask_is_the_layout_the_worker_hands_to_sglang():
    rng = np.random.default_rng(5)
    roots, lp, toks, budget, prefix = CORPUS[4]
    out = dt.build_tree_arrays(roots, lp, toks, budget, prefix_lens=prefix)
    n = budget
    need = int(sum(n * (int(p) + n) for p in prefix))
    size = need + int(rng.integers(0, 100))  # a host upper bound, larger than needed
    flat = dt.full_mask(out["ancestor_mask"], prefix, size)
    expected = []
    for b, p in enumerate(prefix):
        anc = out["ancestor_mask"][b]
        expected.append(np.concatenate([np.ones((n, int(p)), dtype=bool), anc], axis=1).reshape(-1))
    expected = np.concatenate(expected)
    assert flat.shape == (size,)
    assert flat[:need].tolist() == expected.tolist()
    assert flat[need:].all()


def test_full_mask_with_too_small_a_buffer_fails_loudly():
    roots, lp, toks, budget, prefix = CORPUS[4]
    out = dt.build_tree_arrays(roots, lp, toks, budget, prefix_lens=prefix)
    with pytest.raises(IndexError):
        dt.full_mask(out["ancestor_mask"], prefix + 10, int(sum(budget * (int(p) + budget) for p in prefix)))


def test_the_builder_has_no_host_synchronisation():
    # No call that reads a device value on the host: .item(), .tolist(), .cpu(), .numpy(), nonzero,
    # and no boolean-mask indexing (every subscript is a slice, a constant or a None).
    tree = ast.parse(set_file_path(SETS[0], "ddtree_tree.py").read_text())
    calls = {
        node.func.attr for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert not calls & {"item", "tolist", "cpu", "numpy", "nonzero", "masked_select", "argwhere"}, calls
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and ast.unparse(node.value) not in ("Dict", "Optional"):
            parts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            for part in parts:
                names = {n.id for n in ast.walk(part) if isinstance(n, ast.Name)}
                ok = (
                    isinstance(part, ast.Slice | ast.Constant)
                    # the seeded chain's static columns (d, k: Python ints: a loop counter, the top-k)
                    or (isinstance(part, ast.BinOp) and names <= {"d", "k"})
                    or (isinstance(part, ast.Call) and getattr(part.func, "attr", "") == "reshape")
                )
                assert ok, f"line {node.lineno}: indexing by {ast.unparse(part)}"


def test_inputs_other_than_torch_or_numpy_are_refused():
    with pytest.raises(TypeError, match="torch tensors or numpy arrays"):
        dt.build_tree_arrays([1], [[[0.0]]], [[[1]]], 2)


# -- the hybrid commit's node choices on the device (commit_arrays) ---------------------------------


def _accepted_paths(seed, cases=3000):
    """Random verify results: per request the root then a ascending accepted nodes, -1 padding."""
    rng = np.random.default_rng(seed)
    for _ in range(cases):
        bs, block = int(rng.integers(1, 6)), int(rng.integers(2, 9))
        budget = int(rng.integers(block, 3 * block + 1))
        rows, drafts, prefixes = [], [], []
        for b in range(bs):
            a = int(rng.integers(0, block))
            nodes = sorted(rng.choice(np.arange(1, budget), size=a, replace=False).tolist())
            rows.append([b * budget] + [b * budget + x for x in nodes] + [-1] * (block - 1 - a))
            drafts.append(a)
            prefixes.append(int(rng.integers(0, 300)))
        yield rows, drafts, budget, prefixes, int(rng.choice([1, 2, 3, 8, 64]))


def _commit_mismatches(commit_arrays):
    bad = 0
    for rows, drafts, budget, prefixes, interval in _accepted_paths(7):
        out = commit_arrays(
            np.array(rows, dtype=np.int32), np.array(drafts, dtype=np.int32), budget, np.array(prefixes), interval
        )
        want = (du.commit_nodes(rows, drafts, budget), du.track_nodes(rows, drafts, budget, prefixes, interval))
        bad += (out["nodes"].tolist(), out["track"].tolist()) != want
    return bad


def test_commit_arrays_choose_the_reference_nodes_on_every_case():
    """The hybrid commit runs on the device (no host read); it must pick ddtree_utils' nodes."""
    assert _commit_mismatches(dt.commit_arrays) == 0


def test_the_commit_comparison_catches_an_off_by_one_track():
    def late_track(index, drafts, budget, prefix_lens=None, interval=0):
        out = dt.commit_arrays(index, drafts, budget, prefix_lens, interval)
        # the state one node later than the multiple (post // interval * interval - pre, not - 1)
        shifted = dt.commit_arrays(index, drafts, budget, np.asarray(prefix_lens) - 1, interval)
        out["track"] = shifted["track"]
        return out

    assert _commit_mismatches(late_track) > 100
