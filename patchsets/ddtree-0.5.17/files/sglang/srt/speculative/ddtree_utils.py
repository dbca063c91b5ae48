"""DDTree (draft tree over a DFlash block): tree construction and reference verification.

Added by the specdec.sglang ``ddtree`` patch set. Pure Python on purpose: no torch, no numpy, so the
collection's CI can test exactly this file on a CPU. The GPU side (ddtree_worker.py) turns the lists
built here into tensors and verifies them with sglang's tree kernels.

The DFlash draft predicts a block of B tokens in one pass: position 0 is the bonus token the target
already chose, positions 1..B-1 each carry a distribution over the vocabulary that does not depend on
the tokens chosen at the other positions. The draft tree keeps, per depth d (1..B-1), the draft's
top-k tokens at block position d, and grows best-first by the path score (sum of the per-depth
log-probabilities) until it holds N nodes (the budget, root included). The top-1 chain (the token
DFLASH would verify at each depth) is seeded first, so the tree always contains the linear chain and
the accepted length can never fall below DFLASH's on the same draft.

Node order is topological (every parent precedes its children): node 0 is the root, nodes 1..B-1 are
the top-1 chain in depth order, then the best-first nodes in the order they were taken.
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

ENV_BUDGET = "SGLANG_DDTREE_BUDGET"
ENV_TOPK = "SGLANG_DDTREE_TOPK"
# Default budget: this many nodes per block position (N = 2 * B, e.g. 32 for the usual B = 16): the budget that
# paid end to end on a lent H100 (tests/device/records/2026-12-06-h100-ddtree-block16-level2); 4 * B verified a
# wider tree than it gained there, and the 27B geometry's N = 64 found no memory on the H200 at 8 requests.
DEFAULT_BUDGET_PER_BLOCK_TOKEN = 2
DEFAULT_TOPK = 8
# sglang's tree kernels run one thread per tree node.
MAX_BUDGET = 1024
# Full-attention backends (--attention-backend spelling) whose TARGET_VERIFY reads an arbitrary tree
# mask given with the verify input (FULL layout: per request N rows x (prefix + N) columns): triton
# (extend_attention_fwd's custom mask; checked on the H200) and flashinfer (DFlashVerifyInput's
# generate_attn_arg_prefill hands the mask to the prefill wrapper, EAGLE's tree path). FA3 / FA4 build
# their own EAGLE mask only for topk > 1 and attend causally over the flattened tree under DDTREE's
# topk 1; the other backends are unchecked with trees.
TREE_MASK_ATTENTION_BACKENDS = ("triton", "flashinfer")


@dataclass(frozen=True)
class DDTreeConfig:
    block_size: int  # B: the DFlash block (root + B-1 drafted positions); tree depth <= B-1
    requested_budget: int  # N as asked (SGLANG_DDTREE_BUDGET, or the default)
    budget: int  # N actually used: requested_budget capped at what top-k can fill
    topk: int  # children per node (per-depth top-k of the draft)


@dataclass
class DDTree:
    tokens: List[int]  # token of each node; tokens[0] is the root (bonus token)
    parents: List[int]  # parent node index; -1 for the root
    depths: List[int]  # 0 for the root
    ranks: List[int]  # rank of the node's token in its depth's top-k list (0 for the root)

    def __len__(self) -> int:
        return len(self.tokens)


def tree_capacity(block_size: int, topk: int) -> int:
    """Most nodes a tree of depth block_size-1 with topk children per node can hold (capped)."""
    total, level = 1, 1
    for _depth in range(max(block_size - 1, 0)):
        level *= topk
        total += level
        if total >= MAX_BUDGET:
            return MAX_BUDGET
    return total


def _env_int(environ: Mapping[str, str], name: str) -> int:
    raw = (environ.get(name) or "").strip()
    if raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def resolve_ddtree_config(block_size: int, environ: Optional[Mapping[str, str]] = None) -> DDTreeConfig:
    """Budget N and per-depth top-k from the environment.

    SGLANG_DDTREE_BUDGET: tree nodes verified per request per step, root included; unset or 0 means
    the default 2 * B. It must be at least B (the tree holds the whole top-1 chain) and at most 1024.
    SGLANG_DDTREE_TOPK: children per node, default 8. The budget is capped at the number of nodes such
    a tree can hold (e.g. B = 2, top-k 8: 9 nodes).
    """
    if environ is None:
        environ = os.environ
    block_size = int(block_size)
    if block_size < 2:
        raise ValueError(f"DDTREE needs a DFlash block size of at least 2, got {block_size}")
    budget = _env_int(environ, ENV_BUDGET) or DEFAULT_BUDGET_PER_BLOCK_TOKEN * block_size
    topk = _env_int(environ, ENV_TOPK) or DEFAULT_TOPK
    if budget < block_size:
        raise ValueError(
            f"{ENV_BUDGET}={budget} is below the block size {block_size}: the tree must hold the "
            f"top-1 chain, so the budget N must be >= B"
        )
    if budget > MAX_BUDGET:
        raise ValueError(f"{ENV_BUDGET}={budget} exceeds {MAX_BUDGET} tree nodes")
    if topk < 1:
        raise ValueError(f"{ENV_TOPK}={topk} must be >= 1")
    effective = min(budget, tree_capacity(block_size, topk))
    return DDTreeConfig(block_size=block_size, requested_budget=budget, budget=effective, topk=topk)


def build_tree(
    root_token: int,
    depth_logprobs: Sequence[Sequence[float]],
    depth_tokens: Sequence[Sequence[int]],
    budget: int,
) -> DDTree:
    """Build one request's draft tree.

    depth_logprobs[d-1] / depth_tokens[d-1]: the draft's top-k log-probabilities and tokens at block
    position d (d = 1..B-1), best first. Returns min(budget, capacity) nodes, root included.
    """
    depth = len(depth_tokens)
    if len(depth_logprobs) != depth:
        raise ValueError("depth_logprobs and depth_tokens differ in length")
    if budget < 1:
        raise ValueError("budget must be >= 1")
    # Per depth, candidates best first (stable on ties: lower top-k rank first).
    cands: List[List[Tuple[float, int, int]]] = []
    for d in range(depth):
        lps, toks = depth_logprobs[d], depth_tokens[d]
        if len(lps) != len(toks) or not toks:
            raise ValueError(f"depth {d + 1}: logprobs and tokens must be non-empty and equal in length")
        order = sorted(range(len(toks)), key=lambda r: (-float(lps[r]), r))
        cands.append([(float(lps[r]), int(toks[r]), r) for r in order])

    tokens, parents, depths, ranks = [int(root_token)], [-1], [0], [0]
    scores = [0.0]
    # (parent node, index into cands[depth of child - 1]) -> node index, for the seeded chain.
    seeded: Dict[Tuple[int, int], int] = {}

    # 1) Seed the top-1 chain: at each depth the draft's best token, as DFLASH would verify it.
    parent = 0
    for d in range(min(depth, budget - 1)):
        lp, tok, rank = cands[d][0]
        tokens.append(tok)
        parents.append(parent)
        depths.append(d + 1)
        ranks.append(rank)
        scores.append(scores[parent] + lp)
        seeded[(parent, 0)] = len(tokens) - 1
        parent = len(tokens) - 1

    # 2) Best-first: a heap of frontier candidates (parent node, i-th best token at the next depth).
    # Children of a node are generated lazily: taking candidate (p, i) offers (p, i+1), its next
    # sibling, and (node, 0), its best child. Scores never increase along a path or across siblings,
    # so the nodes come out in non-increasing score order and the set stays ancestor-closed.
    heap: List[Tuple[float, int, int, int]] = []
    counter = 0
    if depth > 0:
        heapq.heappush(heap, (-(scores[0] + cands[0][0][0]), counter, 0, 0))
    while heap and len(tokens) < budget:
        neg, _order, p, i = heapq.heappop(heap)
        d = depths[p]  # the candidate sits at depth d + 1
        node = seeded.get((p, i))
        if node is None:
            lp, tok, rank = cands[d][i]
            tokens.append(tok)
            parents.append(p)
            depths.append(d + 1)
            ranks.append(rank)
            scores.append(-neg)
            node = len(tokens) - 1
        if i + 1 < len(cands[d]):
            counter += 1
            heapq.heappush(heap, (-(scores[p] + cands[d][i + 1][0]), counter, p, i + 1))
        if d + 1 < depth:
            counter += 1
            heapq.heappush(heap, (-(scores[node] + cands[d + 1][0][0]), counter, node, 0))
    return DDTree(tokens=tokens, parents=parents, depths=depths, ranks=ranks)


def ancestor_mask(parents: Sequence[int]) -> List[List[bool]]:
    """n x n: mask[i][j] is True when node j is node i or one of its ancestors (i attends to j)."""
    n = len(parents)
    mask = [[False] * n for _row in range(n)]
    for i in range(n):
        j = i
        while j >= 0:
            if j > i:
                raise ValueError(f"node {i} has parent {j} after it: not in topological order")
            mask[i][j] = True
            j = parents[j]
    return mask


def retrieve_links(parents: Sequence[int]) -> Tuple[List[int], List[int]]:
    """First child and next sibling of each node (-1: none), children in node order.

    The layout of sglang's retrieve_next_token / retrieve_next_sibling (local indices).
    """
    n = len(parents)
    first_child, next_sibling, last_child = [-1] * n, [-1] * n, [-1] * n
    for i in range(1, n):
        p = parents[i]
        if last_child[p] < 0:
            first_child[p] = i
        else:
            next_sibling[last_child[p]] = i
        last_child[p] = i
    return first_child, next_sibling


def positions(depths: Sequence[int], prefix_len: int) -> List[int]:
    """Position of each node: the committed prefix length plus its depth."""
    return [int(prefix_len) + int(d) for d in depths]


def verify_greedy(tokens: Sequence[int], parents: Sequence[int], target_predict: Sequence[int]) -> Tuple[List[int], int]:
    """Reference greedy tree verification (what sgl_kernel.verify_tree_greedy computes per request).

    target_predict[i]: the target's argmax token after node i (given node i and its ancestors).
    From the root, repeatedly move to the child whose token equals the target's prediction.
    Returns (accepted node indices, root first; the bonus token = target_predict[last accepted]).
    """
    first_child, next_sibling = retrieve_links(parents)
    path = [0]
    cur = 0
    while True:
        want = int(target_predict[cur])
        child = first_child[cur]
        while child >= 0 and int(tokens[child]) != want:
            child = next_sibling[child]
        if child < 0:
            break
        path.append(child)
        cur = child
    return path, int(target_predict[cur])


def chain_accept_length(chain_tokens: Sequence[int], target_predict_chain: Sequence[int]) -> int:
    """DFLASH's rule on a linear block: drafts accepted while chain[t+1] == target_predict[t]."""
    n = 0
    while n + 1 < len(chain_tokens) and int(chain_tokens[n + 1]) == int(target_predict_chain[n]):
        n += 1
    return n


def format_budget_log(config: DDTreeConfig) -> str:
    """The start-up line that tells the operator (and the device check) which tree is verified."""
    return (
        f"DDTREE draft tree: block_size={config.block_size} budget={config.budget} "
        f"(requested {config.requested_budget}, {ENV_BUDGET}) topk={config.topk} "
        f"verify_tokens_per_request={config.budget}"
    )


# --- Hybrid (Gated DeltaNet) targets: recurrent state over the tree ---------------------------------
#
# A hybrid target's linear-attention layers keep a recurrent state (the GDN ssm state and the causal
# conv window) per request. Verifying a tree, node i must continue from its parent's state, not from
# node i-1's (the flattened order a chain verify uses). sglang's own EAGLE tree verify does that when
# the verify input carries retrieve_next_token / retrieve_next_sibling: the triton conv kernel
# (causal_conv1d_update) derives each node's parent from those links and writes retrieve_parent_token,
# the triton GDN kernel (fused_sigmoid_gating_delta_rule_update) then starts node i from the snapshot of
# its parent, and both keep one snapshot per node (intermediate_ssm / intermediate_conv_window, N steps
# per request slot). After verification, the state of the last *accepted node* is committed.


def kernel_parents(first_child: Sequence[int], next_sibling: Sequence[int]) -> List[int]:
    """The parent each node is given by sglang's tree conv kernel (root: 0).

    The kernel (causal_conv1d_update with retrieve_next_token / retrieve_next_sibling) walks the
    nodes once in index order: at node i it sets the parent of i's first child to i and the parent
    of i's next sibling to i's parent, then convolves node i along the parents known at that moment;
    the GDN kernel reads the parents it stored. Returns, per node, the parent in use when the walk
    reached it: right only where a first child and every next sibling have a higher index
    (retrieve_links' layout on a topologically ordered tree).
    """
    n = len(first_child)
    parent = [0] * n
    used = [0] * n
    for i in range(n):
        used[i] = parent[i]
        child = int(first_child[i])
        if child != -1:
            parent[child] = i
        sibling = int(next_sibling[i])
        if sibling != -1:
            parent[sibling] = parent[i]
    if used != parent:
        # A link pointed backwards: a node's parent changed after the walk passed it.
        return [-2 if u != p else u for u, p in zip(used, parent)]
    return used


def check_kernel_parents(parents: Sequence[int]) -> List[int]:
    """retrieve_links of a tree, refused unless the kernels' walk gives every node its parent."""
    first_child, next_sibling = retrieve_links(parents)
    derived = kernel_parents(first_child, next_sibling)
    want = [0] + [int(p) for p in parents[1:]]
    if derived != want:
        raise ValueError(
            f"tree links give the recurrent kernels parents {derived} (-2: changed after use), not {want}"
        )
    return derived


def tree_recurrent_scan(parents: Sequence[int], inputs: Sequence, initial, step) -> List:
    """Reference: the state after each node, each node continuing from its parent (root: initial)."""
    states: List = []
    for i, x in enumerate(inputs):
        p = int(parents[i])
        if p >= i:
            raise ValueError(f"node {i} has parent {p}: not in topological order")
        states.append(step(initial if p < 0 else states[p], x))
    return states


def chain_recurrent_scan(inputs: Sequence, initial, step) -> List:
    """The flattened-order scan a chain verify does: node i continues from node i-1."""
    states: List = []
    for x in inputs:
        states.append(step(states[-1] if states else initial, x))
    return states


def commit_nodes(accept_index: Sequence[Sequence[int]], accept_drafts: Sequence[int], budget: int) -> List[int]:
    """Per request, the tree node whose recurrent state is committed: the last accepted node.

    accept_index[b]: verify_tree_greedy's accepted nodes (global ids b * budget + i, root first);
    accept_drafts[b]: the number of accepted drafts. Returns local node indices (0..budget-1), the
    intermediate-state step the commit copies (not accept_drafts[b], the chain's step).
    """
    nodes = []
    for b, row in enumerate(accept_index):
        a = int(accept_drafts[b])
        node = int(row[a]) - b * int(budget)
        if a < 0 or not 0 <= node < int(budget):
            raise ValueError(f"request {b}: accepted node {row[a]} with {a} drafts is outside its tree")
        nodes.append(node)
    return nodes


def track_nodes(
    accept_index: Sequence[Sequence[int]],
    accept_drafts: Sequence[int],
    budget: int,
    prefix_lens: Sequence[int],
    interval: int,
) -> List[int]:
    """Per request, the accepted node whose state the mamba prefix cache tracks (-1: none).

    When the committed length crosses a multiple of ``interval`` (--mamba-track-interval), the state
    at that multiple is kept: the accepted node at path position (multiple - prefix - 1).
    """
    out = []
    for b, row in enumerate(accept_index):
        commit = int(accept_drafts[b]) + 1
        pre, post = int(prefix_lens[b]), int(prefix_lens[b]) + commit
        ith = max(post // interval * interval - pre - 1, 0)
        if pre // interval != post // interval and ith < commit:
            out.append(int(row[ith]) - b * int(budget))
        else:
            out.append(-1)
    return out


def verify_state_steps(block_size: int, environ: Optional[Mapping[str, str]] = None) -> int:
    """Verify tokens per request for DDTREE, which sizes every per-token verify buffer.

    max(B, N): the tree's N nodes (>= B); sglang's max_speculative_num_draft_tokens, and so the
    hybrid snapshot pool (intermediate ssm / conv windows: one per node) and its memory budget.
    """
    return max(int(block_size), resolve_ddtree_config(block_size, environ).budget)


# --- Sampling (temperature > 0) on the tree ---------------------------------------------------------
#
# The rule of sgl_kernel's tree_speculative_sampling_target_only (EAGLE's non-greedy tree verify), in
# plain Python, as the reference the device path is held to. The draft's tree tokens are proposals
# taken deterministically (top-k), so the proposal distribution of the child being tried is one-hot:
# min(1, p / q) becomes p(token) under the current residual, and a rejection removes that token's mass
# (the residual max(p - q, 0), renormalised). Walking the siblings this way and sampling the bonus
# token from the final residual emits each token with exactly the target's probability.


def _draw(probs: Sequence[float], u: float) -> int:
    """Inverse-CDF draw from unnormalised probabilities with a uniform u in [0, 1)."""
    total = float(sum(probs))
    if total <= 0.0:
        raise ValueError("the residual distribution is empty")
    acc, target = 0.0, u * total
    last = 0
    for token, p in enumerate(probs):
        if p > 0.0:
            last = token
            acc += p
            if target < acc:
                return token
    return last


def verify_sampling(
    tokens: Sequence[int],
    parents: Sequence[int],
    target_probs: Sequence[Sequence[float]],
    uniform,
) -> Tuple[List[int], int]:
    """Reference tree speculative sampling for one request.

    target_probs[i]: the target's distribution (after temperature / top-p, as the verify computes it)
    of the token after node i; uniform(): a fresh uniform number in [0, 1). From the root, try the
    children in node order: accept child c with probability residual(c's token) / residual mass; on
    rejection zero that token in the residual and try the next sibling. When a child is accepted, move
    to it with the child's own target distribution; when none is, draw the bonus token from the
    residual. Returns (accepted node indices, root first; the bonus token).
    """
    first_child, next_sibling = retrieve_links(parents)
    path, cur = [0], 0
    while True:
        residual = [float(p) for p in target_probs[cur]]
        child = first_child[cur]
        moved = False
        while child >= 0:
            token = int(tokens[child])
            mass = sum(residual)
            if mass > 0.0 and uniform() * mass < residual[token]:
                path.append(child)
                cur = child
                moved = True
                break
            residual[token] = 0.0
            child = next_sibling[child]
        if not moved:
            return path, _draw(residual, uniform())
