"""DDTree: each request's best-first tree built by one Triton program (added by the specdec.sglang patch set).

``ddtree_tree.build_tree_arrays`` runs the reference's N - 1 heap rounds as array operations over the
whole batch: about 35 small kernels a round, so ~500 launches for N = 16 (1.7 ms on the H200 even
replayed from a CUDA graph: tests/device/records/2026-12-05-h200-ddtree-cost-graphs). That builder was
the step's largest cost after the verify itself. ``build_tree_triton`` runs the same rounds, on the same
operands in the same order (float64 path scores, the heap's (score, push counter) order, the same
clamped indices and scratch slot), inside one program per request, with the frontier and node arrays
held in registers; then the links, the ancestor-or-self mask and the positions in the same program.
Three torch operations before it sort each position's top-k as the reference does (best first, ties by
top-k rank). No host synchronisation; the output dict is build_tree_arrays' (same keys, dtypes and
shapes), and the device check (tests/device/ddtree_tree_check.py) holds both to ddtree_utils.build_tree.

Shapes are runtime arguments (the depth D, top-k k, budget N); only the register width (the next power
of two above N) is compiled in, so a server compiles one or two variants.
"""

from __future__ import annotations

from typing import Any, Dict

import torch
import triton
import triton.language as tl

_BIG = tl.constexpr(1 << 62)  # above any push counter: an invalid frontier slot never wins a tie
# The widest tree one program holds in registers (its [P, P] link and mask tiles, P = 128); a larger
# budget is refused here and built by the array builder.
MAX_TRITON_BUDGET = 127


@triton.jit
def _tree_kernel(
    s_lp_ptr,  # [bs, D * k] float64, each position's top-k sorted best first
    s_tok_ptr,  # [bs, D * k] int64
    s_rank_ptr,  # [bs, D * k] int64, top-k rank of the sorted slot
    root_ptr,  # [bs] int64
    prefix_ptr,  # [bs] int64 (read when HAS_PREFIX)
    tok_out,
    par_out,
    dep_out,
    rank_out,
    score_out,
    pos_out,  # [bs, N]
    count_out,  # [bs]
    first_out,
    sib_out,  # [bs, N]
    mask_out,  # [bs, N, N] uint8 (a bool tensor's bytes)
    full_out,  # sglang's FULL custom mask, uint8, pre-filled True (read when HAS_FULL)
    N,
    D,
    K,
    CHAIN,
    ROUNDS,
    HAS_PREFIX: tl.constexpr,
    HAS_FULL: tl.constexpr,
    P: tl.constexpr,  # a power of two > N: N nodes and the scratch slot N
):
    b = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, P)
    ids = offs.to(tl.int64)
    zero_i = tl.zeros([P], dtype=tl.int64)
    zero_s = tl.sum(zero_i, axis=0)  # a 0-d int64 for the loop-carried counters
    neg_inf = tl.full([P], float("-inf"), dtype=tl.float64)
    base = b * D * K

    root = tl.load(root_ptr + b).to(tl.int64)
    node_tok = tl.where(offs == 0, root, zero_i)
    node_par = zero_i - 1
    node_dep = zero_i
    node_rank = zero_i
    node_score = tl.where(offs == 0, tl.zeros([P], dtype=tl.float64), neg_inf)

    # 1) The top-1 chain at nodes 1..CHAIN, scores summed in the reference's order (0.0 + lp_1 + ...).
    running = tl.max(tl.where(offs == 0, node_score, neg_inf), axis=0)
    for level in range(0, CHAIN):
        running = running + tl.load(s_lp_ptr + base + level * K)
        sel = offs == level + 1
        node_tok = tl.where(sel, tl.load(s_tok_ptr + base + level * K), node_tok)
        node_par = tl.where(sel, zero_i + level, node_par)
        node_dep = tl.where(sel, zero_i + level + 1, node_dep)
        node_rank = tl.where(sel, tl.load(s_rank_ptr + base + level * K), node_rank)
        node_score = tl.where(sel, running, node_score)

    # 2) The frontier (N + 1 slots, slot N scratch): its first candidate is the root's best child.
    has_depth = (zero_s + D) > 0  # a tensor even where the launcher specialises D
    first_lp = tl.load(s_lp_ptr + base, mask=has_depth, other=float("-inf"))
    f_valid = (offs == 0) & has_depth
    f_score = tl.where(f_valid, first_lp.to(tl.float64) + 0.0, neg_inf)
    f_ctr = zero_i
    f_par = zero_i
    f_idx = zero_i
    count = zero_s + CHAIN + 1
    f_len = zero_s + has_depth.to(tl.int64)
    pushed = zero_s

    for _round in range(0, ROUNDS):
        active = (tl.max(f_valid.to(tl.int32), axis=0) > 0) & (count < N)
        best = tl.max(tl.where(f_valid, f_score, neg_inf), axis=0)
        tied = f_valid & (f_score == best)
        j = tl.argmin(tl.where(tied, f_ctr, zero_i + _BIG), axis=0)
        sel_j = offs == j
        p = tl.sum(tl.where(sel_j, f_par, zero_i), axis=0)
        i = tl.sum(tl.where(sel_j, f_idx, zero_i), axis=0)
        sc = tl.max(tl.where(sel_j, f_score, neg_inf), axis=0)
        d = tl.sum(tl.where(offs == p, node_dep, zero_i), axis=0)
        seeded = (i == 0) & (p < CHAIN)
        new = active & (seeded == 0)
        node = tl.where(seeded, p + 1, count)
        d_c = tl.minimum(d, D - 1)
        q = d_c * K + tl.minimum(i, K - 1)
        dest = tl.where(new, count, N)
        sel_d = offs == dest
        node_tok = tl.where(sel_d, tl.load(s_tok_ptr + base + q), node_tok)
        node_par = tl.where(sel_d, p, node_par)
        node_dep = tl.where(sel_d, d + 1, node_dep)
        node_rank = tl.where(sel_d, tl.load(s_rank_ptr + base + q), node_rank)
        node_score = tl.where(sel_d, sc, node_score)
        count = count + new.to(tl.int64)

        # The next sibling replaces the popped entry (or the slot empties); an idle round keeps it.
        sib = active & (i + 1 < K)
        q_sib = d_c * K + tl.minimum(i + 1, K - 1)
        score_p = tl.max(tl.where(offs == p, node_score, neg_inf), axis=0)
        ctr_j = tl.sum(tl.where(sel_j, f_ctr, zero_i), axis=0)
        valid_j = tl.max(tl.where(sel_j, f_valid.to(tl.int32), 0), axis=0) > 0
        f_score = tl.where(sel_j, tl.where(active, score_p + tl.load(s_lp_ptr + base + q_sib), sc), f_score)
        f_idx = tl.where(sel_j, tl.where(active, i + 1, i), f_idx)
        f_ctr = tl.where(sel_j, tl.where(active, pushed + 1, ctr_j), f_ctr)
        f_valid = tl.where(sel_j, tl.where(active, sib, valid_j), f_valid)
        pushed = pushed + sib.to(tl.int64)

        # The node's best child goes to a fresh slot.
        child = active & (d + 1 < D)
        q_child = tl.minimum(d + 1, D - 1) * K
        sel_c = offs == tl.where(child, f_len, N)
        score_node = tl.max(tl.where(offs == node, node_score, neg_inf), axis=0)
        f_score = tl.where(sel_c, score_node + tl.load(s_lp_ptr + base + q_child), f_score)
        f_par = tl.where(sel_c, node, f_par)
        f_idx = tl.where(sel_c, zero_i, f_idx)
        f_ctr = tl.where(sel_c, pushed + 1, f_ctr)
        f_valid = tl.where(sel_c, child, f_valid)
        pushed = pushed + child.to(tl.int64)
        f_len = f_len + child.to(tl.int64)

    # 3) The nodes, then links and the ancestor-or-self mask over the N stored nodes.
    row = b * N
    in_tree = offs < N
    tl.store(tok_out + row + offs, node_tok, mask=in_tree)
    tl.store(par_out + row + offs, node_par, mask=in_tree)
    tl.store(dep_out + row + offs, node_dep, mask=in_tree)
    tl.store(rank_out + row + offs, node_rank, mask=in_tree)
    tl.store(score_out + row + offs, node_score, mask=in_tree)
    tl.store(count_out + b, count)
    if HAS_PREFIX:
        tl.store(pos_out + row + offs, tl.load(prefix_ptr + b).to(tl.int64) + node_dep, mask=in_tree)

    r = offs[:, None]  # rows
    c = offs[None, :]  # columns
    none = tl.zeros([P, P], dtype=tl.int64) + N
    # first_child[p] = the lowest node whose parent is p.
    is_child = (node_par[None, :] == r) & (c < N)
    first = tl.min(tl.where(is_child, c.to(tl.int64) + none * 0, none), axis=1)
    tl.store(first_out + row + offs, tl.where(first < N, first, -1), mask=in_tree)
    # next_sibling[i] = the lowest j > i with the same parent (roots and padding have none).
    has_par = (node_par >= 0) & in_tree
    same = (node_par[None, :] == node_par[:, None]) & (c > r) & has_par[None, :] & has_par[:, None]
    sib_i = tl.min(tl.where(same, c.to(tl.int64) + none * 0, none), axis=1)
    tl.store(sib_out + row + offs, tl.where(sib_i < N, sib_i, -1), mask=in_tree)
    # Ancestor-or-self: walk up D + 1 times (a root and padding point at themselves).
    up = tl.where(has_par, node_par, ids)
    cur = ids
    anc = (r < 0) & (c < 0)
    for _step in range(0, D + 1):
        anc = anc | (c == cur[:, None])
        cur = tl.sum(tl.where(cur[:, None] == c, up[None, :] + none * 0, none * 0), axis=1)
    tl.store(mask_out + row * N + r * N + c, anc.to(tl.uint8), mask=(r < N) & (c < N))
    if HAS_FULL:
        # ddtree_tree.full_mask's layout: request b's N rows x (prefix_b + N) columns start at
        # sum over earlier requests of N * (prefix + N); its prefix columns stay True.
        start = zero_s
        for earlier in range(0, b):
            start = start + (tl.load(prefix_ptr + earlier).to(tl.int64) + N) * N
        pre = tl.load(prefix_ptr + b).to(tl.int64)
        at = start + r * (pre + N) + pre + c
        tl.store(full_out + at, anc.to(tl.uint8), mask=(r < N) & (c < N))


def build_tree_triton(root_tokens, logprobs, tokens, budget: int, prefix_lens=None, full_mask_size=None) -> Dict[str, Any]:
    """ddtree_tree.build_tree_arrays' result from one Triton program per request (CUDA tensors).

    With ``full_mask_size`` (a host bound, as ddtree_tree.full_mask takes; needs ``prefix_lens``) the
    same program also lays the ancestor mask out as sglang's FULL custom mask: ``out["full_mask"]``,
    equal to ``ddtree_tree.full_mask(out["ancestor_mask"], prefix_lens, full_mask_size)``.
    """
    bs, depth, k = (int(x) for x in logprobs.shape)
    n = int(budget)
    if n < 1:
        raise ValueError("budget must be >= 1")
    if n > MAX_TRITON_BUDGET:
        raise ValueError(f"the Triton tree builder holds at most {MAX_TRITON_BUDGET} nodes, got {n}")
    if k < 1 and depth > 0:
        raise ValueError("the draft top-k must hold at least one token per position")
    device = logprobs.device
    i64 = torch.int64
    lp = logprobs.to(torch.float64)
    s_lp, order = torch.sort(lp, dim=-1, descending=True, stable=True)
    s_tok = torch.gather(tokens.to(i64), -1, order).reshape(bs, depth * k)
    s_lp = s_lp.reshape(bs, depth * k)
    s_rank = order.reshape(bs, depth * k)
    if depth * k == 0:  # nothing is read from them; the kernel still takes pointers
        s_lp = torch.zeros((bs, 1), dtype=torch.float64, device=device)
        s_tok = s_rank = torch.zeros((bs, 1), dtype=i64, device=device)
    out = {name: torch.empty((bs, n), dtype=i64, device=device) for name in ("tokens", "parents", "depths", "ranks")}
    out["scores"] = torch.empty((bs, n), dtype=torch.float64, device=device)
    out["num_nodes"] = torch.empty((bs,), dtype=i64, device=device)
    links = {name: torch.empty((bs, n), dtype=i64, device=device) for name in ("first_child", "next_sibling")}
    mask = torch.empty((bs, n, n), dtype=torch.bool, device=device)
    positions = torch.empty((bs, n), dtype=i64, device=device) if prefix_lens is not None else out["depths"]
    prefix = prefix_lens.to(i64).reshape(bs).contiguous() if prefix_lens is not None else out["num_nodes"]
    full = None
    if full_mask_size is not None:
        if prefix_lens is None:
            raise ValueError("the FULL mask needs prefix_lens")
        full = torch.ones((int(full_mask_size),), dtype=torch.bool, device=device)
    chain_len = min(depth, n - 1)
    width = triton.next_power_of_2(n + 1)
    _tree_kernel[(bs,)](
        s_lp.contiguous(),
        s_tok.contiguous(),
        s_rank.contiguous(),
        root_tokens.to(i64).reshape(bs).contiguous(),
        prefix,
        out["tokens"],
        out["parents"],
        out["depths"],
        out["ranks"],
        out["scores"],
        positions,
        out["num_nodes"],
        links["first_child"],
        links["next_sibling"],
        mask.view(torch.uint8),
        full.view(torch.uint8) if full is not None else mask.view(torch.uint8),
        n,
        depth,
        k,
        chain_len,
        n - 1 if depth > 0 else 0,
        HAS_PREFIX=prefix_lens is not None,
        HAS_FULL=full is not None,
        P=width,
        num_warps=4 if width <= 32 else 8,
    )
    out.update(links)
    out["ancestor_mask"] = mask
    out["chain"] = torch.arange(chain_len + 1, dtype=i64, device=device).view(1, chain_len + 1).expand(bs, -1)
    if prefix_lens is not None:
        out["positions"] = positions
    if full is not None:
        out["full_mask"] = full
    return out


@triton.jit
def _commit_kernel(
    accept_ptr,  # [bs, B] int32: global node ids (b * N + i) of the accepted path, root first, -1 past it
    drafts_ptr,  # [bs] int32: accepted drafts
    predicts_ptr,  # [bs * N] int32: the target's token per node
    loc_ptr,  # [bs * N] int64: the verify's KV slots
    prefix_ptr,  # [bs]: committed lengths before the step
    commit_out,  # [bs] int32
    tokens_out,  # [bs, B] int64
    bonus_out,  # [bs] int64
    accg_out,  # [bs, B] int64
    src_out,  # [bs, B - 1] int64
    tgt_out,  # [bs, B - 1] int64
    lens_out,  # [bs], prefix's dtype
    nodes_out,  # [bs] int64
    track_out,  # [bs] int64 (written when INTERVAL > 0)
    B,
    N,
    INTERVAL,
    BP: tl.constexpr,  # a power of two >= B
):
    b = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BP)
    in_b = cols < B
    drafts = tl.load(drafts_ptr + b).to(tl.int64)
    commit = drafts + 1
    acc = tl.load(accept_ptr + b * B + cols, mask=in_b, other=-1).to(tl.int64)
    live = in_b & (cols < commit)
    accg = tl.where(live, acc, 0)
    tok = tl.where(live, tl.load(predicts_ptr + accg, mask=live, other=0).to(tl.int64), 0)
    tl.store(tokens_out + b * B + cols, tok, mask=in_b)
    tl.store(accg_out + b * B + cols, accg, mask=in_b)
    tl.store(bonus_out + b, tl.sum(tl.where(cols == commit - 1, tok, 0), axis=0))
    tl.store(commit_out + b, commit.to(tl.int32))
    pre = tl.load(prefix_ptr + b)
    tl.store(lens_out + b, pre + commit.to(pre.dtype))
    # The KV move: columns 1..B-1 of the verify's slots take the accepted nodes' slots.
    moved = cols < B - 1
    tgt = tl.load(loc_ptr + b * N + cols + 1, mask=moved, other=0)
    acc_next = tl.load(accept_ptr + b * B + cols + 1, mask=moved, other=-1).to(tl.int64)
    live_next = moved & (cols + 1 < commit)
    src = tl.where(live_next, tl.load(loc_ptr + tl.where(live_next, acc_next, 0), mask=live_next, other=0), tgt)
    tl.store(tgt_out + b * (B - 1) + cols, tgt, mask=moved)
    tl.store(src_out + b * (B - 1) + cols, src, mask=moved)
    # The recurrent state's commit node (ddtree_tree.commit_arrays) and the prefix cache's tracked node.
    offset = b * N
    tl.store(nodes_out + b, tl.sum(tl.where(cols == drafts, acc, 0), axis=0) - offset)
    if INTERVAL > 0:
        pre64 = pre.to(tl.int64)
        post = pre64 + commit
        ith = post // INTERVAL * INTERVAL - pre64 - 1
        ith = tl.where(ith > 0, ith, 0)
        crossed = ((pre64 // INTERVAL) != (post // INTERVAL)) & (ith < commit)
        node = tl.sum(tl.where(cols == tl.minimum(ith, B - 1), acc, 0), axis=0) - offset
        tl.store(track_out + b, tl.where(crossed, node, -1))


def commit_triton(accept_index, accept_drafts, predicts, verify_loc, prefix_lens, budget: int, interval: int = 0):
    """The verify step's commit bookkeeping in one Triton program per request (CUDA tensors).

    From verify_tree_greedy's / the tree sampling's outputs: ``commit_lens`` [bs] int32 (accepted drafts
    + the bonus), ``out_tokens`` [bs, B] (the chain layout, zeros past the commit), ``bonus`` [bs],
    ``acc_global`` [bs, B] (global node ids, 0 past the commit: the hidden-state rows to keep),
    ``move_src`` / ``move_tgt`` [bs, B - 1] (the KV move to contiguous slots), ``new_seq_lens`` [bs]
    and ``nodes`` / ``track`` [bs] (ddtree_tree.commit_arrays' choices; ``track`` only with ``interval``).
    The same values as ddtree_worker's eager path (commit_eager), held to it on random inputs.
    """
    bs, block = (int(x) for x in accept_index.shape)
    n = int(budget)
    if block < 2 or n < block:
        raise ValueError(f"the commit needs a block of at least 2 and a budget >= the block, got B={block} N={n}")
    device = accept_index.device
    i64 = torch.int64
    out = {
        "commit_lens": torch.empty((bs,), dtype=torch.int32, device=device),
        "out_tokens": torch.empty((bs, block), dtype=i64, device=device),
        "bonus": torch.empty((bs,), dtype=i64, device=device),
        "acc_global": torch.empty((bs, block), dtype=i64, device=device),
        "move_src": torch.empty((bs, block - 1), dtype=i64, device=device),
        "move_tgt": torch.empty((bs, block - 1), dtype=i64, device=device),
        "new_seq_lens": torch.empty((bs,), dtype=prefix_lens.dtype, device=device),
        "nodes": torch.empty((bs,), dtype=i64, device=device),
    }
    track = torch.empty((bs,), dtype=i64, device=device) if interval > 0 else out["nodes"]
    _commit_kernel[(bs,)](
        accept_index.contiguous(),
        accept_drafts.contiguous(),
        predicts.contiguous(),
        verify_loc.to(i64).contiguous(),
        prefix_lens.contiguous(),
        out["commit_lens"],
        out["out_tokens"],
        out["bonus"],
        out["acc_global"],
        out["move_src"],
        out["move_tgt"],
        out["new_seq_lens"],
        out["nodes"],
        track,
        block,
        n,
        int(interval),
        BP=triton.next_power_of_2(block),
        num_warps=1,
    )
    if interval > 0:
        out["track"] = track
    return out
