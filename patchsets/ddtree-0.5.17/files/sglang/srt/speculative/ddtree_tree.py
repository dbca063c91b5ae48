"""DDTree: the draft tree built on the device, as array operations (added by the specdec.sglang patch set).

``build_tree_arrays`` returns, for a whole batch at once, the same trees as the reference builder
``ddtree_utils.build_tree`` (same nodes, same node order, ties included) with static shapes for a
given (batch, budget N), and no data-dependent host synchronisation: no ``.item()``, ``.tolist()``,
``.cpu()``, ``nonzero`` or boolean-mask indexing. The same code runs on torch tensors (the GPU, in
ddtree_worker.py) and on numpy arrays (the collection's CI, which has no torch): every operation goes
through a small array namespace (``_TorchOps`` / ``_NumpyOps``) chosen from the input's type.

How it matches the reference exactly: the reference seeds the top-1 chain, then pops a heap of
frontier candidates ordered by (path score, push counter); taking a candidate offers its next sibling
and its best child. Here the heap is a fixed frontier of N + 1 slots per request and each of the N - 1
(static) rounds pops the candidate with the highest score and, among equal scores, the lowest push
counter, exactly as ``heapq`` orders the reference's entries. Scores are float64 sums in the same
order as the reference (parent score + the depth's log-probability), so equal scores are equal here
too. Each round is a handful of element-wise operations, gathers and scatters over [bs, N + 1].

Outputs (a dict of arrays; padding past ``num_nodes`` only when the budget exceeds what top-k can fill):

- ``tokens`` / ``parents`` / ``depths`` / ``ranks`` / ``scores``: [bs, N] per node, node 0 the root;
- ``num_nodes``: [bs];
- ``first_child`` / ``next_sibling``: [bs, N] local links (-1: none), children in node order
  (sglang's retrieve_next_token / retrieve_next_sibling);
- ``ancestor_mask``: [bs, N, N] bool, [b, i, j] True when node j is node i or one of its ancestors;
- ``positions``: [bs, N] prefix length + depth (when ``prefix_lens`` is given);
- ``chain``: [bs, B] the tree index of the top-1 chain's node at each depth (root first; the chain is
  seeded at indices 0..B-1), the layout DFLASH's chain verify reads.

``full_mask`` lays the ancestor mask out as sglang's FULL custom mask (per request N rows x
(prefix + N) columns, row-major, requests concatenated at mask_indptr) into a buffer whose size comes
from a host-side upper bound, so the layout needs no host read of the prefix lengths either.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

_NEG_INF = float("-inf")


class _NumpyOps:
    """The array namespace on numpy (CI)."""

    def __init__(self, np):
        self.np = np
        self.f64, self.i64, self.bool = np.float64, np.int64, np.bool_

    def full(self, shape, value, dtype, like):
        return self.np.full(shape, value, dtype=dtype)

    def arange(self, n, like):
        return self.np.arange(n, dtype=self.np.int64)

    def cast(self, a, dtype):
        return self.np.asarray(a).astype(dtype)

    def where(self, cond, a, b):
        return self.np.where(cond, a, b)

    def take(self, a, idx):
        return self.np.take_along_axis(a, idx, axis=-1)

    def put(self, a, idx, vals):
        self.np.put_along_axis(a, idx, vals, axis=-1)

    def put_flat(self, a, idx, vals):
        a[idx.reshape(-1)] = vals.reshape(-1)

    def max_last(self, a):
        return a.max(axis=-1, keepdims=True)

    def argmin_last(self, a):
        return a.argmin(axis=-1, keepdims=True)

    def min_last(self, a):
        return a.min(axis=-1)

    def any_last(self, a):
        return a.any(axis=-1)

    def argsort_desc_stable(self, a):
        return self.np.argsort(-a, axis=-1, kind="stable")

    def clamp_max(self, a, top: int):
        return self.np.minimum(a, top)

    def cumsum(self, a):
        return self.np.cumsum(a, axis=-1)

    def contiguous(self, a):
        return self.np.ascontiguousarray(a)


class _TorchOps:
    """The array namespace on torch (the GPU)."""

    def __init__(self, torch):
        self.torch = torch
        self.f64, self.i64, self.bool = torch.float64, torch.int64, torch.bool

    def full(self, shape, value, dtype, like):
        return self.torch.full(shape, value, dtype=dtype, device=like.device)

    def arange(self, n, like):
        return self.torch.arange(n, dtype=self.torch.int64, device=like.device)

    def cast(self, a, dtype):
        return a.to(dtype)

    def where(self, cond, a, b):
        return self.torch.where(cond, a, b)

    def take(self, a, idx):
        return self.torch.gather(a, -1, idx)

    def put(self, a, idx, vals):
        a.scatter_(-1, idx, vals)

    def put_flat(self, a, idx, vals):
        a[idx.reshape(-1)] = vals.reshape(-1)

    def max_last(self, a):
        return a.amax(dim=-1, keepdim=True)

    def argmin_last(self, a):
        return a.argmin(dim=-1, keepdim=True)

    def min_last(self, a):
        return a.amin(dim=-1)

    def any_last(self, a):
        return a.any(dim=-1)

    def argsort_desc_stable(self, a):
        return self.torch.sort(a, dim=-1, descending=True, stable=True).indices

    def clamp_max(self, a, top: int):
        return a.clamp(max=top)

    def cumsum(self, a):
        return self.torch.cumsum(a, dim=-1)

    def contiguous(self, a):
        return a.contiguous()


def array_ops(array) -> Any:
    """The namespace for ``array``'s library: torch tensors or numpy arrays."""
    module = type(array).__module__.split(".")[0]
    if module == "torch":
        import torch

        return _TorchOps(torch)
    if module == "numpy":
        import numpy

        return _NumpyOps(numpy)
    raise TypeError(f"DDTREE tree arrays must be torch tensors or numpy arrays, got {type(array).__name__}")


def _pop_index(ops, valid, score, counter, big):
    """Per request, the frontier slot the reference's heap pops: highest score, then lowest counter."""
    best = ops.max_last(ops.where(valid, score, _NEG_INF))
    tied = valid & (score == best)
    return ops.argmin_last(ops.where(tied, counter, big))


def build_tree_arrays(root_tokens, logprobs, tokens, budget: int, prefix_lens=None) -> Dict[str, Any]:
    """Best-first draft trees for a batch: ``ddtree_utils.build_tree`` per request, as array ops.

    root_tokens: [bs] ints (the bonus token); logprobs / tokens: [bs, D, k], the draft's top-k per
    block position 1..D (any order: sorted here, best first, ties by top-k rank as the reference);
    budget: N, nodes per request, root included; prefix_lens: [bs] committed lengths (positions).
    """
    ops = array_ops(logprobs)
    bs, depth, k = (int(x) for x in logprobs.shape)
    n = int(budget)
    if n < 1:
        raise ValueError("budget must be >= 1")
    if k < 1 and depth > 0:
        raise ValueError("the draft top-k must hold at least one token per position")
    lp = ops.cast(logprobs, ops.f64)
    order = ops.argsort_desc_stable(lp)  # [bs, D, k] top-k rank of each sorted slot
    s_lp = ops.take(lp, order).reshape(bs, depth * k)
    s_tok = ops.take(ops.cast(tokens, ops.i64), order).reshape(bs, depth * k)
    s_rank = ops.cast(order, ops.i64).reshape(bs, depth * k)

    width = n + 1  # node arrays: N nodes and one scratch column for writes that do not happen
    node_tok = ops.full((bs, width), 0, ops.i64, lp)
    node_par = ops.full((bs, width), -1, ops.i64, lp)
    node_dep = ops.full((bs, width), 0, ops.i64, lp)
    node_rank = ops.full((bs, width), 0, ops.i64, lp)
    node_score = ops.full((bs, width), _NEG_INF, ops.f64, lp)
    node_tok[:, 0] = ops.cast(root_tokens, ops.i64).reshape(bs)
    node_score[:, 0] = 0.0

    # 1) The top-1 chain, seeded at nodes 1..C (node d is the chain's node at depth d).
    chain_len = min(depth, n - 1)
    running = node_score[:, 0]
    for d in range(chain_len):
        running = running + s_lp[:, d * k]
        node_tok[:, d + 1] = s_tok[:, d * k]
        node_par[:, d + 1] = d
        node_dep[:, d + 1] = d + 1
        node_rank[:, d + 1] = s_rank[:, d * k]
        node_score[:, d + 1] = running

    # 2) Best-first rounds over a frontier of N + 1 slots (slot N: scratch, never valid).
    slots = n + 1
    f_score = ops.full((bs, slots), _NEG_INF, ops.f64, lp)
    f_ctr = ops.full((bs, slots), 0, ops.i64, lp)
    f_par = ops.full((bs, slots), 0, ops.i64, lp)
    f_idx = ops.full((bs, slots), 0, ops.i64, lp)
    f_valid = ops.full((bs, slots), False, ops.bool, lp)
    if depth > 0:
        f_score[:, 0] = node_score[:, 0] + s_lp[:, 0]
        f_valid[:, 0] = True
    count = ops.full((bs,), chain_len + 1, ops.i64, lp)
    f_len = ops.full((bs,), 1 if depth > 0 else 0, ops.i64, lp)
    pushed = ops.full((bs,), 0, ops.i64, lp)  # the reference's heap counter
    big = ops.full((bs, slots), 1 << 62, ops.i64, lp)

    def col(a, idx):
        return ops.take(a, idx.reshape(bs, 1)).reshape(bs)

    def put_col(a, idx, vals):
        ops.put(a, idx.reshape(bs, 1), vals.reshape(bs, 1))

    for _round in range(n - 1 if depth > 0 else 0):
        active = ops.any_last(f_valid) & (count < n)
        j = _pop_index(ops, f_valid, f_score, f_ctr, big).reshape(bs)
        p, i, sc = col(f_par, j), col(f_idx, j), col(f_score, j)
        d = col(node_dep, p)  # the candidate sits at depth d + 1 (block position d + 1)
        seeded = (i == 0) & (p < chain_len)
        new = active & ~seeded
        node = ops.where(seeded, p + 1, count)
        # Clamped: an empty slot's stale entry may point one past the top-k; it is never written.
        q = ops.clamp_max(d, depth - 1) * k + ops.clamp_max(i, k - 1)
        dest = ops.where(new, count, n)
        put_col(node_tok, dest, col(s_tok, q))
        put_col(node_par, dest, p)
        put_col(node_dep, dest, d + 1)
        put_col(node_rank, dest, col(s_rank, q))
        put_col(node_score, dest, sc)
        count = count + ops.cast(new, ops.i64)

        # The next sibling replaces the popped entry (or the slot empties).
        sib = active & (i + 1 < k)
        q_sib = ops.clamp_max(d, depth - 1) * k + ops.clamp_max(i + 1, k - 1)
        keep = ~active
        put_col(f_score, j, ops.where(keep, sc, col(node_score, p) + col(s_lp, q_sib)))
        put_col(f_idx, j, ops.where(keep, i, i + 1))
        put_col(f_ctr, j, ops.where(keep, col(f_ctr, j), pushed + 1))
        put_col(f_valid, j, ops.where(keep, col(f_valid, j), sib))
        pushed = pushed + ops.cast(sib, ops.i64)

        # The node's best child goes to a fresh slot.
        child = active & (d + 1 < depth)
        q_child = ops.clamp_max(d + 1, depth - 1) * k
        c_dest = ops.where(child, f_len, n)
        put_col(f_score, c_dest, col(node_score, node) + col(s_lp, q_child))
        put_col(f_par, c_dest, node)
        put_col(f_idx, c_dest, ops.full((bs,), 0, ops.i64, lp))
        put_col(f_ctr, c_dest, pushed + 1)
        put_col(f_valid, c_dest, child)
        pushed = pushed + ops.cast(child, ops.i64)
        f_len = f_len + ops.cast(child, ops.i64)

    # Contiguous copies: sglang's kernels read these as raw row-major memory (a [:, :N] view of the
    # N + 1 wide work arrays is not).
    out = {
        "tokens": ops.contiguous(node_tok[:, :n]),
        "parents": ops.contiguous(node_par[:, :n]),
        "depths": ops.contiguous(node_dep[:, :n]),
        "ranks": ops.contiguous(node_rank[:, :n]),
        "scores": ops.contiguous(node_score[:, :n]),
        "num_nodes": count,
    }
    out.update(tree_links(ops, out["parents"], depth))
    out["chain"] = ops.full((bs, 1), 0, ops.i64, lp) + ops.arange(chain_len + 1, lp).reshape(1, chain_len + 1)
    if prefix_lens is not None:
        out["positions"] = ops.cast(prefix_lens, ops.i64).reshape(bs, 1) + out["depths"]
    return out


def tree_links(ops, parents, max_depth: int) -> Dict[str, Any]:
    """First child, next sibling ([bs, N], -1: none) and the ancestor-or-self mask ([bs, N, N])."""
    bs, n = (int(x) for x in parents.shape)
    ids = ops.arange(n, parents)
    none = ops.full((bs, n, n), n, ops.i64, parents)
    # first_child[b, p] = lowest i whose parent is p.
    is_child = parents.reshape(bs, 1, n) == ids.reshape(1, n, 1)
    first = ops.min_last(ops.where(is_child, ids.reshape(1, 1, n), none))
    # next_sibling[b, i] = lowest j > i with the same parent (roots / padding have none).
    has_parent = parents >= 0
    same = (
        (parents.reshape(bs, 1, n) == parents.reshape(bs, n, 1))
        & (ids.reshape(1, 1, n) > ids.reshape(1, n, 1))
        & has_parent.reshape(bs, 1, n)
        & has_parent.reshape(bs, n, 1)
    )
    sib = ops.min_last(ops.where(same, ids.reshape(1, 1, n), none))
    # Ancestor-or-self: walk up max_depth times (root and padding point at themselves).
    up = ops.where(has_parent, parents, ids.reshape(1, n) + parents * 0)
    cur = ids.reshape(1, n) + parents * 0
    mask = ops.full((bs, n, n), False, ops.bool, parents)
    for _step in range(max_depth + 1):
        mask = mask | (ids.reshape(1, 1, n) == cur.reshape(bs, n, 1))
        cur = ops.take(up, cur)
    return {
        "first_child": ops.where(first < n, first, -1),
        "next_sibling": ops.where(sib < n, sib, -1),
        "ancestor_mask": mask,
    }


def full_mask(ancestor_mask, prefix_lens, size: int, out: Optional[Any] = None):
    """sglang's FULL tree mask: per request N rows x (prefix + N) columns, concatenated.

    ``size`` (a host int) must be at least sum(N * (prefix + N)); it comes from a host-side upper
    bound of the prefix lengths (the scheduler's seq_lens_cpu), so no device value is read. Prefix
    columns are True (every node sees the committed context), tree columns are the ancestor mask.
    Elements past the last request stay True and are never read (mask_indptr bounds each request).
    """
    ops = array_ops(ancestor_mask)
    bs, n, _n = (int(x) for x in ancestor_mask.shape)
    prefix = ops.cast(prefix_lens, ops.i64).reshape(bs)
    row_len = prefix + n
    lens = row_len * n
    start = ops.cumsum(lens) - lens  # mask_indptr[b]
    ids = ops.arange(n, prefix)
    index = (
        start.reshape(bs, 1, 1)
        + ids.reshape(1, n, 1) * row_len.reshape(bs, 1, 1)
        + prefix.reshape(bs, 1, 1)
        + ids.reshape(1, 1, n)
    )
    mask = out if out is not None else ops.full((int(size),), True, ops.bool, ancestor_mask)
    ops.put_flat(mask, index, ancestor_mask)
    return mask


def commit_arrays(accept_index, accept_drafts, budget: int, prefix_lens=None, interval: int = 0) -> Dict[str, Any]:
    """The hybrid commit's node choices for a batch, as array ops (no host read).

    ``ddtree_utils.commit_nodes`` and ``ddtree_utils.track_nodes`` per request, on the device:
    ``accept_index`` [bs, B] (global node ids b * budget + i, root first, -1 past the accepted),
    ``accept_drafts`` [bs]. Returns ``nodes`` [bs]: the local index of each request's last accepted
    node (the snapshot its recurrent state is committed from) and, with ``prefix_lens`` [bs] and
    ``interval`` > 0 (--mamba-track-interval), ``track`` [bs]: the accepted node whose state the
    mamba prefix cache keeps when the committed length crosses a multiple of ``interval`` (-1: none).
    """
    ops = array_ops(accept_index)
    index = ops.cast(accept_index, ops.i64)
    drafts = ops.cast(accept_drafts, ops.i64).reshape(-1, 1)
    offset = ops.arange(index.shape[0], index).reshape(-1, 1) * int(budget)
    out = {"nodes": (ops.take(index, drafts) - offset).reshape(-1)}
    if prefix_lens is not None and interval > 0:
        commit = drafts + 1
        pre = ops.cast(prefix_lens, ops.i64).reshape(-1, 1)
        post = pre + commit
        ith = post // interval * interval - pre - 1
        ith = ops.where(ith > 0, ith, ith * 0)
        crossed = ((pre // interval) != (post // interval)) & (ith < commit)
        node = ops.take(index, ops.clamp_max(ith, index.shape[1] - 1)) - offset
        out["track"] = ops.where(crossed, node, node * 0 - 1).reshape(-1)
    return out
