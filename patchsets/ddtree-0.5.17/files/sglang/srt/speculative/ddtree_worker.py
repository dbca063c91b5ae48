"""DDTree verify step for the DFlash worker (added by the specdec.sglang ``ddtree`` patch set).

DFlashWorkerV2 drafts its block as usual (one draft forward over [bonus, MASK x (B-1)]). With
``--speculative-algorithm DDTREE`` it then hands the draft's hidden states to ``ddtree_verify_step``
instead of verifying the linear chain:

1. per block position 1..B-1, the draft's top-k tokens and log-probabilities (draft hidden states
   through the target's lm_head, as DFLASH's argmax does);
2. per request a tree of N nodes (top-1 chain seeded, then best-first), built on the device for the
   whole batch with no host sync: by ddtree_tree.build_tree_arrays (array operations, static shapes,
   replayed from a CUDA graph, SGLANG_DDTREE_TREE_BUILDER=graph) or by one Triton program per request
   (ddtree_tree_kernel; the default); both the same trees as the
   reference ddtree_utils.build_tree (the array builder tested node for node in CI, both on the device);
3. one target forward over the N nodes in TARGET_VERIFY mode with a tree attention mask (FULL
   layout: N rows x (prefix + N) columns per request; prefix columns allowed, tree columns = the
   ancestor-or-self mask), positions = prefix + depth;
4. sgl_kernel's greedy tree verification (verify_tree_greedy, EAGLE's / NGRAM's kernel) or, for a
   batch with sampling (temperature > 0), its tree speculative sampling
   (tree_speculative_sampling_target_only, EAGLE's non-greedy tree verify);
5. commit: the target KV of the accepted nodes is moved to the contiguous slots prefix..prefix+a,
   the draft KV is written from the accepted nodes' target hidden states, and the output tokens use
   the chain layout the scheduler reads (stride B, accepted drafts then the bonus token).

Hybrid (Gated DeltaNet) targets: the verify input also carries the tree's first-child / next-sibling
links (retrieve_next_token / retrieve_next_sibling, local per request). The hybrid linear-attention
backend hands them to sglang's triton tree kernels (as for EAGLE with topk > 1): the conv kernel
derives each node's parent and takes its window from it, the GDN kernel starts each node from its
parent's state, and both keep one snapshot per node (the pool holds N steps per slot,
max_speculative_num_draft_tokens). After verification the recurrent state of the last accepted node
(ddtree_utils.commit_nodes: its tree index, not the chain's step) is committed.

KV of rejected branches: the N verify slots are the request's own over-allocated headroom
(dflash_info_v2.prepare_for_decode reserves 2 * max(N, B) past the committed length). Nothing past
the committed length is kept: the next step writes its tree over the same slots, and the scheduler
frees the headroom when the request ends (release_kv_cache), as for DFLASH's rejected tokens.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, List, Optional

import torch

from sglang.kernels.ops.speculative.cache_locs import assign_extend_cache_locs_func
from sglang.srt.configs.hybrid_arch import hybrid_gdn_config, mambaish_config
from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
from sglang.srt.speculative import ddtree_tree, ddtree_utils
from sglang.srt.speculative.dflash_info import DFlashVerifyInput
from sglang.srt.speculative import dflash_utils
from sglang.srt.speculative.dflash_utils import apply_dflash_verify_logits_adjustments

if TYPE_CHECKING:
    from sglang.srt.managers.schedule_batch import ScheduleBatch

logger = logging.getLogger(__name__)

# Log the tree size of the first verify step and then every this many steps.
_LOG_EVERY_STEPS = 256


def ddtree_can_verify(batch: "ScheduleBatch", simulate_acc_len: float) -> bool:
    """Greedy batches, and sampling batches where sgl_kernel's tree sampling exists, verify the tree;
    grammar and simulated acceptance keep DFLASH's chain."""
    if batch.has_grammar or simulate_acc_len > 0:
        return False
    sampling_info = batch.sampling_info
    if sampling_info is None or bool(sampling_info.is_all_greedy):
        return True
    return dflash_utils.is_dflash_sampling_verify_available()


def sample_tree(*, tree, logits, sampling_info, draft_input, bs: int, n: int, block: int, device):
    """Tree speculative sampling (temperature > 0) with sgl_kernel's tree_speculative_sampling_target_only,
    the kernel EAGLE's non-greedy tree verify and DFLASH's sampling chain use.

    Per node the target's distribution after temperature / top-k / top-p (DFLASH's
    build_dflash_verify_target_probs over the N rows of each request); the tree tokens are proposals
    taken deterministically (top-k), so the draft probabilities are zero (target-only: a child is
    accepted with the target's probability of its token under the residual, a rejected token's mass is
    removed, the bonus token is drawn from what is left). ddtree_utils.verify_sampling is the same rule
    in Python, held to the target's distribution by a chi-square test in the collection's CI. Returns
    (predicts [bs * N], accept_index [bs, B], accepted drafts [bs]) in verify_tree_greedy's layout.
    """
    from sglang.srt.runtime_context import get_spec

    target_probs = dflash_utils.build_dflash_verify_target_probs(
        next_token_logits=logits,
        sampling_info=sampling_info,
        draft_token_num=n,
        bs=bs,
        max_top_k=getattr(draft_input, "max_top_k", None),
        uniform_top_k_value=getattr(draft_input, "uniform_top_k_value", None),
    )
    predicts = torch.zeros((bs * n,), dtype=torch.int32, device=device)
    accept_index = torch.full((bs, block), -1, dtype=torch.int32, device=device)
    accept_drafts = torch.zeros((bs,), dtype=torch.int32, device=device)
    spec = get_spec()
    dflash_utils.tree_speculative_sampling_target_only(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_drafts,
        candidates=tree["tokens"].to(torch.int64),
        retrive_index=tree["retrieve_index"],
        retrive_next_token=tree["retrieve_next_token"],
        retrive_next_sibling=tree["retrieve_next_sibling"],
        uniform_samples=torch.rand((bs, n), dtype=torch.float32, device=device),
        uniform_samples_for_final_sampling=torch.rand((bs,), dtype=torch.float32, device=device),
        target_probs=target_probs,
        draft_probs=torch.zeros_like(target_probs),
        threshold_single=float(spec.speculative_accept_threshold_single),
        threshold_acc=max(float(spec.speculative_accept_threshold_acc), 1e-9),
        deterministic=True,
    )
    return predicts, accept_index, accept_drafts


def draft_topk(draft_hidden: torch.Tensor, lm_head_weight: torch.Tensor, topk: int):
    """Top-k log-probabilities and tokens of the draft at block positions 1..B-1: [bs, B-1, k]."""
    bs, block, hidden = draft_hidden.shape
    rows = draft_hidden[:, 1:, :].reshape(-1, hidden)
    logits = torch.nn.functional.linear(rows, lm_head_weight).float()
    logprobs = torch.log_softmax(logits, dim=-1)
    k = min(int(topk), logprobs.shape[-1])
    values, indices = torch.topk(logprobs, k, dim=-1)
    return values.view(bs, block - 1, k), indices.view(bs, block - 1, k)


def build_tree_tensors(
    roots: List[int],
    values: List[List[List[float]]],
    indices: List[List[List[int]]],
    prefix_lens: List[int],
    budget: int,
    device,
):
    """Host trees -> verify tensors (the reference path, kept for tests; the step builds on the device)."""
    bs = len(roots)
    trees = []
    for b in range(bs):
        tree = ddtree_utils.build_tree(roots[b], values[b], indices[b], budget)
        if len(tree) != budget:
            raise RuntimeError(f"DDTREE built {len(tree)} nodes, expected the budget {budget}")
        trees.append(tree)
    n = budget
    tokens, pos, next_tok, next_sib = [], [], [], []
    for b, tree in enumerate(trees):
        first_child, sibling = ddtree_utils.retrieve_links(tree.parents)
        # The recurrent (GDN / conv) tree kernels derive parents from these links in node order.
        ddtree_utils.check_kernel_parents(tree.parents)
        tokens.extend(tree.tokens)
        pos.extend(ddtree_utils.positions(tree.depths, prefix_lens[b]))
        next_tok.extend(first_child)
        next_sib.extend(sibling)
    as_i64 = dict(dtype=torch.int64)
    tokens_t = torch.tensor(tokens, **as_i64).view(bs, n)
    positions_t = torch.tensor(pos, **as_i64)
    next_tok_t = torch.tensor(next_tok, **as_i64).view(bs, n)
    next_sib_t = torch.tensor(next_sib, **as_i64).view(bs, n)
    # FULL mask: per request N rows x (prefix + N) columns, row-major, flattened and concatenated.
    chunks = []
    for b, tree in enumerate(trees):
        anc = torch.tensor(ddtree_utils.ancestor_mask(tree.parents), dtype=torch.bool)
        prefix = torch.ones((n, int(prefix_lens[b])), dtype=torch.bool)
        chunks.append(torch.cat((prefix, anc), dim=1).reshape(-1))
    mask_t = torch.cat(chunks)
    out = {
        "tokens": tokens_t.to(device, non_blocking=True),
        "positions": positions_t.to(device, non_blocking=True),
        "retrieve_index": torch.arange(bs * n, dtype=torch.int64, device=device).view(bs, n),
        "retrieve_next_token": next_tok_t.to(device, non_blocking=True),
        "retrieve_next_sibling": next_sib_t.to(device, non_blocking=True),
        "custom_mask": mask_t.to(device, non_blocking=True),
    }
    return out, trees


# Which builder makes each step's trees (SGLANG_DDTREE_TREE_BUILDER; all give the reference's trees, the
# device check holds each to ddtree_utils.build_tree):
# - triton (default since 2026-12-05, proven end to end on the H100, compute capability 9.0:
#   tests/device/records/2026-12-05-h100-ddtree-e2e-triton; on sm_120 compiled to PTX only): one Triton
#   program per request builds the tree and lays out the FULL mask (ddtree_tree_kernel.build_tree_triton:
#   0.048 ms graphed, 0.369 ms launched at N=16, batch 1 on the H100, equal to the reference with no host
#   sync), and another does the commit's bookkeeping (commit_triton); a failed compile or launch falls back
#   to "graph" / the torch commit for the server's life, said once;
# - graph (the default until then, proven end to end on the H200: tests/device/records/2026-12-05-h200-ddtree-e2e):
#   ddtree_tree.build_tree_arrays (~35 launches a round, N - 1 rounds) replayed from a CUDA graph captured per
#   (batch, N, top-k, block) (1.70 ms at N=16, batch 1 on the H200, 1.82 ms on the H100);
# - eager: build_tree_arrays launched op by op (14.0 ms at N=16 on the H200).
ENV_TREE_BUILDER = "SGLANG_DDTREE_TREE_BUILDER"
TREE_BUILDERS = ("triton", "graph", "eager")


def tree_builder() -> str:
    """SGLANG_DDTREE_TREE_BUILDER: triton (default), graph or eager; anything else is refused."""
    value = os.environ.get(ENV_TREE_BUILDER, "").strip().lower() or TREE_BUILDERS[0]
    if value not in TREE_BUILDERS:
        raise ValueError(f"{ENV_TREE_BUILDER}={value!r}: use one of {', '.join(TREE_BUILDERS)}")
    return value


def _capture(run):
    """``run()`` warmed up on a side stream (allocator, first launches), then captured: (the graph, its outputs)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = run()
    return graph, out


class _TreeGraph:
    """The array builder captured once for one (bs, N, top-k, block) and replayed on copied inputs.

    build_tree_arrays has static shapes for a given batch and N and reads no device value on the host,
    so its whole launch sequence can be captured; the inputs are copied into static buffers, the outputs
    are the graph's own tensors (valid until the next replay, which is the next verify step).
    """

    def __init__(self, roots, values, indices, prefix_lens, n: int):
        self.n = int(n)
        self.roots = roots.clone()
        self.values = values.clone()
        self.indices = indices.clone()
        self.prefix_lens = prefix_lens.clone()
        self.graph, self.out = _capture(self._build)

    def _build(self):
        return ddtree_tree.build_tree_arrays(self.roots, self.values, self.indices, self.n, prefix_lens=self.prefix_lens)

    def replay(self, roots, values, indices, prefix_lens):
        self.roots.copy_(roots)
        self.values.copy_(values)
        self.indices.copy_(indices)
        self.prefix_lens.copy_(prefix_lens)
        self.graph.replay()
        # Copies: the step's consumers may still read them after the next step's replay (overlap scheduler).
        return {key: value.clone() if torch.is_tensor(value) else value for key, value in self.out.items()}


_tree_graphs: dict = {}
_triton_failed: set = set()  # the ddtree_tree_kernel functions that failed once: not tried again


def _triton(name: str, *args, **kwargs):
    """ddtree_tree_kernel.<name>(...), or None once it has failed (logged once; the caller's torch path
    gives the same values)."""
    if name in _triton_failed:
        return None
    try:
        from sglang.srt.speculative import ddtree_tree_kernel

        return getattr(ddtree_tree_kernel, name)(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the torch path gives the same values
        _triton_failed.add(name)
        logger.warning("DDTREE: Triton's %s failed (%r); using the torch path for the server's life", name, exc)
        return None


def _graph_arrays(roots, values, indices, prefix_lens, n: int):
    key = (tuple(values.shape), values.dtype, indices.dtype, prefix_lens.dtype, int(n), values.device)
    if key not in _tree_graphs:
        try:
            _tree_graphs[key] = _TreeGraph(roots, values, indices, prefix_lens, n)
            logger.info("DDTREE: tree builder captured in a CUDA graph for bs=%d N=%d (%d graphs)", roots.shape[0], n, len(_tree_graphs))
        except Exception as exc:  # noqa: BLE001 - the eager builder gives the same trees
            _tree_graphs[key] = None
            logger.warning("DDTREE: tree builder capture failed for bs=%d N=%d (%r); building eagerly for this shape", roots.shape[0], n, exc)
    graph = _tree_graphs[key]
    if graph is None:
        return ddtree_tree.build_tree_arrays(roots, values, indices, n, prefix_lens=prefix_lens)
    return graph.replay(roots, values, indices, prefix_lens)


# SGLANG_DDTREE_STEP_GRAPH (default 2): the draft's top-k and the Triton tree build (tree, links, positions and
# sglang's FULL mask) replayed from one CUDA graph per (batch, B, N, top-k, mask capacity) instead of ~35 launches
# from Python every step, and at 2 a greedy batch's verify and commit bookkeeping from a second one. The 2026-12-06
# control showed that fixed per-step work, not the tree's width, is what a DDTREE step costs beyond DFLASH's on a
# small pair (tests/device/records/2026-12-06-h100-ddtree-e2e-interleaved-block8); level 2 took a step from 1.19x
# DFLASH's to about DFLASH's and replayed 512/512 lossless on both pairs
# (tests/device/records/2026-12-06-h100-ddtree-step-graph-commit). 0 is the eager path, for diagnosis.
ENV_STEP_GRAPH = "SGLANG_DDTREE_STEP_GRAPH"
_MIN_MASK_CAPACITY = 1 << 16


def step_graph_level() -> int:
    """SGLANG_DDTREE_STEP_GRAPH: 0 eager; 1 the draft top-k and the tree build from a CUDA graph; 2 (unset) also the
    greedy tree verify and the commit's bookkeeping (the KV move and the recurrent-state commit stay eager: the move
    may not run twice). Anything else is refused."""
    value = os.environ.get(ENV_STEP_GRAPH, "").strip() or "2"
    if value not in ("0", "1", "2"):
        raise ValueError(f"{ENV_STEP_GRAPH}={value!r}: use 0 (eager), 1 (the tree build) or 2 (also verify and commit)")
    return int(value)


def mask_capacity(mask_size: int, current: int = 0) -> int:
    """The FULL-mask buffer a captured step holds: ``current`` while it fits ``mask_size``, else the next power of
    two at or above it (at least _MIN_MASK_CAPACITY), so a growing prefix recaptures a logarithmic number of times."""
    size = int(mask_size)
    if size < 0:
        raise ValueError(f"a mask size is never negative, got {size}")
    if 0 < current and size <= current:
        return int(current)
    return max(_MIN_MASK_CAPACITY, 1 << max(size - 1, 0).bit_length())


class _StepGraph:
    """draft_topk + build_tree_triton (FULL mask laid out in a buffer of ``capacity`` bytes, its prefix columns
    pre-filled True) captured once and replayed on copied inputs.

    Both have static shapes for a given (bs, B, N, top-k) and read no device value on the host; the FULL mask's
    offsets come from the device's prefix lengths, so only its size depends on the host, and a buffer of
    ``capacity`` >= that size serves every step that fits (the consumer reads its first mask_size bytes). The
    outputs are the graph's own tensors, read only by this step's verify (same stream, enqueued before the next
    replay); nothing of them leaves the step. On capture the replay is held to the eager path on the same inputs
    (a host read, once per capture); a difference retires the step graph for the server's life.
    """

    def __init__(self, draft_hidden, lm_weight, roots, prefix_lens, n: int, topk: int, capacity: int):
        self.n, self.topk, self.capacity = int(n), int(topk), int(capacity)
        self.weight = lm_weight  # the target's lm_head rows: a parameter, its address fixed for the server's life
        self.hidden = draft_hidden.clone()
        self.roots = roots.clone()
        self.prefix = prefix_lens.clone()
        self.graph = self.out = None
        if self.hidden.is_cuda:  # else Triton's interpreter on a CPU (the checks): every replay runs the same code
            self.graph, self.out = _capture(self._run)

    def _run(self):
        from sglang.srt.speculative import ddtree_tree_kernel

        values, indices = draft_topk(self.hidden, self.weight, self.topk)
        out = ddtree_tree_kernel.build_tree_triton(
            self.roots, values, indices, self.n, prefix_lens=self.prefix, full_mask_size=self.capacity
        )
        bs = int(self.roots.shape[0])
        out["retrieve_index"] = torch.arange(bs * self.n, dtype=torch.int64, device=self.roots.device).view(bs, self.n)
        return out

    def replay(self, draft_hidden, roots, prefix_lens):
        self.hidden.copy_(draft_hidden)
        self.roots.copy_(roots)
        self.prefix.copy_(prefix_lens)
        if self.graph is None:
            self.out = self._run()
        else:
            self.graph.replay()
        _step_graph_stats["replays"] += 1
        return self.out


_step_graphs: dict = {}
_commit_graphs: dict = {}  # level 2's graphs
_step_graph_retired: list = []  # a reason, once the step graph differed from the eager path or failed
_step_graph_stats = {"captures": 0, "replays": 0, "commit_captures": 0, "commit_replays": 0, "reserved_bytes": 0}


def _reserved(device) -> int:
    """The CUDA caching allocator's reserved bytes on ``device`` (a graph's private pool among them); 0 off CUDA."""
    device = torch.device(device)
    return int(torch.cuda.memory_reserved(device)) if device.type == "cuda" else 0


def _memory_note(before: int, device) -> str:
    """What a capture (with its warm-up and its check against the eager path) added to the allocator's reserved
    memory, and the step graphs' total so far: memory outside --mem-fraction-static. Empty off CUDA."""
    if torch.device(device).type != "cuda":
        return ""
    grew = max(0, _reserved(device) - before)
    _step_graph_stats["reserved_bytes"] += grew
    return "; %.1f MiB more reserved, %.1f MiB by the step graphs in all" % (
        grew / 2**20,
        _step_graph_stats["reserved_bytes"] / 2**20,
    )


def _tree_from_arrays(arrays, mask_size: int, bs: int, n: int, device):
    """build_tree_on_device's result from a builder's arrays (the FULL mask cut to this step's size)."""
    retrieve_index = arrays.get("retrieve_index")
    if retrieve_index is None:
        retrieve_index = torch.arange(bs * n, dtype=torch.int64, device=device).view(bs, n)
    return {
        "tokens": arrays["tokens"],
        "positions": arrays["positions"].reshape(-1),
        "depths": arrays["depths"],
        "retrieve_index": retrieve_index,
        "retrieve_next_token": arrays["first_child"],
        "retrieve_next_sibling": arrays["next_sibling"],
        "custom_mask": arrays["full_mask"][:mask_size],
    }


def _check_replay(bad):
    """A capture's first replay against the eager path on the same inputs: ``bad`` names the outputs that differ."""
    if bad:
        raise RuntimeError("the replay differs from the eager path in " + ", ".join(bad))


def _retire_step_graphs(exc, bs: int, n: int):
    """Both levels' graphs dropped for the server's life (the eager path gives the same values), said once; None."""
    _step_graph_retired.append(repr(exc))
    _step_graphs.clear()
    _commit_graphs.clear()
    logger.warning("DDTREE: step graphs retired at bs=%d N=%d (%r); eager for the server's life", bs, n, exc)


def _tree_differences(got, want, mask_size: int) -> list:
    """The tree arrays where ``got`` differs from ``want`` (each request's nodes only), then sglang's FULL mask (its
    first ``mask_size`` bytes) where every request holds N nodes, the only trees that layout is defined for."""
    bs, n = (int(x) for x in want["tokens"].shape)
    rows = torch.arange(n, device=want["num_nodes"].device).view(1, n) < want["num_nodes"].view(bs, 1)
    bad = _differences(got, want, ("num_nodes", "tokens", "depths", "positions", "first_child", "next_sibling"), rows)
    if not bad and bool((want["num_nodes"] == n).all()):
        masks = ({"full_mask": side["full_mask"][:mask_size]} for side in (got, want))
        bad = _differences(*masks, ("full_mask",))
    return bad


def graphed_tree(draft_hidden, lm_weight, roots, prefix_lens, n: int, topk: int, mask_size: int):
    """The step's tree from the step graph (SGLANG_DDTREE_STEP_GRAPH 1 or 2 with the Triton builder; on CUDA, or on a CPU
    under Triton's interpreter, where the "graph" re-runs the same code), or None for the eager path: off, or
    retired (a capture that failed or differed from the eager path, said once)."""
    if _step_graph_retired or step_graph_level() < 1 or not _kernels_run_on(draft_hidden.device):
        return None
    if tree_builder() != "triton" or "build_tree_triton" in _triton_failed:
        return None
    bs = int(roots.shape[0])
    # The lm_head's address is in the key: weights loaded anew (sglang's update_weights) are captured anew.
    key = (tuple(draft_hidden.shape), draft_hidden.dtype, int(n), int(topk), lm_weight.data_ptr(), tuple(lm_weight.shape))
    graph = _step_graphs.get(key)
    if graph is None or mask_size > graph.capacity:  # new shape, or the prefix outgrew the mask buffer
        capacity = mask_capacity(mask_size, graph.capacity if graph is not None else 0)
        before = _reserved(draft_hidden.device)
        try:
            _step_graph_stats["captures"] += 1
            graph = _StepGraph(draft_hidden, lm_weight, roots, prefix_lens, n, topk, capacity)
            got = graph.replay(draft_hidden, roots, prefix_lens)
            values, indices = draft_topk(draft_hidden, lm_weight, topk)
            want = _build_arrays(roots, values, indices, prefix_lens, n, mask_size)
            _check_replay(_tree_differences(got, want, mask_size))
        except Exception as exc:  # noqa: BLE001 - the eager path gives the same trees
            return _retire_step_graphs(exc, bs, n)
        _step_graphs[key] = graph
        logger.info(
            "DDTREE: draft top-k and tree build captured in a CUDA graph for bs=%d N=%d (mask capacity %d bytes; %d graphs%s),"
            " equal to the eager path on this step",
            bs, n, graph.capacity, len(_step_graphs), _memory_note(before, draft_hidden.device),
        )  # fmt: skip
        return _tree_from_arrays(want, mask_size, bs, n, draft_hidden.device)
    return _tree_from_arrays(graph.replay(draft_hidden, roots, prefix_lens), mask_size, bs, n, draft_hidden.device)


class _CommitGraph:
    """Level 2: the greedy tree verify (argmax, verify_tree_greedy), the commit's bookkeeping (commit_triton) and the
    accepted hidden states' gather captured once per (bs, N, B, logits and hidden shapes, track interval) and
    replayed on copied inputs. None of it writes outside its own tensors, so the capture's warm-up and the check
    against the eager path are harmless; what leaves the step (tokens, lengths, bonus) is copied out of the graph's
    tensors, the rest is read by this step only."""

    def __init__(self, verify_func, logits, hidden, tree, verify_loc, prefix_lens, n: int, block: int, interval: int):
        self.verify_func, self.n, self.block, self.interval = verify_func, int(n), int(block), int(interval)
        self.logits, self.hidden = logits.clone(), hidden.clone()
        self.tokens = tree["tokens"].clone()
        self.next_token = tree["retrieve_next_token"].clone()
        self.next_sibling = tree["retrieve_next_sibling"].clone()
        self.retrieve_index = tree["retrieve_index"].clone()
        self.verify_loc, self.prefix = verify_loc.clone(), prefix_lens.clone()
        self.graph = self.out = None
        if self.logits.is_cuda:  # else Triton's interpreter on a CPU (the checks): every replay runs the same code
            self.graph, self.out = _capture(self._run)

    def _run(self):
        # commit_tensors (Triton's commit here: graphed_commit runs only where it does), the one name both paths
        # commit through.
        return verify_and_commit(
            self.verify_func, commit_tensors, self.logits, self.hidden,
            {"tokens": self.tokens, "retrieve_index": self.retrieve_index, "retrieve_next_token": self.next_token,
             "retrieve_next_sibling": self.next_sibling},
            self.verify_loc, self.prefix, self.n, self.block, self.interval,
        )  # fmt: skip

    def replay(self, logits, hidden, tree, verify_loc, prefix_lens):
        for mine, theirs in (
            (self.logits, logits), (self.hidden, hidden), (self.tokens, tree["tokens"]),
            (self.next_token, tree["retrieve_next_token"]), (self.next_sibling, tree["retrieve_next_sibling"]),
            (self.verify_loc, verify_loc), (self.prefix, prefix_lens),
        ):  # fmt: skip
            mine.copy_(theirs)
        if self.graph is None:
            self.out = self._run()
        else:
            self.graph.replay()
        _step_graph_stats["commit_replays"] += 1
        out = dict(self.out)
        for key in _LEAVES_THE_STEP:  # the scheduler may read these after the next step's replay
            out[key] = out[key].clone()
        return out


_LEAVES_THE_STEP = ("commit_lens", "out_tokens", "bonus", "new_seq_lens")


def verify_and_commit(verify_func, commit_func, logits, hidden, tree, verify_loc, prefix_lens, n, block, interval):
    """Greedy tree verification (argmax, sglang's verify_tree_greedy), the commit's bookkeeping (``commit_func``:
    commit_triton or commit_eager) and the accepted nodes' hidden states (``compact_hidden``) and the chain's KV
    slots (``chain_loc_2d``): the part of a greedy step that level 2 replays, as one function for both paths."""
    bs = int(tree["tokens"].shape[0])
    device = logits.device
    target_predict = torch.argmax(logits, dim=-1).view(bs, n)
    predicts = torch.zeros((bs * n,), dtype=torch.int32, device=device)
    accept_index = torch.full((bs, block), -1, dtype=torch.int32, device=device)
    accept_drafts = torch.empty((bs,), dtype=torch.int32, device=device)
    predicts, accept_index, accept_drafts = verify_func(
        predicts=predicts,
        accept_index=accept_index,
        accept_token_num=accept_drafts,
        candidates=tree["tokens"],
        retrieve_index=tree["retrieve_index"],
        retrieve_next_token=tree["retrieve_next_token"],
        retrieve_next_sibling=tree["retrieve_next_sibling"],
        target_predict=target_predict,
    )
    commit = commit_func(accept_index, accept_drafts, predicts, verify_loc, prefix_lens, n, interval)
    return with_accepted(commit, accept_drafts, hidden, verify_loc, n)


def with_accepted(commit, accept_drafts, hidden, verify_loc, n: int):
    """The commit's bookkeeping with what the rest of the step reads, after a greedy or a sampled verify alike: the
    accepted drafts, the accepted nodes' hidden states (``compact_hidden``) and the chain's KV slots (``chain_loc_2d``)."""
    block = int(commit["out_tokens"].shape[1])
    return dict(
        commit,
        accept_drafts=accept_drafts,
        compact_hidden=hidden[commit["acc_global"].reshape(-1)],
        chain_loc_2d=verify_loc.view(-1, n)[:, :block].contiguous(),
    )


def graphed_commit(verify_func, logits, hidden, tree, verify_loc, prefix_lens, n: int, block: int, interval: int):
    """Level 2's verify and commit from a CUDA graph (as graphed_tree: CUDA, or a CPU under Triton's interpreter), or
    None for the eager path: below level 2, retired, or the Triton commit retired."""
    if _step_graph_retired or step_graph_level() < 2 or not _kernels_run_on(logits.device):
        return None
    if tree_builder() != "triton" or "commit_triton" in _triton_failed:
        return None
    bs = int(tree["tokens"].shape[0])
    key = (tuple(logits.shape), logits.dtype, tuple(hidden.shape), hidden.dtype, int(n), int(block), int(interval))
    graph = _commit_graphs.get(key)
    if graph is not None:
        return graph.replay(logits, hidden, tree, verify_loc, prefix_lens)
    before = _reserved(logits.device)
    try:
        _step_graph_stats["commit_captures"] += 1
        graph = _CommitGraph(verify_func, logits, hidden, tree, verify_loc, prefix_lens, n, block, interval)
        got = graph.replay(logits, hidden, tree, verify_loc, prefix_lens)
        want = verify_and_commit(
            verify_func, commit_eager, logits, hidden, tree, verify_loc, prefix_lens, n, block, interval
        )
        _check_replay(_differences(got, want, tuple(want)))
    except Exception as exc:  # noqa: BLE001 - the eager path gives the same values
        return _retire_step_graphs(exc, bs, n)
    _commit_graphs[key] = graph
    logger.info(
        "DDTREE: tree verify and commit captured in a CUDA graph for bs=%d N=%d (%d graphs%s), equal to the eager path",
        bs, n, len(_commit_graphs), _memory_note(before, logits.device),
    )  # fmt: skip
    return want


def _kernels_run_on(device) -> bool:
    """CUDA devices; the CPU too under TRITON_INTERPRET=1 (Triton's interpreter: the CPU checks)."""
    return torch.device(device).type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def _build_arrays(roots, values, indices, prefix_lens, n: int, mask_size: int):
    """The tree arrays and sglang's FULL mask (``full_mask``) from the configured builder (a failed Triton
    builder falls back to the graphed array builder)."""
    builder = tree_builder() if _kernels_run_on(values.device) else "eager"
    if builder == "triton":
        arrays = _triton("build_tree_triton", roots, values, indices, n, prefix_lens=prefix_lens, full_mask_size=mask_size)
        if arrays is not None:
            return arrays
    if builder == "eager" or not values.is_cuda:
        arrays = ddtree_tree.build_tree_arrays(roots, values, indices, n, prefix_lens=prefix_lens)
    else:
        arrays = _graph_arrays(roots, values, indices, prefix_lens, n)
    return dict(arrays, full_mask=ddtree_tree.full_mask(arrays["ancestor_mask"], prefix_lens, mask_size))


def build_tree_on_device(
    roots: torch.Tensor,
    values: torch.Tensor,
    indices: torch.Tensor,
    prefix_lens: torch.Tensor,
    budget: int,
    mask_prefix_bound: int,
):
    """The verify tensors of a batch's trees, built on the device with no host synchronisation.

    Each builder gives, per request, exactly ddtree_utils.build_tree's tree (ddtree_tree's CPU
    equivalence test in the collection's CI, both builders on the device in tests/device/ddtree_tree_check.py);
    the FULL custom mask is laid out at mask_indptr into a buffer sized from mask_prefix_bound, a host upper
    bound of sum(prefix_lens) (no device read). The builder: SGLANG_DDTREE_TREE_BUILDER (tree_builder).
    """
    bs = int(prefix_lens.shape[0])
    n = int(budget)
    mask_size = n * (int(mask_prefix_bound) + bs * n)
    arrays = _build_arrays(roots.view(bs), values, indices, prefix_lens.view(bs), n, mask_size)
    return _tree_from_arrays(arrays, mask_size, bs, n, values.device)


def host_prefix_bound(batch: "ScheduleBatch", draft_input, bs: int) -> torch.Tensor:
    """Per request, a host-side value >= the committed length, as DFLASH's verify bounds it.

    The scheduler's seq_lens_cpu (the committed lengths DFLASH adds its block to) or, without it, the
    draft input's reserved lengths; neither reads the device. Only when the batch has neither is the
    device's prefix read (one host sync, logged once).
    """
    if batch.seq_lens_cpu is not None:
        return batch.seq_lens_cpu[:bs].to(torch.int64)
    for name in ("reserved_seq_lens_cpu", "nxt_kv_lens_cpu"):  # 0.5.17's and 0.5.23's name
        reserved = getattr(draft_input, name, None)
        if reserved is not None:
            return reserved[:bs].to(torch.int64)
    global _warned_prefix_sync
    if not _warned_prefix_sync:
        _warned_prefix_sync = True
        logger.warning("DDTREE: the batch has no host sequence lengths; reading them from the device.")
    return batch.seq_lens[:bs].to(torch.int64).cpu()


_warned_prefix_sync = False


def ddtree_verify_step(
    worker,
    *,
    batch: "ScheduleBatch",
    draft_input,
    draft_hidden: torch.Tensor,
    block_ids: torch.Tensor,
    prefix_lens: torch.Tensor,
    positions_2d: torch.Tensor,
    lm_head,
    on_publish,
):
    """One DDTree decode step after the DFlash draft forward. Returns a GenerationBatchResult."""
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.speculative.eagle_utils import verify_tree_greedy_func

    config: ddtree_utils.DDTreeConfig = worker._ddtree_config
    check_ddtree_target(worker)
    block = int(worker.block_size)
    n = int(config.budget)
    bs = int(prefix_lens.shape[0])
    device = worker.device

    # --- 1) Per-position top-k of the draft, then the trees on the device (no host sync).
    draft_hidden = draft_hidden.view(bs, block, -1)
    # Rows past the model's vocabulary (lm_head padding) are never candidates.
    vocab = int(worker.model_runner.model_config.vocab_size)
    lm_weight = lm_head.weight[:vocab]
    host_prefix = host_prefix_bound(batch, draft_input, bs)
    prefix_sum = int(host_prefix.sum())
    mask_size = n * (prefix_sum + bs * n)
    tree = graphed_tree(draft_hidden, lm_weight, block_ids[:, 0], prefix_lens.view(bs), n, config.topk, mask_size)
    if tree is None:
        values, indices = draft_topk(draft_hidden, lm_weight, config.topk)
        tree = build_tree_on_device(block_ids[:, 0], values, indices, prefix_lens, n, prefix_sum)

    # --- 2) Target verify of all N nodes in one forward, with the tree mask.
    req_to_token = worker.model_runner.req_to_token_pool.req_to_token
    verify_loc = assign_extend_cache_locs_func(
        req_pool_indices=batch.req_pool_indices,
        req_to_token=req_to_token,
        start_offset=prefix_lens,
        end_offset=prefix_lens + n,
        batch_size=bs,
        draft_token_num=n,
        device=device,
    )
    verify_input = DFlashVerifyInput(
        draft_token=tree["tokens"].reshape(-1),
        positions=tree["positions"],
        draft_token_num=n,
        custom_mask=tree["custom_mask"],
        capture_hidden_mode=CaptureHiddenMode.FULL,
        retrieve_next_token=tree["retrieve_next_token"],
        retrieve_next_sibling=tree["retrieve_next_sibling"],
    )
    batch.out_cache_loc = verify_loc
    seq_lens_cpu_backup = batch.seq_lens_cpu
    seq_lens_sum_backup = batch.seq_lens_sum
    # Verify host bound = the host's committed lengths + the N tree nodes (as DFLASH adds its block).
    batch.seq_lens_cpu = host_prefix + n
    batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
    verify_forward_batch, on_graph = verify_input.prepare_for_verify(batch, worker.target_worker)
    if not on_graph and not worker._ddtree_warned_eager:
        worker._ddtree_warned_eager = True
        logger.warning(
            "DDTREE verify: a batch of %d requests x %d tree nodes has no captured CUDA graph "
            "(graphs off, or a batch size past the captured ones); it and such batches run eager.",
            bs,
            n,
        )
    batch.seq_lens_cpu = seq_lens_cpu_backup
    batch.seq_lens_sum = seq_lens_sum_backup
    target_out = worker.target_worker.forward_batch_generation(
        batch=None,
        forward_batch=verify_forward_batch,
        is_verify=True,
        skip_attn_backend_init=True,
    )
    logits_output = target_out.logits_output
    if batch.sampling_info is not None:
        apply_dflash_verify_logits_adjustments(
            next_token_logits=logits_output.next_token_logits,
            sampling_info=batch.sampling_info,
            draft_token_num=n,
        )

    # --- 3) Tree verification: greedy (sgl_kernel.verify_tree_greedy) or, for a batch with sampling,
    # tree speculative sampling (sample_tree); then the commit's bookkeeping (chain layout, bonus, KV move,
    # lengths, recurrent-state nodes). A greedy batch at SGLANG_DDTREE_STEP_GRAPH=2 replays both from a graph.
    sampling_info = batch.sampling_info
    sampled = sampling_info is not None and not bool(sampling_info.is_all_greedy)
    interval = 0
    if worker._need_mamba_verify_commit and batch.mamba_track_indices is not None:
        from sglang.srt.runtime_context import get_exec

        interval = int(get_exec().mamba.mamba_track_interval)
    hidden = logits_output.hidden_states
    if hidden is None:
        raise RuntimeError("DDTREE verify requires target hidden states, but got None.")
    logits = logits_output.next_token_logits
    if not sampled:
        commit = graphed_commit(verify_tree_greedy_func, logits, hidden, tree, verify_loc, prefix_lens, n, block, interval)
        if commit is None:
            commit = verify_and_commit(
                verify_tree_greedy_func, commit_tensors, logits, hidden, tree, verify_loc, prefix_lens, n, block, interval
            )
    else:
        predicts, accept_index, accept_drafts = sample_tree(
            tree=tree,
            logits=logits,
            sampling_info=sampling_info,
            draft_input=draft_input,
            bs=bs,
            n=n,
            block=block,
            device=device,
        )
        commit = commit_tensors(accept_index, accept_drafts, predicts, verify_loc, prefix_lens, n, interval)
        commit = with_accepted(commit, accept_drafts, hidden, verify_loc, n)
    accept_drafts = commit["accept_drafts"]
    commit_lens, out_tokens, bonus = commit["commit_lens"], commit["out_tokens"], commit["bonus"]

    # Hybrid targets: commit the recurrent state of each request's last accepted node.
    if worker._need_mamba_verify_commit:
        commit_hybrid_state(worker, batch=batch, nodes=commit["nodes"], track=commit.get("track"), bs=bs)

    # --- 4) Commit the accepted path into contiguous target KV slots prefix..prefix+a.
    # One move of every request's columns 1..B-1 (request-major, columns ascending). The node
    # accepted at depth j sits at tree index a_j >= j, so no source slot is the target of an
    # earlier pair: the move is correct both when the kernel copies all pairs at once and when
    # the pool splits a long list into chunks done one after another.
    kv_pool = worker.target_worker.model_runner.token_to_kv_pool_allocator.get_kvcache()
    kv_pool.move_kv_cache(commit["move_tgt"].reshape(-1), commit["move_src"].reshape(-1))

    new_seq_lens = commit["new_seq_lens"]
    if on_publish is not None:
        on_publish(new_seq_lens)

    # --- 5) Draft KV from the accepted nodes' target hidden states, chain positions.
    compact_hidden, chain_loc_2d = commit["compact_hidden"], commit["chain_loc_2d"]
    worker._append_target_hidden_to_draft_kv_by_loc(
        target_hidden=compact_hidden,
        cache_loc=chain_loc_2d.reshape(-1),
        cache_loc_2d=chain_loc_2d,
        positions=positions_2d.reshape(-1),
        commit_lens=commit_lens,
    )
    logits_output.hidden_states = None

    worker._ddtree_steps += 1
    if worker._ddtree_steps == 1 or worker._ddtree_steps % _LOG_EVERY_STEPS == 0:
        if worker.ps.tp_rank == 0:
            logger.info(
                "DDTREE verify step %d: bs=%d tree_nodes_per_request=%d budget=%d topk=%d "
                "max_depth=%d accepted_drafts_mean=%.3f recurrent_state=%s verify=%s cuda_graph=%s",
                worker._ddtree_steps,
                bs,
                n,
                n,
                config.topk,
                int(tree["depths"].max().item()),  # a host read on logged steps only
                float(accept_drafts.float().mean().item()),
                # hybrid: per node from its parent, the accepted node's committed; dense: none
                "tree" if worker._need_mamba_verify_commit else "none",
                "sampling" if sampled else "greedy",
                on_graph,
            )

    next_draft_input = worker._make_next_draft_input_decode(bonus_tokens=bonus, new_seq_lens=new_seq_lens)
    return GenerationBatchResult(
        logits_output=logits_output,
        next_token_ids=out_tokens.reshape(-1),
        accept_lens=commit_lens,
        can_run_cuda_graph=target_out.can_run_cuda_graph,
        next_draft_input=next_draft_input,
        speculative_num_draft_tokens=block,
        new_seq_lens=new_seq_lens,
    )


def check_ddtree_target(worker) -> None:
    """Dense targets, and hybrid targets whose linear layers are Gated DeltaNet (sglang's tree kernels).

    Checked at start-up (init_attention_backends) and, once, at the first verify step.
    """
    if getattr(worker, "_ddtree_target_checked", False):
        return
    model_config = worker.target_worker.model_runner.model_config
    if mambaish_config(model_config) is not None and (
        hybrid_gdn_config(model_config) is None or not worker._need_mamba_verify_commit
    ):
        raise RuntimeError(
            "DDTREE supports dense and Gated DeltaNet hybrid targets; this target's recurrent layers "
            f"({type(model_config.hf_config).__name__}) have no tree verify in sglang."
        )
    worker._ddtree_target_checked = True


def commit_hybrid_state(worker, *, batch, nodes, track, bs):
    """Commit each request's recurrent state from the snapshot of its last accepted tree node.

    The verify forward kept one ssm state and conv window per node (intermediate_ssm /
    intermediate_conv_window, each node continuing from its parent); the backend's commit copies the
    snapshot at the given step into the request's state. ``nodes`` / ``track`` come from commit_tensors
    (ddtree_tree.commit_arrays' choices, on the device: no host read).
    """
    model_runner = worker.target_worker.model_runner
    model_runner.attn_backend.update_mamba_state_after_mtp_verify(
        last_correct_step_indices=nodes,
        mamba_track_indices=batch.mamba_track_indices,
        mamba_steps_to_track=track,
        model=model_runner.model,
        req_pool_indices=batch.req_pool_indices[:bs],
    )


def commit_eager(accept_index, accept_drafts, predicts, verify_loc, prefix_lens, budget: int, interval: int = 0):
    """The commit's bookkeeping as torch operations (ddtree_tree_kernel.commit_triton's reference).

    accept_index [bs, B] (global node ids, -1 past the accepted), accept_drafts [bs], predicts [bs * N],
    verify_loc [bs * N], prefix_lens [bs]. The KV move pairs cover every request's columns 1..B-1; the
    copy kernel reads the location arrays as contiguous memory (a column view such as verify_loc_2d[:, j]
    would be read as its neighbours in row 0), hence the contiguous copies.
    """
    bs, block = (int(x) for x in accept_index.shape)
    device = accept_index.device
    commit_lens = accept_drafts.to(torch.int32) + 1  # accepted drafts + the bonus token
    cols = torch.arange(block, device=device).view(1, block)
    live = cols < commit_lens.view(bs, 1)
    acc_global = torch.where(live, accept_index.to(torch.int64), torch.zeros_like(cols))
    out_tokens = torch.where(live, predicts.to(torch.int64)[acc_global], torch.zeros_like(cols))
    bonus = out_tokens.gather(1, (commit_lens - 1).to(torch.int64).view(bs, 1)).view(bs)
    verify_loc_2d = verify_loc.view(bs, int(budget))
    tgt = verify_loc_2d[:, 1:block].contiguous()
    src = torch.where(live[:, 1:], verify_loc[acc_global[:, 1:]], tgt)
    chosen = ddtree_tree.commit_arrays(accept_index, accept_drafts, budget, prefix_lens=prefix_lens, interval=interval)
    out = {
        "commit_lens": commit_lens,
        "out_tokens": out_tokens,
        "bonus": bonus,
        "acc_global": acc_global,
        "move_src": src.contiguous(),
        "move_tgt": tgt,
        "new_seq_lens": prefix_lens + commit_lens.to(prefix_lens.dtype),
        "nodes": chosen["nodes"],
    }
    if "track" in chosen:
        out["track"] = chosen["track"]
    return out


def commit_tensors(accept_index, accept_drafts, predicts, verify_loc, prefix_lens, budget: int, interval: int = 0):
    """commit_eager's values, from one Triton program per request where the tree builder is Triton's."""
    args = (accept_index, accept_drafts, predicts, verify_loc, prefix_lens, budget, interval)
    if _kernels_run_on(accept_index.device) and tree_builder() == "triton":
        out = _triton("commit_triton", *args)
        if out is not None:
            return out
    return commit_eager(*args)


def _self_check_inputs(config: ddtree_utils.DDTreeConfig, device, bs: int = 4, seed: int = 0):
    """Random draft top-k (ties and -inf included), roots and prefixes for one (bs, N, top-k, B), on ``device``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    depth, k = config.block_size - 1, config.topk
    values = -torch.randint(0, 6, (bs, depth, k), generator=gen).to(torch.float32) / 2  # ties at every depth
    values[torch.rand((bs, depth, k), generator=gen) < 0.1] = -float("inf")
    values = values.sort(dim=-1, descending=True).values
    offsets = torch.randint(0, 1000, (bs, depth, 1), generator=gen)
    indices = offsets + torch.arange(k).view(1, 1, k)  # distinct tokens in each top-k list
    roots = torch.randint(0, 1000, (bs,), generator=gen)
    prefix = torch.randint(0, 64, (bs,), generator=gen)
    return [t.to(device) for t in (roots, values, indices, prefix)]


def _differences(got: dict, want: dict, keys, rows=None) -> list:
    """The keys where ``got`` (Triton's) differs from ``want`` (the torch path's); ``rows`` [bs, N] bool
    limits the per-node arrays to each request's nodes."""
    bad = []
    for key in keys:
        a, b = got.get(key), want.get(key)
        if a is None or b is None or tuple(a.shape) != tuple(b.shape):
            bad.append(key)
            continue
        common = torch.float64 if a.is_floating_point() or b.is_floating_point() else torch.int64
        a, b = a.to(common), b.to(common)
        if rows is not None and a.dim() == 2 and tuple(a.shape) == tuple(rows.shape):
            a, b = a[rows], b[rows]
        if not torch.equal(a, b):
            bad.append(key)
    return bad


def _check_build(kernel, config: ddtree_utils.DDTreeConfig, device) -> str:
    """build_tree_triton against build_tree_arrays (+ full_mask) on one random batch: "equal" or "differs: keys"."""
    n = int(config.budget)
    roots, values, indices, prefix = _self_check_inputs(config, device)
    bs = int(roots.shape[0])
    mask_size = n * (int(prefix.sum()) + bs * n)
    got = kernel.build_tree_triton(roots, values, indices, n, prefix_lens=prefix, full_mask_size=mask_size)
    want = ddtree_tree.build_tree_arrays(roots, values, indices, n, prefix_lens=prefix)
    want = dict(want, full_mask=ddtree_tree.full_mask(want["ancestor_mask"], prefix, mask_size))
    bad = _tree_differences(got, want, mask_size)
    return "differs: " + ", ".join(bad) if bad else "equal"


def _check_commit(kernel, config: ddtree_utils.DDTreeConfig, device, bs: int = 4) -> str:
    """commit_triton against commit_eager on one random batch (accepted chains of every length, a track
    interval): "equal" or "differs: keys"."""
    n, block = int(config.budget), int(config.block_size)
    gen = torch.Generator(device="cpu").manual_seed(1)
    drafts = torch.randint(0, block, (bs,), generator=gen)
    cols = torch.arange(block).view(1, block)
    accept_index = torch.where(cols <= drafts.view(bs, 1), torch.arange(bs).view(bs, 1) * n + cols, -1)
    predicts = torch.randint(0, 1000, (bs * n,), generator=gen)
    verify_loc = torch.randperm(bs * n * 4, generator=gen)[: bs * n]
    prefix = torch.randint(0, 64, (bs,), generator=gen)
    args = [t.to(device) for t in (accept_index, drafts, predicts, verify_loc, prefix)]
    interval = 8  # a mamba track interval: the track choice is compared too
    got, want = kernel.commit_triton(*args, n, interval), commit_eager(*args, n, interval)
    bad = _differences(got, want, tuple(want))
    return "differs: " + ", ".join(bad) if bad else "equal"


def self_check_triton(config: ddtree_utils.DDTreeConfig, device) -> dict:
    """At start, on this GPU: Triton's tree builder and commit against the torch path on random inputs of the
    configured N, top-k and B (the programs are compiled here, before the first request). A program that
    fails or differs is retired for the server's life (the graphed array builder / the torch commit take
    over, as after a failed launch), said once; ``{name: "equal" | "differs: keys" | "failed: error"}``.
    Host reads here are at start-up only; the verify step itself stays free of them."""
    result = {}
    for name, check in (("build_tree_triton", _check_build), ("commit_triton", _check_commit)):
        try:  # a module that cannot load (no Triton) fails both checks alike
            from sglang.srt.speculative import ddtree_tree_kernel

            result[name] = check(ddtree_tree_kernel, config, device)
        except Exception as exc:  # noqa: BLE001 - the torch path gives the same values
            result[name] = "failed: %r" % (exc,)
    for name, verdict in result.items():
        if verdict != "equal":
            _triton_failed.add(name)
            logger.warning("DDTREE: Triton's %s checked at start on this GPU: %s; using the torch path for the server's life", name, verdict)
    return result


def init_ddtree(worker, server_args) -> Optional[ddtree_utils.DDTreeConfig]:
    """Called from DFlashWorkerV2.__init__: the tree config for DDTREE, None for plain DFLASH."""
    if (server_args.speculative_algorithm or "").upper() != "DDTREE":
        return None
    config = ddtree_utils.resolve_ddtree_config(int(worker.block_size))
    worker._ddtree_steps = 0
    worker._ddtree_warned_eager = False
    builder = tree_builder()  # a bad SGLANG_DDTREE_TREE_BUILDER stops the start, naming the values
    step_graph = step_graph_level()  # as does a bad SGLANG_DDTREE_STEP_GRAPH
    if worker.ps.tp_rank == 0:
        logger.info(ddtree_utils.format_budget_log(config))
        logger.info("DDTREE: tree builder %s (%s)", builder, ENV_TREE_BUILDER)
        if step_graph:
            logger.info(
                "DDTREE: draft top-k and tree build%s replayed from CUDA graphs (%s=%d)",
                " and greedy tree verify and commit" if step_graph >= 2 else "", ENV_STEP_GRAPH, step_graph,
            )  # fmt: skip
        else:
            logger.info("DDTREE: draft top-k, tree build, verify and commit launched eagerly (%s=0)", ENV_STEP_GRAPH)
    if builder == "triton" and _kernels_run_on(worker.device):
        checks = self_check_triton(config, torch.device(worker.device))
        if worker.ps.tp_rank == 0 and all(v == "equal" for v in checks.values()):
            logger.info("DDTREE: Triton's %s equal to the torch path on this GPU (checked at start)", " and ".join(checks))
    return config
