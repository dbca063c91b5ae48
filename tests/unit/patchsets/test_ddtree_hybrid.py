# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DDTree on a hybrid (Gated DeltaNet) target: the recurrent state over the tree, on a CPU.

A hybrid target's linear-attention layers carry a recurrent state (the GDN ssm state and the causal
conv window). Verifying a draft tree, every node must continue from its parent's state; a chain
verify (what sglang does without tree links) scans the flattened tree, node i after node i-1. What
the ddtree-0.5.17 set decides, tested here on the very file it overlays (ddtree_utils.py, pure
Python):

- the links it hands the hybrid backend (retrieve_links, checked by check_kernel_parents) make
  sglang's tree kernels give every node its parent. The kernels are modelled below from their source
  (kernels/ops/mamba/causal_conv1d_triton.py: one walk in node order, first child -> parent i, next
  sibling -> parent of i; kernels/ops/attention/fla/fused_sigmoid_gating_recurrent.py: node i starts
  from the snapshot of its parent, the root from the request's state);
- the state it commits is the last accepted node's snapshot (commit_nodes), which equals the target
  alone consuming the accepted tokens one by one; the chain's step (accepted drafts) does not;
- the snapshot pool is sized for the tree's N nodes (verify_state_steps), not the block B.

Every recurrence check also runs the flattened-order scan and asserts that it is wrong on the same
tree, so a tree where both agree cannot make the test pass by accident.
"""

import math
import random
import re
import sys

import pytest
from ddtree_set_files import REPO, SETS, set_module

du = set_module("ddtree-0.5.17", "ddtree_utils.py")
# Each set's own copy (the sets ship the same file: test_every_ddtree_set_ships_the_same_tree_builder).
SET_UTILS = {name.removeprefix("ddtree-"): set_module(name, "ddtree_utils.py") for name in SETS}


@pytest.fixture(params=sorted(SET_UTILS))
def each_set(request, monkeypatch):
    """Runs the test on each set's ddtree_utils.py: the module-level `du` the helpers use is that set's."""
    monkeypatch.setattr(sys.modules[__name__], "du", SET_UTILS[request.param])
    return request.param


CONV_WIDTH = 4  # linear_conv_kernel_dim of Qwen3.6-27B: the conv state keeps the last 3 inputs
PRIOR_WINDOW = (901, 902, 903)  # the request's conv state before the verify (oldest first)
PRIOR_STATE = 17  # the request's ssm state before the verify


def gdn_step(state, x):
    """A stand-in for one GDN update: non-linear and order-dependent, exact in integers."""
    return (state * state * 7 + state * 3 + x * 131 + 1) % 1_000_003


def conv_window(path_inputs):
    """The conv window after consuming path_inputs on top of PRIOR_WINDOW (last CONV_WIDTH-1 inputs)."""
    return tuple((PRIOR_WINDOW + tuple(path_inputs))[-(CONV_WIDTH - 1) :])


def path_of(parents, i):
    path = []
    while i >= 0:
        path.append(i)
        i = parents[i]
    return path[::-1]


def target_alone(parents, inputs, i):
    """The reference: the target consuming node i's path (root .. i) one token after another."""
    path = [inputs[j] for j in path_of(parents, i)]
    state = PRIOR_STATE
    for x in path:
        state = gdn_step(state, x)
    return state, conv_window(path)


def sglang_tree_kernels(inputs, next_token, next_sibling):
    """What sglang 0.5.17's tree kernels compute per node, given the links of the verify input.

    next_token / next_sibling None: no links (topk 1, a chain verify): node i follows node i-1.
    Returns (snapshot ssm state, snapshot conv window) per node: intermediate_ssm and
    intermediate_conv_window at step i.
    """
    n = len(inputs)
    if next_token is None:
        used = [i - 1 for i in range(n)]
    else:
        # causal_conv1d_update, HAS_EAGLE_TREE_CUSTOM_ATTN_MASK: one walk in node order.
        parent = [0] * n
        used = [0] * n
        for i in range(n):
            used[i] = parent[i] if i > 0 else -1
            if next_token[i] != -1:
                parent[next_token[i]] = i
            if next_sibling[i] != -1:
                parent[next_sibling[i]] = parent[i]
    states, windows = [], []
    for i in range(n):
        p = used[i]
        start = PRIOR_STATE if p < 0 else states[p]  # the GDN kernel: the parent's snapshot
        states.append(gdn_step(start, inputs[i]))
        # the conv kernel: itself, then parent, grandparent, ... then the prior conv state
        window, j = [], i
        while j >= 0 and len(window) < CONV_WIDTH - 1:
            window.append(inputs[j])
            j = used[j]
        prior = list(PRIOR_WINDOW)
        while len(window) < CONV_WIDTH - 1:
            window.append(prior.pop())
        windows.append(tuple(reversed(window)))
    return states, windows


def links_the_set_passes(parents):
    """The retrieve_next_token / retrieve_next_sibling rows ddtree_worker builds for one tree."""
    du.check_kernel_parents(parents)
    return du.retrieve_links(parents)


# A tree where the flattened order and the parent links differ almost everywhere: node 3 is a
# second child of the root, node 5 a second child of node 1, node 6 a grandchild through node 2.
HAND_TREE = [-1, 0, 1, 0, 3, 1, 2]
HAND_INPUTS = [5, 11, 23, 47, 95, 191, 383]


def _random_tree(rng):
    block, topk = rng.randint(3, 8), rng.randint(2, 5)
    lps, toks = [], []
    for _ in range(block - 1):
        raw = sorted((rng.random() for _ in range(topk)), reverse=True)
        total = sum(raw) * (1.0 + rng.random())
        lps.append([math.log(x / total) for x in raw])
        toks.append(rng.sample(range(1, 500), topk))
    budget = min(rng.randint(block + 2, 4 * block), du.tree_capacity(block, topk))
    return du.build_tree(rng.randrange(1, 500), lps, toks, budget)


def _off_chain(parents):
    """Nodes whose path is not the flattened prefix 0..i (the chain scan is wrong there)."""
    return {i for i in range(len(parents)) if path_of(parents, i) != list(range(i + 1))}


# --- every node's state from its parent ---------------------------------------------------------


@pytest.mark.usefixtures("each_set")
def test_hand_tree_every_node_continues_from_its_parent():
    next_token, next_sibling = links_the_set_passes(HAND_TREE)
    states, windows = sglang_tree_kernels(HAND_INPUTS, next_token, next_sibling)
    for i in range(len(HAND_TREE)):
        assert (states[i], windows[i]) == target_alone(HAND_TREE, HAND_INPUTS, i), i
    # Node 4 = root -> 3 -> 4: its window is (prior, 5, 47, 95), not the flattened (23, 47, 95).
    assert windows[4] == (5, 47, 95)


@pytest.mark.usefixtures("each_set")
def test_hand_tree_the_flattened_scan_is_wrong_off_the_chain():
    flat_states, flat_windows = sglang_tree_kernels(HAND_INPUTS, None, None)
    wrong = {
        i for i in range(len(HAND_TREE)) if (flat_states[i], flat_windows[i]) != target_alone(HAND_TREE, HAND_INPUTS, i)
    }
    assert wrong == _off_chain(HAND_TREE) == {3, 4, 5, 6}
    # The reference scans of the set agree with the two behaviours.
    tree_scan = du.tree_recurrent_scan(HAND_TREE, HAND_INPUTS, PRIOR_STATE, gdn_step)
    chain_scan = du.chain_recurrent_scan(HAND_INPUTS, PRIOR_STATE, gdn_step)
    assert tree_scan == [target_alone(HAND_TREE, HAND_INPUTS, i)[0] for i in range(7)]
    assert chain_scan == flat_states
    assert {i for i in range(7) if tree_scan[i] != chain_scan[i]} == {3, 4, 5, 6}


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize("seed", range(25))
def test_ddtree_trees_every_node_continues_from_its_parent(seed):
    rng = random.Random(7000 + seed)
    tree = _random_tree(rng)
    inputs = [rng.randrange(1, 10_000) for _ in tree.parents]
    next_token, next_sibling = links_the_set_passes(tree.parents)
    states, windows = sglang_tree_kernels(inputs, next_token, next_sibling)
    for i in range(len(tree)):
        assert (states[i], windows[i]) == target_alone(tree.parents, inputs, i), (seed, i)
    off = _off_chain(tree.parents)
    assert off, "a tree of only the chain does not tell the two scans apart"
    flat_states, _ = sglang_tree_kernels(inputs, None, None)
    assert {i for i in off if flat_states[i] != states[i]} == off


@pytest.mark.usefixtures("each_set")
def test_kernel_parent_walk_matches_the_set_and_refuses_backward_links():
    for parents in (HAND_TREE, [-1, 0, 0, 0, 1, 1, 2, 6]):
        assert du.kernel_parents(*du.retrieve_links(parents)) == [0, *parents[1:]]
    # Node 1 hangs below node 2: its parent is set only after the walk has convolved it.
    with pytest.raises(ValueError, match="changed after use"):
        du.check_kernel_parents([-1, 2, 0])
    assert du.kernel_parents([2, -1, 1], [-1, -1, -1]) == [0, -2, 0]


# --- the committed state: the accepted node's -----------------------------------------------------


@pytest.mark.usefixtures("each_set")
def test_commit_node_is_the_last_accepted_node_not_the_chain_step():
    # verify_tree_greedy's output for two requests, N = 6 (the H200 check in DDTREE-IN-SGLANG.md):
    # paths 0 -> 2 -> 5 and 0 -> 1 -> 4 (global ids b * 6 + i), two drafts each.
    accept_index = [[0, 2, 5, -1], [6, 7, 10, -1]]
    assert du.commit_nodes(accept_index, [2, 2], 6) == [5, 4]
    # The chain's step (accepted drafts) would commit nodes 2 and 2.
    assert du.commit_nodes([[0, -1, -1, -1]], [0], 6) == [0]  # nothing accepted: the root


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize("seed", range(25))
def test_committed_state_is_the_target_alone_on_the_accepted_tokens(seed):
    rng = random.Random(9100 + seed)
    trees, inputs, predicts = [], [], []
    while len(trees) < 3:
        tree = _random_tree(rng)
        root_kids = [c for c in range(len(tree)) if tree.parents[c] == 0]
        if len(root_kids) < 2:
            continue
        trees.append(tree)
        inputs.append(list(tree.tokens))  # each node's input is its token
        # The target takes an off-chain child at the root, then a random child most of the time.
        row = [tree.tokens[rng.choice(root_kids[1:])]]
        for i in range(1, len(tree)):
            kids = [c for c in range(len(tree)) if tree.parents[c] == i]
            row.append(tree.tokens[rng.choice(kids)] if kids and rng.random() < 0.7 else 0)
        predicts.append(row)
    budget = max(len(t) for t in trees)
    width = max(max(t.depths) for t in trees) + 1
    accept_index, drafts, paths = [], [], []
    for b, tree in enumerate(trees):
        path, _bonus = du.verify_greedy(tree.tokens, tree.parents, predicts[b])
        assert path[1] != 1  # off the chain from the first draft on
        paths.append(path)
        accept_index.append([b * budget + i for i in path] + [-1] * (width - len(path)))
        drafts.append(len(path) - 1)
    nodes = du.commit_nodes(accept_index, drafts, budget)
    assert nodes == [p[-1] for p in paths]
    for b, tree in enumerate(trees):
        states, windows = sglang_tree_kernels(inputs[b], *links_the_set_passes(tree.parents))
        accepted = [inputs[b][i] for i in paths[b]]
        state = PRIOR_STATE
        for x in accepted:
            state = gdn_step(state, x)
        assert (states[nodes[b]], windows[nodes[b]]) == (state, conv_window(accepted))
        # The chain's step (accepted drafts) commits another node's state.
        assert (states[drafts[b]], windows[drafts[b]]) != (state, conv_window(accepted))


@pytest.mark.usefixtures("each_set")
def test_commit_refuses_a_node_outside_its_tree():
    with pytest.raises(ValueError, match="outside its tree"):
        du.commit_nodes([[0, 1, -1]], [2], 4)  # the padding (-1) read as a node
    with pytest.raises(ValueError, match="outside its tree"):
        du.commit_nodes([[4, 5, 6]], [1], 4)  # request 0 pointing into request 1's tree


@pytest.mark.usefixtures("each_set")
def test_track_node_is_the_accepted_node_at_the_interval_boundary():
    # interval 8, prefix 6, path 0 -> 3 -> 9 -> 12 (3 drafts, 4 tokens: lengths 7..10): the state at
    # length 8 is after path position 1 (node 3); prefix 1 with one draft crosses nothing.
    rows = [[0, 3, 9, 12], [16 + 0, 16 + 2, -1, -1]]
    assert du.track_nodes(rows, [3, 1], 16, [6, 1], 8) == [3, -1]
    # prefix 7: the boundary is the root itself (position 0).
    assert du.track_nodes([[0, 3, -1, -1]], [1], 16, [7], 8) == [0]


# --- the snapshot pool: N nodes -------------------------------------------------------------------


@pytest.mark.usefixtures("each_set")
@pytest.mark.parametrize(
    ("block", "env", "steps"),
    [
        (16, {}, 32),  # default budget 2 x B: the pool holds 32 snapshots per slot, not 16
        (16, {du.ENV_BUDGET: "32"}, 32),
        (4, {du.ENV_BUDGET: "16"}, 16),
        (4, {du.ENV_BUDGET: "4"}, 4),
        (2, {du.ENV_BUDGET: "64"}, 9),  # top-k 8 at depth 1 holds 9 nodes: the budget is capped
    ],
)
def test_verify_state_steps_are_the_tree_nodes(block, env, steps):
    assert du.verify_state_steps(block, env) == steps
    assert du.verify_state_steps(block, env) == du.resolve_ddtree_config(block, env).budget


@pytest.mark.usefixtures("each_set")
def test_tree_mask_backends_are_the_ones_that_read_the_mask():
    # FA3 / FA4 build a tree mask only for EAGLE's topk > 1: under DDTREE's topk 1 they ignore it.
    assert du.TREE_MASK_ATTENTION_BACKENDS == ("triton", "flashinfer")


# --- what the sets declare (the deploy plan chooses a set by it) --------------------------------


def _serves(name):
    import yaml  # noqa: PLC0415 - the unit venv has PyYAML

    return yaml.safe_load((REPO / "patchsets" / name / "patchset.yml").read_text())["serves"]


VERSIONS = pytest.mark.parametrize("version", ["0.5.17", "0.5.23"])


@VERSIONS
def test_each_set_declares_hybrid_targets_and_the_backends_its_code_allows(version):
    serves = _serves("ddtree-" + version)
    assert serves["algorithms"] == ["DDTREE"]
    assert serves["architectures"] == ["dense", "hybrid_gdn"]
    # One owner: the backends sglang is refused with (_check_ddtree_backends) are the set's own list.
    assert serves["attention_backends"] == list(SET_UTILS[version].TREE_MASK_ATTENTION_BACKENDS)


@VERSIONS
def test_each_set_ships_the_verify_step_it_serves_with(version):
    """A set that declares DDTREE carries a tree verify step, and its hand-off from the DFlash worker."""
    set_dir = REPO / "patchsets" / ("ddtree-" + version)
    worker = (set_dir / "files/sglang/srt/speculative/ddtree_worker.py").read_text()
    # sglang's greedy tree kernel, called by the step or handed to the verify both paths share (0.5.17)
    assert "def ddtree_verify_step(" in worker and re.search(r"verify_tree_greedy_func\s*[(,]", worker)
    # the hybrid commit's node choice: the reference on the host (0.5.23) or its array form on the device
    assert "ddtree_utils.commit_nodes(" in worker or "ddtree_tree.commit_arrays(" in worker
    assert "retrieve_next_sibling=tree[" in worker
    handoff = (set_dir / "diffs/dflash_worker_v2_py.patch").read_text()
    assert "+                return ddtree_verify_step(" in handoff


def _records():
    import yaml  # noqa: PLC0415 - the unit venv has PyYAML
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: PLC0415

    sets = sorted(p.parent for p in (REPO / "patchsets").glob("*/patchset.yml"))
    return deploy_plan, [
        deploy_plan.patch_set_record(str(s), yaml.safe_load((s / "patchset.yml").read_text())) for s in sets
    ]


@VERSIONS
@pytest.mark.parametrize("model", ["qwen3.6-27b", "qwen3-dense-8b"])
def test_a_ddtree_deploy_of_the_hybrid_target_passes_the_plan_with_a_tree_mask_backend(model, version):
    import json  # noqa: PLC0415

    deploy_plan, records = _records()
    chosen = deploy_plan.choose_patch_sets("DDTREE", version, "triton", records)
    assert chosen["errors"] == [] and [r["name"] for r in chosen["chosen"]] == ["ddtree-" + version]
    plan = {"target_checks": deploy_plan.target_checks(chosen["chosen"]), "patch_sets": chosen["chosen"]}
    config = json.loads((REPO / "tests" / "unit" / "fixtures" / "models" / model / "config.json").read_text())
    checked = deploy_plan.check_target(plan, config)
    assert checked["architecture"] == ("hybrid_gdn" if model == "qwen3.6-27b" else "dense")
    assert checked["error"] == ""


@VERSIONS
@pytest.mark.parametrize("backend", ["fa3", "fa4", "trtllm_mha", ""])
def test_a_ddtree_deploy_with_a_backend_that_ignores_tree_masks_is_refused_by_the_plan(backend, version):
    deploy_plan, records = _records()
    chosen = deploy_plan.choose_patch_sets("DDTREE", version, backend, records)
    assert chosen["chosen"] == []
    assert (
        "ddtree-%s does not serve sglang_service_attention_backend=%s (it serves triton, flashinfer)"
        % (version, backend or "(unset)")
        in chosen["errors"][0]
    )
