#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Train the tiny hybrid pair (Gated DeltaNet target + DFlash draft) on the GPU, so that drafts get accepted.

    python train_tiny_hybrid_pair.py OUTDIR [--target-seconds 60 | --target-steps N]
        [--draft-seconds 45 | --draft-steps M] [--device cuda]

The hybrid counterpart of train_tiny_pair.py (the dense pair), with the pair of
build_tiny_models.build_hybrid_pair (its configs, tokenizer and Qwen3-VL processor, unchanged):

1. corpus: this repository's own text, one token per byte (id = byte + 16; train_tiny_pair's corpus);
2. target: the Qwen3_5ForConditionalGeneration of build_hybrid_pair (8 text layers, 6 Gated DeltaNet +
   2 gated attention in Qwen3.6-27B's per-layer geometry), fresh transformers init, trained as a
   byte-level language model for --target-seconds (or --target-steps) with transformers' own modeling on the GPU (its
   torch Gated DeltaNet path: chunked scan, no fla / causal_conv1d needed);
3. draft data: greedy continuations of corpus windows by the trained target (full recompute per
   token, no cache), with the target's layer 1, 3, 5 outputs (sglang captures layer id + 1's input);
4. draft: the 2-layer DFlash draft of hybrid_draft_config ([sliding_attention, full_attention],
   32 / 8 heads of 128, window 64, rope theta 1e7) trained to predict block positions 1..B-1 from
   [last token, MASK x (B-1)] and the context features, as sglang 0.5.17's DFlashDraftModel runs it:
   context K/V = k_norm/rope(k_proj(hidden_norm(fc(features)))) for every layer; the sliding layer is
   causal inside the block and sees the last 63 context positions (sglang's window_left = window - 1);
   the full layer sees all context and the whole block (non-causal); the target's embedding and head;
5. OUTDIR/hybrid-target, OUTDIR/hybrid-draft (sglang loads both), OUTDIR/prompts.json (held-out
   prompts as token ids for ddtree_check.py --prompts-file), OUTDIR/train.json (losses, held-out
   bits per byte, the draft's per-position top-1 / top-8 accuracy on held-out greedy data).
Prints one JSON line {"target", "draft", "prompts"} (the run-ddtree --hybrid --train-pair contract).
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import build_tiny_models as btm
from train_tiny_pair import batches, load_corpus, train_for

DRAFT = btm.hybrid_draft_config()
HIDDEN = DRAFT["hidden_size"]
HEADS, KV_HEADS, HEAD_DIM = DRAFT["num_attention_heads"], DRAFT["num_key_value_heads"], DRAFT["head_dim"]
INTERMEDIATE = DRAFT["intermediate_size"]
ROPE_THETA = float(DRAFT["rope_theta"])
EPS = float(DRAFT["rms_norm_eps"])
WINDOW_LEFT = int(DRAFT["sliding_window"]) - 1  # sglang: "HF sliding windows include the current token"
LAYER_TYPES = list(DRAFT["layer_types"])
TARGET_LAYER_IDS = list(DRAFT["dflash_config"]["target_layer_ids"])
MASK_TOKEN_ID = int(DRAFT["dflash_config"]["mask_token_id"])
VOCAB = btm.HY_VOCAB


def log(msg):
    print("[train-tiny-hybrid-pair] %s" % msg, flush=True)


# --- the target: transformers' Qwen3.5 modeling ------------------------------------------------------


def new_target(target_dir, seed, device):
    """A fresh Qwen3_5ForConditionalGeneration with the saved pair's config (transformers' own init)."""
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration  # noqa: PLC0415 - newer transformers

    config = Qwen3_5Config.from_pretrained(target_dir)
    torch.manual_seed(seed)
    # fp32 master weights throughout (the config's dtype would make the GDN's gated norm bf16 already);
    # autocast runs the matmuls in bf16 on the GPU, and the trained model is saved in bf16.
    return Qwen3_5ForConditionalGeneration(config).to(device=device, dtype=torch.float32)


def text_parts(model):
    """(text model, lm_head): the language model inside the conditional-generation class."""
    return model.model.language_model, model.lm_head


def target_logits(model, ids):
    text, head = text_parts(model)
    return head(text(input_ids=ids).last_hidden_state)


def schedule(args, name):
    """train_for's budget and learning rate for ``name`` (target or draft): --NAME-steps, else --NAME-seconds."""
    return {
        "seconds": getattr(args, name + "_seconds"),
        "steps": getattr(args, name + "_steps"),
        "lr": getattr(args, name + "_lr"),
    }


def train_target(model, train_ids, args, device):
    gen = torch.Generator().manual_seed(args.seed)
    text, head = text_parts(model)
    params = [*text.parameters(), *head.parameters()]  # the vision tower is never used on text

    def loss_of():
        x = batches(train_ids, args.seq, args.batch, gen).to(device)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = head(text(input_ids=x[:, :-1]).last_hidden_state)
        return F.cross_entropy(logits.float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))

    holder = torch.nn.ParameterList(params)
    return train_for("target", holder, weight_decay=0.01, loss_of=loss_of, **schedule(args, "target"))


@torch.no_grad()
def greedy_data(model, ids, count, *, prompt_len, gen_len, gen, device, batch):
    """[count, prompt_len + gen_len]: corpus windows continued greedily by the target (no cache)."""
    out = []
    for first in range(0, count, batch):
        n = min(batch, count - first)
        starts = torch.randint(0, ids.numel() - prompt_len, (n,), generator=gen).tolist()
        seqs = torch.stack([ids[s : s + prompt_len] for s in starts]).to(device)
        for _ in range(gen_len):
            with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                nxt = target_logits(model, seqs)[:, -1, :].float().argmax(-1, keepdim=True)
            seqs = torch.cat((seqs, nxt), dim=1)
        out.append(seqs)
    return torch.cat(out)


@torch.no_grad()
def target_features(model, seqs):
    """Concatenated outputs of the target layers TARGET_LAYER_IDS: hidden_states[i + 1] (0 = embeddings)."""
    text, _ = text_parts(model)
    with torch.autocast(device_type=seqs.device.type, dtype=torch.bfloat16, enabled=seqs.device.type == "cuda"):
        hs = text(input_ids=seqs, output_hidden_states=True).hidden_states
    if len(hs) != btm.HY_LAYERS + 1:
        raise RuntimeError("expected %d hidden states (embeddings + layers), got %d" % (btm.HY_LAYERS + 1, len(hs)))
    return torch.cat([hs[i + 1] for i in TARGET_LAYER_IDS], dim=-1)


# --- the draft: sglang 0.5.17's DFlashDraftModel in plain torch ---------------------------------------


class RMSNorm(torch.nn.Module):
    """sglang's RMSNorm (x * w, w initialised to 1); the checkpoint stores w."""

    def __init__(self, dim):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + EPS) * self.weight.float()).to(x.dtype)


def rope(x, pos):
    """Neox-style rotary embedding over the whole head (sglang get_rope, rotary_dim = head_dim)."""
    half = HEAD_DIM // 2
    inv = 1.0 / (ROPE_THETA ** (torch.arange(0, half, device=x.device, dtype=torch.float32) / half))
    ang = pos.float()[..., None] * inv
    cos, sin = ang.cos()[..., None, :], ang.sin()[..., None, :]
    x1, x2 = x.float()[..., :half], x.float()[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def layer_mask(layer_type, anchors, length, block):
    """[S, A*B, L + A*B] boolean: which keys (context 0..L-1, then every block's keys) each query sees.

    Block a starts at position n_a = anchors[:, a]; its query j sits at n_a + j. Context: positions < n_a
    (full_attention), and for sliding_attention also >= n_a + j - WINDOW_LEFT. Block keys: the query's own
    block, all of it (full_attention, sglang ENCODER_ONLY) or up to itself (sliding_attention, DECODER).
    """
    s, a = anchors.shape
    dev = anchors.device
    j = torch.arange(block, device=dev).repeat(a)  # each query's index inside its block
    q_block = torch.arange(a * block, device=dev) // block
    q_anchor = anchors.repeat_interleave(block, 1)[:, :, None]  # [S, A*B, 1]
    ctx = torch.arange(length, device=dev)[None, None, :]
    ctx_ok = ctx < q_anchor
    same = (q_block[:, None] == q_block[None, :])[None]
    if layer_type == "sliding_attention":
        ctx_ok = ctx_ok & (ctx >= q_anchor + j[None, :, None] - WINDOW_LEFT)
        same = same & (j[None, :] <= j[:, None])[None]
    elif layer_type != "full_attention":
        raise ValueError("unknown draft layer type %r" % layer_type)
    return torch.cat((ctx_ok, same.expand(s, -1, -1)), dim=2)


class DFlashDraft(torch.nn.Module):
    """The tiny hybrid pair's DFlash draft as sglang 0.5.17 runs it; parameter names are the checkpoint's."""

    def __init__(self):
        super().__init__()
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.fc = lin(HIDDEN * len(TARGET_LAYER_IDS), HIDDEN)
        self.hidden_norm = RMSNorm(HIDDEN)
        self.norm = RMSNorm(HIDDEN)
        self.layers = torch.nn.ModuleList()
        for _ in LAYER_TYPES:
            layer = torch.nn.Module()
            layer.input_layernorm, layer.post_attention_layernorm = RMSNorm(HIDDEN), RMSNorm(HIDDEN)
            attn = torch.nn.Module()
            attn.q_proj, attn.k_proj = lin(HIDDEN, HEADS * HEAD_DIM), lin(HIDDEN, KV_HEADS * HEAD_DIM)
            attn.v_proj, attn.o_proj = lin(HIDDEN, KV_HEADS * HEAD_DIM), lin(HEADS * HEAD_DIM, HIDDEN)
            attn.q_norm, attn.k_norm = RMSNorm(HEAD_DIM), RMSNorm(HEAD_DIM)
            mlp = torch.nn.Module()
            mlp.gate_proj, mlp.up_proj = lin(HIDDEN, INTERMEDIATE), lin(HIDDEN, INTERMEDIATE)
            mlp.down_proj = lin(INTERMEDIATE, HIDDEN)
            layer.self_attn, layer.mlp = attn, mlp
            self.layers.append(layer)

    def forward(self, feats, block_embeds, anchors, block):
        """feats [S, L, 3H] target features; block_embeds [S, A*B, H]; anchors [S, A]. Returns [S, A*B, H]."""
        s, length, _ = feats.shape
        a = anchors.shape[1]
        dev = feats.device
        # The frozen target's tensors are bf16; the draft trains in fp32 (autocast makes the matmuls bf16).
        feats, block_embeds = feats.to(self.fc.weight.dtype), block_embeds.to(self.fc.weight.dtype)
        ctx = self.hidden_norm(self.fc(feats))  # the context keys: no input_layernorm (sglang)
        ctx_pos = torch.arange(length, device=dev).expand(s, length)
        blk_pos = (anchors[:, :, None] + torch.arange(block, device=dev)).reshape(s, a * block)
        h, residual = block_embeds, None
        for layer, layer_type in zip(self.layers, LAYER_TYPES):
            attn = layer.self_attn
            residual = h if residual is None else h + residual
            x = layer.input_layernorm(residual)
            k_ctx = rope(attn.k_norm(attn.k_proj(ctx).view(s, length, KV_HEADS, HEAD_DIM)), ctx_pos)
            v_ctx = attn.v_proj(ctx).view(s, length, KV_HEADS, HEAD_DIM)
            q = rope(attn.q_norm(attn.q_proj(x).view(s, a * block, HEADS, HEAD_DIM)), blk_pos)
            k_blk = rope(attn.k_norm(attn.k_proj(x).view(s, a * block, KV_HEADS, HEAD_DIM)), blk_pos)
            v_blk = attn.v_proj(x).view(s, a * block, KV_HEADS, HEAD_DIM)
            k = torch.cat((k_ctx, k_blk), dim=1).repeat_interleave(HEADS // KV_HEADS, dim=2)
            v = torch.cat((v_ctx, v_blk), dim=1).repeat_interleave(HEADS // KV_HEADS, dim=2)
            mask = layer_mask(layer_type, anchors, length, block)[:, None]
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=HEAD_DIM**-0.5
            )
            h = attn.o_proj(o.transpose(1, 2).reshape(s, a * block, HEADS * HEAD_DIM))
            residual = h + residual
            x = layer.post_attention_layernorm(residual)
            h = layer.mlp.down_proj(F.silu(layer.mlp.gate_proj(x)) * layer.mlp.up_proj(x))
        return self.norm(h + residual)


def draft_step_tensors(embed, seqs, *, prompt_len, anchors_per_seq, block, gen):
    s, length = seqs.shape
    anchors = torch.randint(prompt_len, length - block + 1, (s, anchors_per_seq), generator=gen).to(seqs.device)
    ids = torch.full((s, anchors_per_seq, block), MASK_TOKEN_ID, dtype=torch.int64, device=seqs.device)
    ids[:, :, 0] = seqs.gather(1, anchors)
    offs = anchors[:, :, None] + torch.arange(1, block, device=seqs.device)
    labels = seqs.gather(1, offs.reshape(s, -1)).view(s, anchors_per_seq, block - 1)
    return anchors, embed(ids.view(s, -1)), labels


def draft_logits(draft, head, feats, embeds, *, anchors, block):
    h = draft(feats, embeds, anchors, block)
    s, a = anchors.shape
    return head(h.view(s, a, block, HIDDEN)[:, :, 1:, :].to(head.weight.dtype)).float()  # [S, A, B-1, V]


def train_draft(draft, model, data, feats, *, args, device):
    gen = torch.Generator().manual_seed(args.seed + 1)
    text, head = text_parts(model)

    def loss_of():
        idx = torch.randint(0, data.shape[0], (args.draft_batch,), generator=gen).to(device)
        anchors, embeds, labels = draft_step_tensors(
            text.embed_tokens, data[idx], prompt_len=args.prompt_len, anchors_per_seq=args.anchors,
            block=args.block, gen=gen,
        )  # fmt: skip
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            logits = draft_logits(draft, head, feats[idx], embeds, anchors=anchors, block=args.block)
        return F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))

    return train_for("draft", draft, weight_decay=0.0, loss_of=loss_of, **schedule(args, "draft"))


@torch.no_grad()
def draft_accuracy(draft, model, data, feats, args):
    """Per block position 1..B-1: how often the draft's top-1 / top-8 holds the target's greedy token."""
    gen = torch.Generator().manual_seed(args.seed + 2)
    text, head = text_parts(model)
    anchors, embeds, labels = draft_step_tensors(
        text.embed_tokens, data, prompt_len=args.prompt_len, anchors_per_seq=args.anchors, block=args.block, gen=gen
    )
    with torch.autocast(device_type=data.device.type, dtype=torch.bfloat16, enabled=data.device.type == "cuda"):
        logits = draft_logits(draft, head, feats, embeds, anchors=anchors, block=args.block)
    top = logits.topk(8, dim=-1).indices
    top1 = (top[..., 0] == labels).float().mean(dim=(0, 1))
    top8 = (top == labels[..., None]).any(-1).float().mean(dim=(0, 1))
    return {"top1": [round(x, 3) for x in top1.tolist()], "top8": [round(x, 3) for x in top8.tolist()]}


def save_draft(draft, path):
    """The draft's weights (bf16) under the names build_hybrid_draft writes; its config is left as built."""
    tensors = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in draft.state_dict().items()}
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("outdir")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--seed", type=int, default=1202)
    p.add_argument("--target-seconds", type=float, default=60.0)
    p.add_argument("--draft-seconds", type=float, default=45.0)
    p.add_argument("--target-steps", type=int, default=0, help="train the target this many steps (not seconds)")
    p.add_argument("--draft-steps", type=int, default=0, help="train the draft this many steps (not seconds)")
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--target-lr", type=float, default=2e-3)
    p.add_argument("--draft-lr", type=float, default=2e-3)
    p.add_argument("--greedy-seqs", type=int, default=768, help="greedy continuations to train the draft on")
    p.add_argument("--greedy-batch", type=int, default=256)
    p.add_argument("--prompt-len", type=int, default=32)
    p.add_argument("--gen-len", type=int, default=96)
    p.add_argument("--draft-batch", type=int, default=48)
    p.add_argument("--anchors", type=int, default=16, help="blocks per sequence in one draft step")
    p.add_argument("--prompts", type=int, default=8, help="held-out prompts written to prompts.json")
    p.add_argument("--max-corpus-bytes", type=int, default=4_000_000)
    p.add_argument("--block", type=int, default=int(DRAFT["block_size"]), help="the draft's block size B")
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    out = pathlib.Path(args.outdir)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    made = btm.build_hybrid_pair(
        str(out), seed=args.seed, block_size=args.block
    )  # configs, tokenizer, processor, random weights
    ids, files = load_corpus(args.max_corpus_bytes)
    split = int(ids.numel() * 0.9)
    train_ids, held_ids = ids[:split], ids[split:]
    log("corpus: %d files, %d bytes (train %d, held out %d)" % (files, ids.numel(), split, held_ids.numel()))
    report = {"args": vars(args), "corpus_bytes": ids.numel(), "corpus_files": files}

    model = new_target(made["target"], args.seed, device)
    report["target"] = train_target(model, train_ids, args, device)
    model = model.to(torch.bfloat16).eval()
    for param in model.parameters():
        param.requires_grad_(False)
    with torch.no_grad():
        x = batches(held_ids, args.seq, 16, torch.Generator().manual_seed(7)).to(device)
        held = F.cross_entropy(target_logits(model, x[:, :-1]).float().reshape(-1, VOCAB), x[:, 1:].reshape(-1))
    report["target"]["held_out_loss"] = round(held.item(), 4)
    report["target"]["held_out_bits_per_byte"] = round(held.item() / math.log(2), 3)
    log("target held-out loss %.3f (%.2f bits/byte)" % (held.item(), held.item() / math.log(2)))
    model.save_pretrained(made["target"], safe_serialization=True)

    gen = torch.Generator().manual_seed(args.seed + 3)
    t0 = time.monotonic()
    shape = {"prompt_len": args.prompt_len, "gen_len": args.gen_len, "gen": gen, "device": device}
    data = greedy_data(model, train_ids, args.greedy_seqs, batch=args.greedy_batch, **shape)
    test = greedy_data(model, held_ids, args.draft_batch, batch=args.greedy_batch, **shape)
    chunk = args.greedy_batch
    feats = torch.cat([target_features(model, data[i : i + chunk]) for i in range(0, data.shape[0], chunk)])
    test_feats = target_features(model, test)
    report["greedy_data_s"] = round(time.monotonic() - t0, 1)
    log("greedy data: %s sequences in %.1fs" % (tuple(data.shape), report["greedy_data_s"]))

    draft = DFlashDraft().to(device)
    for name, param in draft.named_parameters():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            torch.nn.init.normal_(param, std=0.02)
    report["draft"] = train_draft(draft, model, data, feats, args=args, device=device)
    report["draft"]["held_out_accuracy"] = draft_accuracy(draft, model, test, test_feats, args)
    log("draft held-out accuracy per block position: %s" % report["draft"]["held_out_accuracy"])
    save_draft(draft, made["draft"])

    rng = random.Random(args.seed)
    starts = [rng.randrange(0, held_ids.numel() - args.prompt_len) for _ in range(args.prompts)]
    prompts = [held_ids[s : s + args.prompt_len].tolist() for s in starts]
    (out / "prompts.json").write_text(json.dumps(prompts))
    report["wall_s"] = round(time.monotonic() - t_start, 1)
    (out / "train.json").write_text(json.dumps(report, indent=1))
    print(json.dumps({"target": made["target"], "draft": made["draft"], "prompts": str(out / "prompts.json")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
