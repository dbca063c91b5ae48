#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ddtree patch set's verify step (ddtree_worker.py) against a toy target, on any torch (CPU is fine).

    python tests/device/ddtree_worker_sim.py [--steps 40] [--set patchsets/ddtree-0.5.17|patchsets/ddtree-0.5.23]
                                             [--sampled]   (the tree sampling path, at top_k 1)

Needs torch (not in the CI venv: e.g. `pip install torch==2.13.0` into a scratch venv). Loads the
set's own ddtree_worker.py and ddtree_utils.py with the few sglang modules they import replaced by
small stand-ins, and drives ddtree_verify_step for several requests of different lengths, step after
step, as DFlashWorkerV2 would. The stand-ins follow the set's sglang_version: 0.5.17's worker imports
verify_tree_greedy_func from eagle_utils and reads the track interval from get_exec(); 0.5.23's imports
it from kernels.ops.speculative.spec_tree, verifies through a KV location plan of its own over the N
slots (KVIndexTranslator.plan / KVLocPlan.write_ids, bound by prepare_for_verify as ForwardBatch.init_new
does), writes the draft KV at the block plan's draft ids, reads the track grid from mamba_track_grid and
may get its verify logits deferred (LogitsProcessor.is_deferred_shard / deferred_argmax).
The "target" is a toy model that really reads what the step gives it:
per tree node, its context is the committed tokens in the KV slots the step points at plus the tree
nodes the custom mask lets it see, ordered by position (positions must run 0, 1, 2, ...); its next
token is a hash of that context. The greedy tree kernel is replaced by a transcription of its
semantics (checked against ddtree_utils on the H200: tests/device/ddtree_check.py, "kernels").
The draft's top-k holds the target's true next tokens at random ranks, on and off the chain.

Checked after every step, for every request:
  - the emitted tokens are exactly the target's greedy continuation (lossless);
  - the target KV slots 0..committed-1 hold the committed tokens at positions 0..committed-1 (the
    accepted path was moved into place; rejected branches left nothing behind); the KV move reads its
    location arrays as sglang's copy kernel does, as contiguous memory (a strided column view passed
    to it moves the wrong slots: the bug the H200 replay found on 2026-11-30);
  - the draft KV written from the target's hidden states matches the committed contexts;
  - the accepted length is never below what DFLASH's chain gets from the same draft;
and, over the run, that drafts off the chain were accepted and SGLANG_DDTREE_BUDGET sets the tree size.

Hybrid runs (a Gated DeltaNet target): the toy's next token also depends on a recurrent state (an
order-dependent integer scan of the whole context, standing for the GDN ssm state, plus the last three
tokens, standing for the conv window) that the target keeps per request slot and never re-reads from
the KV. Its verify forward does what sglang's tree kernels do with the links the verify input carries
(retrieve_next_token / retrieve_next_sibling: the parent walk of causal_conv1d_update, each node from
its parent's snapshot); without links it scans the flattened tree as a chain, as sglang does under
topk 1. It keeps one snapshot per node, and update_mamba_state_after_mtp_verify copies the snapshot at
the step it is given into the slot, and the one at the interval step into the track slot. Checked too:
after every step the slot holds the scan of exactly the committed tokens, and every tracked slot the
scan of the first multiple-of-interval tokens. ``--flatten`` (the toy ignores the links) and
``--chain-commit`` (the commit takes the chain's step) show that the checks catch both mistakes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pathlib
import random
import re
import sys
import types
from types import SimpleNamespace

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]
VOCAB = 32
MASK_TOKEN = VOCAB - 1


def target_next(context):
    """The toy target's greedy next token: a hash of the whole ordered context."""
    h = 17
    for k, t in enumerate(context):
        h = (h * 1000003 + (k + 1) * (int(t) + 7)) % 2147483647
    return h % (VOCAB - 1)  # never the mask token


TRACK_INTERVAL = 5  # --mamba-track-interval of the hybrid runs


def recurrent_scan(tokens, state=17):
    """The toy GDN state after consuming tokens (order-dependent, exact)."""
    for t in tokens:
        state = (state * state * 7 + state * 3 + (int(t) + 1) * 131 + 1) % 1_000_003
    return state


def conv_window(tokens, prior=(0, 0, 0)):
    return tuple((tuple(prior) + tuple(int(t) for t in tokens))[-3:])


def hybrid_next(context):
    """The hybrid toy's greedy next token: attention part, recurrent state and conv window."""
    h = (target_next(context) * 7919 + recurrent_scan(context) * 31 + sum(conv_window(context))) % 2147483647
    return h % (VOCAB - 1)


def context_code(context):
    return [float(len(context)), float(target_next(context))]


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    return mod


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def assign_extend_cache_locs_func(*, req_pool_indices, req_to_token, start_offset, end_offset, **_kw):
    return torch.cat(
        [req_to_token[r, s:e] for r, s, e in zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist())]
    )


class DFlashVerifyInput:
    """The patched dataclass's fields (an unknown keyword is refused, as by the real one)."""

    def __init__(
        self,
        *,
        draft_token,
        positions,
        draft_token_num,
        custom_mask,
        capture_hidden_mode,
        retrieve_next_token=None,
        retrieve_next_sibling=None,
        **plan,
    ):
        # 0.5.23's dataclass has kv_loc_plan (the verify's own window); 0.5.17's has no such field.
        assert set(plan) <= ({"kv_loc_plan"} if SGLANG_VERSION[0] == "0.5.23" else set()), sorted(plan)
        self.draft_token, self.positions, self.draft_token_num = draft_token, positions, draft_token_num
        self.custom_mask, self.capture_hidden_mode = custom_mask, capture_hidden_mode
        self.retrieve_next_token, self.retrieve_next_sibling = retrieve_next_token, retrieve_next_sibling
        self.kv_loc_plan = plan.get("kv_loc_plan")

    def prepare_for_verify(self, batch, target_worker):
        fb = SimpleNamespace(spec_info=self, seq_lens=batch.seq_lens.clone(), out_cache_loc=batch.out_cache_loc)
        fb.req_pool_indices = batch.req_pool_indices
        if self.kv_loc_plan is not None:  # ForwardBatch.init_new binds the plan: its write ids are the forward's
            assert self.kv_loc_plan.read_extent == self.draft_token_num, "the plan must read the whole tree"
            fb.out_cache_loc = self.kv_loc_plan.write_ids(target_worker.model_runner.kv_index_translator)
        elif SGLANG_VERSION[0] == "0.5.23":
            raise AssertionError("0.5.23: a verify without its KV location plan writes the block's window only")
        return fb, False


class ToyPlan:
    """KVLocPlan: the iteration's write window (virtual ids) and how far its reads reach."""

    def __init__(self, *, req_pool_indices, seq_lens, seq_lens_cpu, write_virtual, read_extent):
        self.req_pool_indices, self.seq_lens, self.seq_lens_cpu = req_pool_indices, seq_lens, seq_lens_cpu
        self.write_virtual, self.read_extent = write_virtual, read_extent

    def write_ids(self, reader, *, kind=None, cols=None):
        assert cols is None
        return reader.translate(self.write_virtual)


class ToyTranslator:
    """KVIndexTranslator of a pool that names slots by their virtual ids (no unified memory)."""

    is_translating = False

    def plan(self, *, req_pool_indices, seq_lens, seq_lens_cpu, write_virtual, read_extent):
        assert torch.equal(seq_lens_cpu, seq_lens.cpu()), "the plan's host lengths are the committed prefix"
        return ToyPlan(
            req_pool_indices=req_pool_indices,
            seq_lens=seq_lens,
            seq_lens_cpu=seq_lens_cpu,
            write_virtual=write_virtual,
            read_extent=read_extent,
        )

    def translate(self, ids):
        return ids.clone()


class ToyDeferredLogits:
    """0.5.23's LogitsProcessor with defer_verify_gather: the verify logits come back as a shard."""

    def __init__(self):
        self.argmaxes = 0

    def is_deferred_shard(self, logits):
        return logits is not None

    def deferred_argmax(self, logits):
        self.argmaxes += 1
        return torch.argmax(logits, dim=-1)

    def finish_deferred_gather(self, logits):
        raise AssertionError("a greedy batch takes the deferred argmax")


def verify_tree_greedy_func(
    *,
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrieve_index,
    retrieve_next_token,
    retrieve_next_sibling,
    target_predict,
    topk=-1,
):
    """sgl_kernel.verify_tree_greedy's semantics (global node ids in accept_index / predicts)."""
    for b in range(candidates.shape[0]):
        cur, k = 0, 0
        accept_index[b, 0] = int(retrieve_index[b, 0])
        while True:
            want = int(target_predict[b, cur])
            child = int(retrieve_next_token[b, cur])
            while child >= 0 and int(candidates[b, child]) != want:
                child = int(retrieve_next_sibling[b, child])
            if child < 0:
                break
            predicts[int(retrieve_index[b, cur])] = want
            k += 1
            accept_index[b, k] = int(retrieve_index[b, child])
            cur = child
        predicts[int(retrieve_index[b, cur])] = int(target_predict[b, cur])
        accept_token_num[b] = k
    return predicts, accept_index, accept_token_num


def build_dflash_verify_target_probs(*, next_token_logits, sampling_info, draft_token_num, bs, **_kw):
    """DFLASH's target probabilities for requests at top_k 1 (how sglang samples a greedy request in a
    sampling batch): one-hot on each row's argmax, [bs, N, V]."""
    probs = torch.zeros_like(next_token_logits, dtype=torch.float32)
    probs.scatter_(1, next_token_logits.argmax(dim=-1, keepdim=True), 1.0)
    return probs.view(bs, draft_token_num, -1)


def tree_speculative_sampling_target_only(
    *,
    predicts,
    accept_index,
    accept_token_num,
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_samples_for_final_sampling,
    target_probs,
    draft_probs,
    threshold_single,
    threshold_acc,
    deterministic,
):
    """sgl_kernel's target-only tree sampling, transcribed (the keywords DFLASH's own call passes in 0.5.17):
    one coin per node against the cumulative target mass of the siblings tried; a rejected token's
    target mass goes to draft_probs; the bonus token from relu(target - draft) with the final coin."""
    assert deterministic is True and threshold_single == 1.0 and threshold_acc == 1.0
    for b in range(candidates.shape[0]):
        cur, k = 0, 0
        accept_index[b, 0] = int(retrive_index[b, 0])
        while True:
            coin = float(uniform_samples[b, cur])
            child, acc, moved = int(retrive_next_token[b, cur]), 0.0, False
            while child >= 0:
                token = int(candidates[b, child])
                acc += float(target_probs[b, cur, token])
                if coin <= acc:
                    predicts[int(retrive_index[b, cur])] = token
                    k += 1
                    accept_index[b, k] = int(retrive_index[b, child])
                    cur, moved = child, True
                    break
                draft_probs[b, cur, token] = target_probs[b, cur, token]
                child = int(retrive_next_sibling[b, child])
            if not moved:
                break
        residual = (target_probs[b, cur] - draft_probs[b, cur]).clamp(min=0)
        cdf = torch.cumsum(residual / residual.sum(), dim=0)
        u = float(uniform_samples_for_final_sampling[b])
        predicts[int(retrive_index[b, cur])] = int(torch.searchsorted(cdf, torch.tensor(u)).clamp(max=cdf.numel() - 1))
        accept_token_num[b] = k


class ToyKV:
    """Target KV pool: per slot the token and position written there (what K/V encode)."""

    def __init__(self, size):
        self.tok = torch.full((size,), -1, dtype=torch.int64)
        self.pos = torch.full((size,), -1, dtype=torch.int64)

    def move_kv_cache(self, tgt, src):
        # sglang's copy kernel (copy_all_layer_kv_cache_tiled) reads the location arrays through a
        # raw pointer, element i at base + i: a strided view (a column of a [bs, n] tensor) is read
        # as the n-stride neighbours of its first element. Read them the same way here.
        tgt, src = _as_kernel_reads(tgt), _as_kernel_reads(src)
        tok, pos = self.tok[src].clone(), self.pos[src].clone()  # gather, then scatter
        self.tok[tgt], self.pos[tgt] = tok, pos


def _as_kernel_reads(loc):
    """The values a kernel reading ``loc.numel()`` elements from ``loc.data_ptr()`` sees."""
    return torch.as_strided(loc, (loc.numel(),), (1,), loc.storage_offset())


class ToyTarget:
    def __init__(self, kv, req_to_token, *, hybrid=False, flatten=False):
        self.kv, self.req_to_token = kv, req_to_token
        self.hybrid, self.flatten = hybrid, flatten
        self.ssm, self.conv = {}, {}  # per mamba slot (= request pool index here; track slots 1000+)
        self.snapshots = None  # the last verify's [bs][node] (state, window): intermediate_ssm / conv
        self.slots = None  # the last verify's mamba cache indices (forward_metadata.mamba_cache_indices)
        self.commits = 0
        backend = SimpleNamespace(update_mamba_state_after_mtp_verify=self.update_mamba_state_after_mtp_verify)
        self.model_runner = SimpleNamespace(
            token_to_kv_pool_allocator=SimpleNamespace(get_kvcache=lambda: kv),
            model_config=SimpleNamespace(hf_config=SimpleNamespace(hybrid_gdn=hybrid), vocab_size=VOCAB),
            attn_backend=backend,
            model=None,
            kv_index_translator=ToyTranslator(),
            req_to_token_pool=SimpleNamespace(req_to_token=req_to_token),
        )

    def recurrent_verify(self, b, slot, inputs, spec):
        """sglang's tree conv + GDN kernels for one request (a chain without links)."""
        n = len(inputs)
        links = None if self.flatten else spec.retrieve_next_token
        if links is None:
            used = [i - 1 for i in range(n)]
        else:
            next_token = spec.retrieve_next_token[b].tolist()
            next_sibling = spec.retrieve_next_sibling[b].tolist()
            parent, used = [0] * n, [0] * n
            for i in range(n):  # causal_conv1d_update's one walk in node order
                used[i] = parent[i] if i > 0 else -1
                if next_token[i] != -1:
                    parent[next_token[i]] = i
                if next_sibling[i] != -1:
                    parent[next_sibling[i]] = parent[i]
        out = []
        for i in range(n):
            p = used[i]
            state, window = (self.ssm[slot], self.conv[slot]) if p < 0 else out[p]
            out.append((recurrent_scan([inputs[i]], state), conv_window([inputs[i]], window)))
        return out

    def update_mamba_state_after_mtp_verify(
        self, *, last_correct_step_indices, mamba_track_indices, mamba_steps_to_track, model, req_pool_indices
    ):
        assert self.snapshots is not None, "a commit without a verify"
        steps = last_correct_step_indices.tolist()
        assert len(steps) == len(self.slots)
        for b, slot in enumerate(self.slots):
            self.ssm[slot], self.conv[slot] = self.snapshots[b][steps[b]]
        if mamba_track_indices is not None:
            for b, step in enumerate(mamba_steps_to_track.tolist()):
                if step >= 0:
                    track = int(mamba_track_indices[b])
                    self.ssm[track], self.conv[track] = self.snapshots[b][step]
        self.commits += 1

    def forward_batch_generation(self, batch, forward_batch, is_verify, skip_attn_backend_init):
        assert batch is None and is_verify and skip_attn_backend_init
        spec = forward_batch.spec_info
        n = spec.draft_token_num
        bs = forward_batch.seq_lens.shape[0]
        tokens, positions = spec.draft_token.view(bs, n), spec.positions.view(bs, n)
        loc = forward_batch.out_cache_loc.view(bs, n)
        self.kv.tok[loc.reshape(-1)] = tokens.reshape(-1)  # the forward writes every node's K/V
        self.kv.pos[loc.reshape(-1)] = positions.reshape(-1)
        logits = torch.zeros((bs * n, VOCAB))
        hidden = torch.zeros((bs * n, 2))
        offset = 0
        if self.hybrid:
            self.slots = [int(r) for r in forward_batch.req_pool_indices.tolist()]
            self.snapshots = [self.recurrent_verify(b, self.slots[b], tokens[b].tolist(), spec) for b in range(bs)]
        for b in range(bs):
            prefix = int(forward_batch.seq_lens[b])
            width = prefix + n
            mask = spec.custom_mask[offset : offset + n * width].view(n, width)
            offset += n * width
            slots = self.req_to_token[int(forward_batch.req_pool_indices[b]), :prefix]
            for i in range(n):
                seen = [(int(self.kv.pos[s]), int(self.kv.tok[s])) for p, s in enumerate(slots.tolist()) if mask[i, p]]
                seen += [(int(positions[b, j]), int(tokens[b, j])) for j in range(n) if mask[i, prefix + j]]
                seen.sort()
                assert [p for p, _t in seen] == list(range(len(seen))), "node %d sees positions %s" % (i, seen)
                assert seen[-1] == (int(positions[b, i]), int(tokens[b, i])), "a node must see itself last"
                context = [t for _p, t in seen]
                if self.hybrid:  # attention from the KV + mask, the recurrent part from the state kernels
                    state, window = self.snapshots[b][i]
                    nxt = (target_next(context) * 7919 + state * 31 + sum(window)) % 2147483647 % (VOCAB - 1)
                else:
                    nxt = target_next(context)
                logits[b * n + i, nxt] = 10.0
                hidden[b * n + i] = torch.tensor(context_code(context))
        assert offset == spec.custom_mask.numel(), "mask layout: N rows x (prefix + N) columns per request"
        return SimpleNamespace(
            logits_output=SimpleNamespace(next_token_logits=logits, hidden_states=hidden), can_run_cuda_graph=False
        )


class Worker:
    def __init__(self, config, req_to_token, kv, *, hybrid=False, flatten=False, deferred=False):
        block = config.block_size
        self._ddtree_config = config
        self.block_size, self.device, self._need_mamba_verify_commit, self._ddtree_steps = block, "cpu", hybrid, 0
        self._ddtree_warned_eager = False  # as init_ddtree sets it (0.5.17's worker says once that a batch ran eager)
        self.ps = SimpleNamespace(tp_rank=0)
        # 0.5.23's worker: deferred verify logits, draft TP scope, the draft pool's write ids of a plan.
        self._target_logits_processor = ToyDeferredLogits() if deferred else None
        self.draft_parallel_layout = None
        self.model_runner = SimpleNamespace(
            model_config=SimpleNamespace(vocab_size=VOCAB), req_to_token_pool=SimpleNamespace(req_to_token=req_to_token)
        )
        self.target_worker = ToyTarget(kv, req_to_token, hybrid=hybrid, flatten=flatten)
        self.draft_kv = {}

    def _append_target_hidden_to_draft_kv_by_loc(
        self, *, target_hidden, cache_loc, cache_loc_2d, positions, commit_lens
    ):
        for b in range(cache_loc_2d.shape[0]):
            for j in range(int(commit_lens[b])):
                self.draft_kv[int(cache_loc_2d[b, j])] = (
                    int(positions.view(cache_loc_2d.shape)[b, j]),
                    target_hidden.view(*cache_loc_2d.shape, -1)[b, j].tolist(),
                )

    def _make_next_draft_input_decode(self, *, bonus_tokens, new_seq_lens):
        return SimpleNamespace(bonus_tokens=bonus_tokens, new_seq_lens=new_seq_lens)

    def _can_skip_verify_logits(self, batch, sampling_info):
        return sampling_info is None

    def _draft_write_ids(self, plan):
        return plan.write_ids(self.target_worker.model_runner.kv_index_translator)


def draft_hidden_for(rng, committed, bonus, block, topk, *, nxt=target_next):
    """Draft 'hidden states' (= logits through an identity lm_head): the target's true token at block
    position d gets a random rank (sometimes outside the top-k), the rest random scores."""
    seq = [*committed, bonus]
    truth = []
    for _d in range(1, block):
        truth.append(nxt(seq))
        seq.append(truth[-1])
    rows = [torch.zeros(VOCAB)]
    chain = [bonus]
    for d in range(1, block):
        scores = torch.rand(VOCAB)
        scores[MASK_TOKEN] = -5.0
        order = [t for t in torch.argsort(scores, descending=True).tolist() if t != truth[d - 1]]
        rank = rng.choice([0, 0, 1, 2, 3, topk + 2])
        order.insert(rank, truth[d - 1])
        ranked = torch.empty(VOCAB)
        ranked[torch.tensor(order)] = torch.linspace(3.0, -3.0, len(order))
        rows.append(ranked)
        chain.append(order[0])
    return torch.stack(rows), chain, truth


SGLANG_VERSION = [None]  # the loaded set's sglang_version


def load_set(set_dir, *, chain_commit=False):
    """The set's ddtree_utils and ddtree_worker, with the sglang modules they import replaced."""
    manifest = (REPO / set_dir / "patchset.yml").read_text()
    SGLANG_VERSION[0] = re.search(r'^sglang_version: "([^"]+)"', manifest, re.M).group(1)
    assert SGLANG_VERSION[0] in ("0.5.17", "0.5.23"), SGLANG_VERSION[0]
    _module("sglang").__path__ = []
    _module("sglang.srt").__path__ = []
    _module("sglang.srt.speculative").__path__ = []
    files = REPO / set_dir / "files" / "sglang" / "srt" / "speculative"
    du = _load("sglang.srt.speculative.ddtree_utils", files / "ddtree_utils.py")
    # The verify step builds its trees on the device with the set's array builder (torch here), or with its
    # Triton programs (ddtree_tree_kernel: on CUDA, or on a CPU under TRITON_INTERPRET=1) where the set has them.
    _load("sglang.srt.speculative.ddtree_tree", files / "ddtree_tree.py")
    if (files / "ddtree_tree_kernel.py").is_file():
        _load("sglang.srt.speculative.ddtree_tree_kernel", files / "ddtree_tree_kernel.py")
    _module("sglang.kernels.ops.speculative.cache_locs", assign_extend_cache_locs_func=assign_extend_cache_locs_func)
    _module("sglang.srt.model_executor.forward_batch_info", CaptureHiddenMode=SimpleNamespace(FULL="FULL"))
    _module("sglang.srt.speculative.dflash_info", DFlashVerifyInput=DFlashVerifyInput)
    _module(
        "sglang.srt.speculative.dflash_utils",
        apply_dflash_verify_logits_adjustments=lambda **_kw: None,
        build_dflash_verify_target_probs=build_dflash_verify_target_probs,  # 0.5.17's name
        build_speculative_verify_target_probs=build_dflash_verify_target_probs,  # 0.5.23's
        tree_speculative_sampling_target_only=tree_speculative_sampling_target_only,
        is_dflash_sampling_verify_available=lambda: True,
    )
    _module("sglang.srt.managers.utils", GenerationBatchResult=SimpleNamespace)
    # 0.5.17 imports the greedy tree kernel from eagle_utils, 0.5.23 from kernels.ops.speculative.spec_tree.
    _module("sglang.srt.speculative.eagle_utils", verify_tree_greedy_func=verify_tree_greedy_func)
    _module("sglang.kernels.ops.speculative.spec_tree", verify_tree_greedy_func=verify_tree_greedy_func)
    _module("sglang.srt.speculative.spec_utils", draft_tp_context=lambda _layout: contextlib.nullcontext())
    _module(
        "sglang.srt.configs.hybrid_arch",
        hybrid_gdn_config=lambda mc: mc.hf_config if getattr(mc.hf_config, "hybrid_gdn", False) else None,
        mambaish_config=lambda mc: mc.hf_config if getattr(mc.hf_config, "hybrid_gdn", False) else None,
    )
    exec_ctx = SimpleNamespace(mamba=SimpleNamespace(mamba_track_interval=TRACK_INTERVAL))
    # 0.5.23: the track grid of the tree cache's page size (page size 1 here: the interval itself).
    _module(
        "sglang.srt.runtime_context",
        get_exec=lambda: exec_ctx,
        mamba_track_grid=lambda _page: TRACK_INTERVAL,
        get_spec=lambda: SimpleNamespace(speculative_accept_threshold_single=1.0, speculative_accept_threshold_acc=1.0),
    )
    dw = _load("sglang.srt.speculative.ddtree_worker", files / "ddtree_worker.py")
    if chain_commit:  # the mistake to catch: DFLASH's chain step (accepted drafts) as the commit
        chain_commit_mistake(du, dw)
    return du, dw


def chain_commit_mistake(du, dw):
    """Make the commit take the chain's step (the number of accepted drafts) as the node to commit from, where the
    set decides it: ``ddtree_utils.commit_nodes`` on the host (0.5.23) and the device commit's ``nodes``
    (``commit_tensors``, Triton's or torch's, 0.5.17). Until 2026-12-05 only the first was replaced, and the
    control passed on 0.5.17, whose worker no longer calls it (``2026-12-05-h100-ddtree-replay-triton``)."""
    du.commit_nodes = lambda accept_index, accept_drafts, budget: [int(a) for a in accept_drafts]
    real = getattr(dw, "commit_tensors", None)
    if real is not None:

        def chain_step(accept_index, accept_drafts, *args, **kwargs):
            out = dict(real(accept_index, accept_drafts, *args, **kwargs))
            out["nodes"] = accept_drafts.to(out["nodes"].dtype).reshape(out["nodes"].shape)
            return out

        dw.commit_tensors = chain_step


def greedy(context, count, nxt=target_next):
    seq, out = list(context), []
    for _k in range(count):
        out.append(nxt(seq))
        seq.append(out[-1])
    return out


class Simulation:
    """Three requests of different prompt lengths, decoded by ddtree_verify_step step after step."""

    def __init__(self, du, dw, config, seed, *, hybrid=False, flatten=False, deferred=False, sampled=False):
        self.lm_head = SimpleNamespace(weight=torch.eye(VOCAB))  # the target's lm_head: one parameter for the run
        self.du, self.dw, self.block = du, dw, config.block_size
        # sampled: every batch has sampling (is_all_greedy False) at top_k 1, so the tree sampling path
        # runs and must still emit the target's greedy tokens.
        self.sampling_info = SimpleNamespace(is_all_greedy=False) if sampled else None
        self.hybrid = hybrid
        self.nxt = hybrid_next if hybrid else target_next
        self.topk = config.topk
        self.rng = random.Random(seed)
        torch.manual_seed(seed)
        self.prompts = [[self.rng.randrange(VOCAB - 1) for _ in range(length)] for length in (3, 7, 12)]
        self.bs, ctx = len(self.prompts), 4096
        # Scattered slots, as an allocator would hand them out.
        self.req_to_token = torch.arange(self.bs * ctx, dtype=torch.int64).view(self.bs, ctx).flip(1).contiguous()
        self.kv = ToyKV(self.bs * ctx)
        self.worker = Worker(config, self.req_to_token, self.kv, hybrid=hybrid, flatten=flatten, deferred=deferred)
        self.target = self.worker.target_worker
        self.committed = [list(p) for p in self.prompts]
        for b, p in enumerate(self.prompts):  # the prefill's KV
            self.kv.tok[self.req_to_token[b, : len(p)]] = torch.tensor(p)
            self.kv.pos[self.req_to_token[b, : len(p)]] = torch.arange(len(p))
        for b, p in enumerate(self.prompts):  # the prefill's recurrent state (slot b = request b)
            self.target.ssm[b], self.target.conv[b] = recurrent_scan(p), conv_window(p)
        self.track = {}  # request -> the multiple of TRACK_INTERVAL last tracked
        self.bonus = [self.nxt(p) for p in self.prompts]
        self.emitted = [[b] for b in self.bonus]
        self.stats = {"steps": 0, "accepted_drafts": 0, "chain_drafts": 0, "off_chain_steps": 0, "tree_nodes": set()}

    def step(self):
        drafts = [
            draft_hidden_for(self.rng, self.committed[b], self.bonus[b], self.block, self.topk, nxt=self.nxt)
            for b in range(self.bs)
        ]
        prefix = torch.tensor([len(c) for c in self.committed], dtype=torch.int64)
        block_ids = torch.full((self.bs, self.block), MASK_TOKEN, dtype=torch.int64)
        block_ids[:, 0] = torch.tensor(self.bonus)
        batch = SimpleNamespace(
            req_pool_indices=torch.arange(self.bs), seq_lens=prefix.clone(), seq_lens_cpu=prefix.clone(),
            seq_lens_sum=int(prefix.sum()), sampling_info=self.sampling_info, out_cache_loc=None,
            mamba_track_indices=torch.arange(1000, 1000 + self.bs) if self.hybrid else None,
            tree_cache=SimpleNamespace(page_size=1),
        )  # fmt: skip
        commits = self.target.commits
        extra = {}
        if SGLANG_VERSION[0] == "0.5.23":  # the block's plan: the draft forward's window prefix..prefix+B-1
            block_loc = assign_extend_cache_locs_func(
                req_pool_indices=batch.req_pool_indices, req_to_token=self.req_to_token,
                start_offset=prefix, end_offset=prefix + self.block,
            )  # fmt: skip
            extra["block_plan"] = self.target.model_runner.kv_index_translator.plan(
                req_pool_indices=batch.req_pool_indices, seq_lens=prefix, seq_lens_cpu=prefix.clone(),
                write_virtual=block_loc, read_extent=self.block,
            )  # fmt: skip
        result = self.dw.ddtree_verify_step(
            self.worker, batch=batch, draft_input=None,
            draft_hidden=torch.stack([d[0] for d in drafts]).view(self.bs * self.block, VOCAB),
            block_ids=block_ids, prefix_lens=prefix, positions_2d=prefix.view(self.bs, 1) + torch.arange(self.block),
            lm_head=self.lm_head, on_publish=None, **extra,
        )  # fmt: skip
        self.stats["steps"] += 1
        self.stats["tree_nodes"].add(int(batch.out_cache_loc.numel()) // self.bs)
        for b in range(self.bs):
            self.check_request(b, result, drafts[b], int(prefix[b]))
        if self.hybrid:
            assert self.target.commits == commits + 1, "one recurrent-state commit per verify step"
            for b in range(self.bs):
                want = (recurrent_scan(self.committed[b]), conv_window(self.committed[b]))
                assert (self.target.ssm[b], self.target.conv[b]) == want, (
                    "request %d step %d: the committed recurrent state is not that of the committed tokens"
                    % (b, self.stats["steps"])
                )
                m = len(self.committed[b]) // TRACK_INTERVAL * TRACK_INTERVAL
                if m > int(prefix[b]):  # the step crossed a multiple: the track slot holds that prefix
                    self.track[b] = m
                if b in self.track:
                    head = self.committed[b][: self.track[b]]
                    assert (self.target.ssm[1000 + b], self.target.conv[1000 + b]) == (
                        recurrent_scan(head),
                        conv_window(head),
                    ), "request %d: tracked state at %d" % (b, self.track[b])

    def check_request(self, b, result, draft, prefix):
        _rows, chain, truth = draft
        commit = int(result.accept_lens[b])
        new = result.next_token_ids[b * self.block : b * self.block + commit].tolist()
        want = greedy([*self.committed[b], self.bonus[b]], commit, self.nxt)  # lossless: the target's own
        assert new == want, "request %d step %d: emitted %s, target wants %s" % (b, self.stats["steps"], new, want)
        chain_accept = self.du.chain_accept_length(chain, truth)  # what DFLASH would accept
        assert commit - 1 >= chain_accept, "tree accepted %d < chain %d" % (commit - 1, chain_accept)
        self.stats["off_chain_steps"] += int(commit - 1 > chain_accept)
        self.stats["accepted_drafts"] += commit - 1
        self.stats["chain_drafts"] += chain_accept
        self.committed[b] = [*self.committed[b], self.bonus[b], *new[:-1]]
        self.bonus[b] = new[-1]
        self.emitted[b].extend(new)
        assert int(result.new_seq_lens[b]) == len(self.committed[b])
        assert int(result.next_draft_input.bonus_tokens[b]) == self.bonus[b]
        slots = self.req_to_token[b, : len(self.committed[b])]
        assert self.kv.tok[slots].tolist() == self.committed[b], "request %d: target KV lacks committed tokens" % b
        assert self.kv.pos[slots].tolist() == list(range(len(self.committed[b])))
        for p in range(prefix, len(self.committed[b])):
            pos, code = self.worker.draft_kv[int(self.req_to_token[b, p])]
            assert pos == p and code == context_code(self.committed[b][: p + 1]), "draft KV at position %d" % p

    def check_streams(self):
        for b, p in enumerate(self.prompts):  # the whole stream, once more from scratch
            assert self.emitted[b] == greedy(p, len(self.emitted[b]), self.nxt)


def triton_check(dw, config, *, broken):
    """The set's start-up check of its Triton programs (self_check_triton, where the set has them and they can
    run: CUDA tensors, or a CPU under TRITON_INTERPRET=1), as init_ddtree runs it: equal on this machine, or,
    with ``broken``, retired (the steps that follow then run the torch path and must stay lossless)."""
    if not hasattr(dw, "self_check_triton") or os.environ.get("TRITON_INTERPRET") != "1":
        return
    if dw.tree_builder() != "triton":
        return
    dw._triton_failed.clear()
    verdicts = dw.self_check_triton(config, torch.device("cpu"))
    want = {"build_tree_triton", "commit_triton"}
    assert set(verdicts) == want, verdicts
    if broken:
        assert all(v.startswith("differs") for v in verdicts.values()), verdicts
        assert dw._triton_failed == want, dw._triton_failed
    else:
        assert all(v == "equal" for v in verdicts.values()), verdicts
        assert not dw._triton_failed
    print("Triton start-up check B=%d N=%d topk=%d: %s" % (config.block_size, config.budget, config.topk, verdicts))


def break_triton():
    """The set's Triton programs made wrong (the sibling links, the KV move's sources shifted by one)."""
    kernel = sys.modules["sglang.srt.speculative.ddtree_tree_kernel"]
    build, commit = kernel.build_tree_triton, kernel.commit_triton

    def bad_build(*args, **kwargs):
        out = build(*args, **kwargs)
        out["next_sibling"] = out["next_sibling"] + 1
        return out

    def bad_commit(*args, **kwargs):
        out = commit(*args, **kwargs)
        out["move_src"] = out["move_src"] + 1
        return out

    kernel.build_tree_triton, kernel.commit_triton = bad_build, bad_commit


# What --break-step-graph spoils at each level: the tree graph's sibling links (1), the commit graph's bonus (2).
BROKEN_KEY = {1: ("_StepGraph", "next_sibling"), 2: ("_CommitGraph", "bonus")}


def step_graph_setup(dw, level, *, broken):
    """SGLANG_DDTREE_STEP_GRAPH=level: 0 the eager path; 1 or 2 (under TRITON_INTERPRET=1: a "graph" re-runs the
    same code on a CPU) with a small mask buffer, so that the growing prefixes make the tree graph recapture; with
    ``broken`` the level's own graph gives a wrong value (BROKEN_KEY), which its capture's check against the eager
    path must catch (every step then runs eagerly)."""
    os.environ[dw.ENV_STEP_GRAPH] = str(level)
    if not level:
        return
    assert os.environ.get("TRITON_INTERPRET") == "1", "--step-graph 1 or 2 runs under TRITON_INTERPRET=1"
    dw._MIN_MASK_CAPACITY = 64
    if broken:
        cls, key = BROKEN_KEY[level]
        run = getattr(dw, cls)._run

        def bad_run(self):
            out = run(self)
            out[key] = out[key] + 1
            return out

        getattr(dw, cls)._run = bad_run


def step_graph_verdict(dw, shapes, level, *, broken, sampled):
    """What the step graphs did over the run, checked: the tree graph captured per shape and again as prefixes
    grew, replayed on the other steps, and at level 2 the commit graph captured per shape and replayed (greedy
    batches only); or, broken, retired at the level's first capture."""
    stats, retired = dict(dw._step_graph_stats), list(dw._step_graph_retired)
    if broken:
        assert retired and "differs from the eager path in %s" % BROKEN_KEY[level][1] in retired[0], retired
        assert stats["captures" if level == 1 else "commit_captures"] == 1, stats
    else:
        assert not retired, retired
        assert stats["captures"] > shapes, (stats, shapes)  # each shape, then recaptures as the mask grew
        assert stats["replays"] > 2 * stats["captures"], stats
        if level >= 2 and not sampled:
            assert 1 <= stats["commit_captures"] and stats["commit_replays"] > 2 * stats["commit_captures"], stats
        else:
            assert stats["commit_captures"] == 0, stats
    print("step graphs (level %d): %s, retired %s" % (level, stats, retired or "never"))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="patchsets/ddtree-0.5.17")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--seed", type=int, default=1130)
    p.add_argument("--dense-only", action="store_true", help="no hybrid runs (a set without hybrid support)")
    p.add_argument("--flatten", action="store_true", help="hybrid toy ignores the tree links (must FAIL)")
    p.add_argument("--chain-commit", action="store_true", help="commit the chain's step (must FAIL)")
    p.add_argument(
        "--break-triton", action="store_true",
        help="(under TRITON_INTERPRET=1) the Triton programs give wrong values: the start-up check must retire them "
        "and every step must still be lossless on the torch path",
    )  # fmt: skip
    p.add_argument(
        "--sampled", action="store_true",
        help="every batch verified by the tree sampling path (top_k 1: must still be the target's tokens)",
    )  # fmt: skip
    p.add_argument(
        "--step-graph", type=int, nargs="?", const=1, default=None, choices=(0, 1, 2),
        help="SGLANG_DDTREE_STEP_GRAPH=0 (the eager path) or, under TRITON_INTERPRET=1, 1 (the draft top-k and tree "
        "build through the step graph's code, recaptured as the mask grows) or 2 (also the greedy verify and commit), "
        "checked; every step lossless. Unset: the set's default (2; under the interpreter only, as on a GPU host)",
    )  # fmt: skip
    p.add_argument(
        "--break-step-graph", action="store_true",
        help="with --step-graph: that level's graph gives a wrong value; its capture check must retire the graphs",
    )  # fmt: skip
    args = p.parse_args(argv)
    if args.break_step_graph and not args.step_graph:
        p.error("--break-step-graph needs --step-graph 1 or 2")
    return args


def main(argv=None):
    args = parse_args(argv)
    du, dw = load_set(args.set, chain_commit=args.chain_commit)
    if args.step_graph is not None:
        step_graph_setup(dw, args.step_graph, broken=args.break_step_graph)
    cases = [(False, 4, 16, 8), (False, 4, 4, 8), (False, 6, 24, 3), (False, 2, 9, 8)]
    if not args.dense_only:
        cases += [(True, 4, 16, 8), (True, 4, 8, 8), (True, 6, 24, 3), (True, 4, 4, 8)]
    if args.flatten or args.chain_commit:
        cases = [c for c in cases if c[0]]
    if args.break_triton:
        break_triton()
    for index, (hybrid, block, budget, topk) in enumerate(cases):
        env = {"SGLANG_DDTREE_BUDGET": str(budget), "SGLANG_DDTREE_TOPK": str(topk)}
        triton_check(dw, du.resolve_ddtree_config(block, env), broken=args.break_triton)
        # 0.5.23: every other case gets its verify logits deferred (the worker takes the deferred argmax).
        # (not with --sampled: a batch with sampling finishes the gather, as DFLASH's sampling verify does)
        deferred = SGLANG_VERSION[0] == "0.5.23" and index % 2 == 0 and not args.sampled
        sim = Simulation(
            du, dw, du.resolve_ddtree_config(block, env), args.seed + budget, hybrid=hybrid, flatten=args.flatten,
            deferred=deferred, sampled=args.sampled,
        )  # fmt: skip
        for _step in range(args.steps):
            sim.step()
        sim.check_streams()
        if deferred:
            assert sim.worker._target_logits_processor.argmaxes == args.steps
        stats = sim.stats
        nodes = sorted(stats.pop("tree_nodes"))
        print(
            "sglang %s %s%s B=%d N=%d topk=%d%s: %d steps x 3 requests lossless, tree nodes %s, drafts accepted %d "
            "(chain alone %d), steps with off-chain acceptance %d"
            % (SGLANG_VERSION[0], "hybrid" if hybrid else "dense", " sampled" if args.sampled else "", block, budget,
               topk, " (deferred logits)" if deferred else "", stats["steps"], nodes, stats["accepted_drafts"],
               stats["chain_drafts"], stats["off_chain_steps"])
        )  # fmt: skip
        assert nodes == [budget], "tree size %s, budget %d" % (nodes, budget)
        if budget > block:
            assert stats["off_chain_steps"] > 0 and stats["accepted_drafts"] > stats["chain_drafts"]
        else:
            assert stats["accepted_drafts"] == stats["chain_drafts"]  # N = B: the tree is the chain
    if args.step_graph:
        shapes = len({(c[1], c[2], c[3]) for c in cases})
        step_graph_verdict(dw, shapes, args.step_graph, broken=args.break_step_graph, sampled=args.sampled)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
