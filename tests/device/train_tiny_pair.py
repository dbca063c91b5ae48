#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Train a tiny Qwen3 target and its DFlash draft on the GPU, so that speculation has something to accept.

    python train_tiny_pair.py OUTDIR [--target-seconds 50] [--draft-seconds 50] [--device cuda]

Random weights give accept lengths of about 1 (tests/device/ddtree_check.py --make-models), which says
little about DDTREE against DFLASH. This makes a pair that has learned something, in about two minutes
on one H200, with nothing downloaded:

1. corpus: this repository's own text (Markdown, YAML, Python), one token per byte (id = byte + 16);
2. target: a 4-layer Qwen3ForCausalLM (the geometry of ddtree_check's random pair) trained as a
   byte-level language model for --target-seconds;
3. draft data: greedy continuations by the trained target of held-out corpus windows (what the
   server will be asked to do at temperature 0), with the target's hidden states;
4. draft: a 1-layer DFlash draft trained to predict block positions 1..B-1 from [last token, MASK x
   (B-1)] and the target's hidden states of the committed tokens, computed the way sglang 0.5.17's
   DFlashDraftModel and DFlashWorkerV2 compute it (context K/V = k_norm/rope of k_proj(hidden_norm(
   fc(concat of target layers 1 and 2 outputs))), block queries attend without a causal mask to the
   context before the block and to the whole block; the target's embedding and lm_head);
5. OUTDIR/target, OUTDIR/draft (sglang loads both), OUTDIR/prompts.json (8+ held-out prompts as
   token ids, for ddtree_check.py --prompts-file) and OUTDIR/train.json (losses, the draft's
   per-position top-1 / top-8 accuracy on held-out greedy data).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import random
import sys
import time

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
# The tiny pair's geometry has one owner: the random pair of the real-engine run.
from build_tiny_models import (
    HEAD_DIM,
    HEADS,
    HIDDEN,
    INTERMEDIATE,
    KV_HEADS,
    MASK_TOKEN_ID,
    TARGET_LAYER_IDS,
    VOCAB,
)
from build_tiny_models import LAYERS as TARGET_LAYERS

REPO = pathlib.Path(__file__).resolve().parents[2]
OFFSET = 16  # token id = byte + OFFSET; ids below are unused, VOCAB - 1 is the draft's mask token
EPS, ROPE_THETA = 1e-6, 1000000.0
CORPUS_GLOBS = ("docs/**/*.md", "*.md", "roles/**/*.yml", "plugins/**/*.py", "awx/**/*.yml", "tests/unit/**/*.py")


def log(msg):
    print("[train-tiny-pair] %s" % msg, flush=True)


def load_corpus(max_bytes=4_000_000):
    files = sorted({p for g in CORPUS_GLOBS for p in REPO.glob(g) if p.is_file()})
    data = bytearray()
    for path in files:
        data += path.read_bytes() + b"\n"
        if len(data) >= max_bytes:
            break
    ids = torch.tensor(list(data), dtype=torch.int64) + OFFSET
    return ids, len(files)


def target_config():
    return Qwen3Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=TARGET_LAYERS,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=4096,
        rms_norm_eps=EPS, rope_theta=ROPE_THETA, tie_word_embeddings=False, bos_token_id=15,
        eos_token_id=15, pad_token_id=15, torch_dtype="bfloat16",
    )  # fmt: skip


def batches(ids, seq, batch, gen):
    starts = torch.randint(0, ids.numel() - seq - 1, (batch,), generator=gen)
    return torch.stack([ids[s : s + seq + 1] for s in starts.tolist()])


def train_for(name, module, *, seconds, lr, weight_decay, loss_of, steps=0):
    """AdamW on ``module`` for ``steps`` steps, or (``steps`` 0) for ``seconds`` of wall time (100 warm-up steps);
    ``loss_of()`` gives a batch's loss. A step count gives the same model on a fresh machine, whose first steps
    compile, as on a warm one: a time budget does not (2026-12-06: 1778 draft steps on a fresh H100, 2612 on a
    warm one, and a tree that accepted 1.2 % more than the chain where the other pair's accepted 10.4 %)."""
    opt = torch.optim.AdamW(module.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    module.train()
    step, losses, t0 = 0, [], time.monotonic()
    while (step < steps) if steps else (time.monotonic() - t0 < seconds):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 100)
        loss = loss_of()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 200 == 0 or step == 1:
            losses.append([step, round(loss.item(), 4)])
            log("%s step %d loss %.3f (%.0fs)" % (name, step, loss.item(), time.monotonic() - t0))
    return {"steps": step, "seconds": round(time.monotonic() - t0, 1), "loss": losses}


def train_target(model, train_ids, args, device):
    gen = torch.Generator().manual_seed(args.seed)

    def loss_of():
        x = batches(train_ids, args.seq, args.batch, gen).to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = model(input_ids=x[:, :-1]).logits
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))

    return train_for(
        "target", model, seconds=args.target_seconds, lr=args.target_lr, weight_decay=0.01, loss_of=loss_of
    )


@torch.no_grad()
def greedy_data(model, ids, count, *, prompt_len, gen_len, gen, device, batch=256):
    """[count, prompt_len + gen_len] sequences: corpus windows continued greedily by the target."""
    model.eval()
    out = []
    for first in range(0, count, batch):
        n = min(batch, count - first)
        starts = torch.randint(0, ids.numel() - prompt_len, (n,), generator=gen).tolist()
        seqs = torch.stack([ids[s : s + prompt_len] for s in starts]).to(device)
        past = None
        cur = seqs
        for _ in range(gen_len):
            res = model(input_ids=cur, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = res.logits[:, -1, :].float().argmax(-1, keepdim=True)
            seqs = torch.cat((seqs, nxt), dim=1)
            cur = nxt
        out.append(seqs)
    return torch.cat(out)


@torch.no_grad()
def target_features(model, seqs):
    """Concatenated outputs of target layers 1 and 2 (sglang captures layer id + 1's input)."""
    hs = model(input_ids=seqs, output_hidden_states=True).hidden_states
    return torch.cat([hs[i + 1] for i in TARGET_LAYER_IDS], dim=-1)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * self.weight.float()).to(x.dtype)


def rope(x, pos):
    """Neox-style rotary embedding (sglang get_rope, is_neox_style=True) of x [..., T, H, D] at pos [..., T]."""
    half = HEAD_DIM // 2
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    ang = pos.float()[..., None] * inv  # [..., T, half]
    cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class DFlashDraft(torch.nn.Module):
    """One DFlash draft layer as sglang 0.5.17 runs it; parameter names are the checkpoint's."""

    def __init__(self):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(HIDDEN * len(TARGET_LAYER_IDS), HIDDEN)
        self.hidden_norm = RMSNorm(HIDDEN)
        self.norm = RMSNorm(HIDDEN)
        layer = torch.nn.Module()
        layer.input_layernorm, layer.post_attention_layernorm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
        attn = torch.nn.Module()
        attn.q_proj, attn.k_proj = lin(HIDDEN, HEADS * HEAD_DIM), lin(HIDDEN, KV_HEADS * HEAD_DIM)
        attn.v_proj, attn.o_proj = lin(HIDDEN, KV_HEADS * HEAD_DIM), lin(HEADS * HEAD_DIM, HIDDEN)
        attn.q_norm, attn.k_norm = RMSNorm(HEAD_DIM), RMSNorm(HEAD_DIM)
        mlp = torch.nn.Module()
        mlp.gate_proj, mlp.up_proj, mlp.down_proj = (
            lin(HIDDEN, INTERMEDIATE),
            lin(HIDDEN, INTERMEDIATE),
            lin(INTERMEDIATE, HIDDEN),
        )
        layer.self_attn, layer.mlp = attn, mlp
        self.layers = torch.nn.ModuleList([layer])

    def forward(self, feats, block_embeds, anchors, block):
        """feats [S, L, 2H] target features; block_embeds [S, A*B, H]; anchors [S, A] (block start n).

        Block a's queries see context keys 0..n_a-1 and the B keys of block a. Returns [S, A*B, H].
        """
        s, length, _ = feats.shape
        a = anchors.shape[1]
        attn, layer = self.layers[0].self_attn, self.layers[0]
        ctx = self.hidden_norm(self.fc(feats))  # no input_layernorm on the context (sglang)
        ctx_pos = torch.arange(length, device=feats.device).expand(s, length)
        k_ctx = rope(attn.k_norm(attn.k_proj(ctx).view(s, length, KV_HEADS, HEAD_DIM)), ctx_pos)
        v_ctx = attn.v_proj(ctx).view(s, length, KV_HEADS, HEAD_DIM)
        blk_pos = (anchors[:, :, None] + torch.arange(block, device=feats.device)).reshape(s, a * block)
        residual = block_embeds
        x = layer.input_layernorm(block_embeds)
        q = rope(attn.q_norm(attn.q_proj(x).view(s, a * block, HEADS, HEAD_DIM)), blk_pos)
        k_blk = rope(attn.k_norm(attn.k_proj(x).view(s, a * block, KV_HEADS, HEAD_DIM)), blk_pos)
        v_blk = attn.v_proj(x).view(s, a * block, KV_HEADS, HEAD_DIM)
        k = torch.cat((k_ctx, k_blk), dim=1).repeat_interleave(HEADS // KV_HEADS, dim=2)
        v = torch.cat((v_ctx, v_blk), dim=1).repeat_interleave(HEADS // KV_HEADS, dim=2)
        q_block = torch.arange(a * block, device=feats.device) // block  # which block a query is in
        q_anchor = anchors.repeat_interleave(block, 1)[:, :, None]  # each query's block start n
        ctx_ok = torch.arange(length, device=feats.device)[None, None, :] < q_anchor
        blk_ok = (q_block[:, None] == q_block[None, :]).expand(s, -1, -1)
        mask = torch.cat((ctx_ok, blk_ok), dim=2)[:, None]  # [S, 1, A*B, L + A*B]
        o = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=HEAD_DIM**-0.5
        )
        h = attn.o_proj(o.transpose(1, 2).reshape(s, a * block, HEADS * HEAD_DIM)) + residual
        residual = h
        x = layer.post_attention_layernorm(h)
        h = layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(x)) * layer.mlp.up_proj(x)) + residual
        return self.norm(h)


def draft_step_tensors(target, seqs, *, prompt_len, anchors_per_seq, block, gen):
    s, length = seqs.shape
    anchors = torch.randint(prompt_len, length - block + 1, (s, anchors_per_seq), generator=gen).to(seqs.device)
    ids = torch.full((s, anchors_per_seq, block), MASK_TOKEN_ID, dtype=torch.int64, device=seqs.device)
    ids[:, :, 0] = seqs.gather(1, anchors)
    offs = anchors[:, :, None] + torch.arange(1, block, device=seqs.device)
    labels = seqs.gather(1, offs.reshape(s, -1)).view(s, anchors_per_seq, block - 1)
    embeds = target.model.embed_tokens(ids.view(s, -1))
    return anchors, embeds, labels


def draft_logits(draft, target, feats, embeds, *, anchors, block):
    h = draft(feats, embeds, anchors, block)
    s, a = anchors.shape
    h = h.view(s, a, block, HIDDEN)[:, :, 1:, :]
    return target.lm_head(h).float()  # [S, A, B-1, V]


def train_draft(draft, target, data, feats, *, args, device):
    gen = torch.Generator().manual_seed(args.seed + 1)

    def loss_of():
        idx = torch.randint(0, data.shape[0], (args.draft_batch,), generator=gen).to(device)
        seqs, f = data[idx], feats[idx]
        anchors, embeds, labels = draft_step_tensors(
            target, seqs, prompt_len=args.prompt_len, anchors_per_seq=args.anchors, block=args.block, gen=gen
        )
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            logits = draft_logits(draft, target, f, embeds, anchors=anchors, block=args.block)
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))

    return train_for("draft", draft, seconds=args.draft_seconds, lr=args.draft_lr, weight_decay=0.0, loss_of=loss_of)


@torch.no_grad()
def draft_accuracy(draft, target, data, feats, args):
    """Per block position 1..B-1: how often the draft's top-1 / top-8 holds the target's greedy token."""
    gen = torch.Generator().manual_seed(args.seed + 2)
    seqs, f = data[: args.draft_batch], feats[: args.draft_batch]
    anchors, embeds, labels = draft_step_tensors(
        target, seqs, prompt_len=args.prompt_len, anchors_per_seq=args.anchors, block=args.block, gen=gen
    )
    with torch.autocast(device_type=seqs.device.type, dtype=torch.bfloat16):
        logits = draft_logits(draft, target, f, embeds, anchors=anchors, block=args.block)
    top = logits.topk(8, dim=-1).indices
    top1 = (top[..., 0] == labels).float().mean(dim=(0, 1))
    top8 = (top == labels[..., None]).any(-1).float().mean(dim=(0, 1))
    return {"top1": [round(x, 3) for x in top1.tolist()], "top8": [round(x, 3) for x in top8.tolist()]}


def save_draft(draft, path, block):
    os.makedirs(path, exist_ok=True)
    tensors = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in draft.state_dict().items()}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    cfg = {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3", "vocab_size": VOCAB, "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE, "num_hidden_layers": 1, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM, "hidden_act": "silu", "rms_norm_eps": EPS,
        "rope_theta": ROPE_THETA, "max_position_embeddings": 4096, "tie_word_embeddings": False,
        "torch_dtype": "bfloat16", "num_target_layers": TARGET_LAYERS, "block_size": block,
        "dflash_config": {"block_size": block, "target_layer_ids": TARGET_LAYER_IDS, "mask_token_id": MASK_TOKEN_ID},
    }  # fmt: skip
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(cfg, handle, indent=1)


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=1130)
    p.add_argument("--block", type=int, default=4, help="DFlash block size B")
    p.add_argument("--target-seconds", type=float, default=50.0)
    p.add_argument("--draft-seconds", type=float, default=50.0)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--target-lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=2e-3)
    p.add_argument("--greedy-seqs", type=int, default=1024, help="greedy continuations to train the draft on")
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=96)
    p.add_argument("--draft-batch", type=int, default=64)
    p.add_argument("--anchors", type=int, default=16, help="blocks per sequence in one draft step")
    p.add_argument("--prompts", type=int, default=8, help="held-out prompts written to prompts.json")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)
    out = pathlib.Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    ids, files = load_corpus()
    split = int(ids.numel() * 0.9)
    train_ids, held_ids = ids[:split], ids[split:]
    log("corpus: %d files, %d bytes (train %d, held out %d)" % (files, ids.numel(), split, held_ids.numel()))
    report = {"args": vars(args), "corpus_bytes": ids.numel(), "corpus_files": files}

    target = Qwen3ForCausalLM(target_config()).to(device)
    report["target"] = train_target(target, train_ids, args, device)
    target = target.to(torch.bfloat16).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        x = batches(held_ids, args.seq, 32, torch.Generator().manual_seed(7)).to(device)
        held = F.cross_entropy(target(input_ids=x[:, :-1]).logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    report["target"]["held_out_loss"] = round(held.item(), 4)
    report["target"]["held_out_bits_per_byte"] = round(held.item() / math.log(2), 3)
    log("target held-out loss %.3f (%.2f bits/byte)" % (held.item(), held.item() / math.log(2)))
    target.save_pretrained(out / "target", safe_serialization=True)

    gen = torch.Generator().manual_seed(args.seed + 3)
    t0 = time.monotonic()
    shape = {"prompt_len": args.prompt_len, "gen_len": args.gen_len, "gen": gen, "device": device}
    data = greedy_data(target, train_ids, args.greedy_seqs, **shape)
    test = greedy_data(target, held_ids, args.draft_batch, **shape)
    feats = torch.cat([target_features(target, data[i : i + 256]) for i in range(0, data.shape[0], 256)])
    test_feats = target_features(target, test)
    report["greedy_data_s"] = round(time.monotonic() - t0, 1)
    log("greedy data: %s sequences in %.1fs" % (tuple(data.shape), report["greedy_data_s"]))

    draft = DFlashDraft().to(device)
    for name, param in draft.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            torch.nn.init.normal_(param, std=0.02)
    report["draft"] = train_draft(draft, target, data, feats, args=args, device=device)
    report["draft"]["held_out_accuracy"] = draft_accuracy(draft, target, test, test_feats, args)
    log("draft held-out accuracy per block position: %s" % report["draft"]["held_out_accuracy"])
    save_draft(draft, out / "draft", args.block)

    rng = random.Random(args.seed)
    starts = [rng.randrange(0, held_ids.numel() - args.prompt_len) for _ in range(args.prompts)]
    prompts = [held_ids[s : s + args.prompt_len].tolist() for s in starts]
    (out / "prompts.json").write_text(json.dumps(prompts))
    (out / "train.json").write_text(json.dumps(report, indent=1))
    made = {"target": str(out / "target"), "draft": str(out / "draft"), "prompts": str(out / "prompts.json")}
    print(json.dumps(made))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
