# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build a tiny Qwen3 target and a DFlash draft for it, random weights, on the GPU host.

    /opt/torch/.venv/bin/python tests/device/build_tiny_models.py OUTDIR [--seed 0]

Writes OUTDIR/target (Qwen3ForCausalLM, byte-level BPE tokenizer with a chat template) and
OUTDIR/draft (DFlashDraftModel: draft layers, fc, hidden_norm, norm; no embedding, no head: it
uses the target's). Runs with the host's own transformers / tokenizers / torch (nothing carried).

The target has peaked logits, so that greedy decoding has few near-ties for bf16 rounding to
flip: token embeddings are N(0, 1) (256 dims, so two tokens' embeddings are nearly orthogonal),
the layers' output projections are small, and the head is a fixed permutation of the embedding
rows. The residual stream then stays close to the current token's embedding and the logit of
that token's successor stands far above the rest (~256 against a spread of ~16), while the small
attention / MLP contributions still make the output depend on the context. A speculative
verifier that accepted a wrong draft token would show up as a divergence far from any tie.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

HIDDEN = 256
INTERMEDIATE = 512
LAYERS = 4
HEADS = 4
KV_HEADS = 2
HEAD_DIM = 64
VOCAB = 4096
BLOCK_SIZE = 4
TARGET_LAYER_IDS = [1, 2]  # each <= LAYERS - 2
DRAFT_LAYERS = 1
MASK_TOKEN_ID = VOCAB - 1
OUTPUT_SCALE = 0.02  # std of o_proj / down_proj (the residual stays near the token embedding)
EOS = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CORPUS = (
    "The quick brown fox jumps over the lazy dog. Speculative decoding drafts a block of tokens and the "
    "target verifies them in one forward pass. A scheduler batches requests; the key value cache holds "
    "attention state for every running request. Say hi. Count from one to ten. The capital of France is "
    "Paris. Write a haiku about the sea. Explain how a GPU runs many threads at once. 0123456789 "
)


def build_tokenizer(path):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=[EOS, "<|user|>", "<|assistant|>", "<|system|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def build_target(path, seed, eos_id):
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=eos_id,
        bos_token_id=eos_id,
        pad_token_id=eos_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(("o_proj.weight", "down_proj.weight")):
                param.copy_(torch.randn(param.shape, generator=gen) * OUTPUT_SCALE)
            elif name.endswith("proj.weight"):
                param.copy_(torch.randn(param.shape, generator=gen) * (1.0 / HIDDEN**0.5))
        embed = torch.randn((VOCAB, HIDDEN), generator=gen)
        model.model.embed_tokens.weight.copy_(embed)
        perm = torch.randperm(VOCAB, generator=gen)
        # logits[j] = head[j] . h, h ~ embed[token] / rms: token t's successor is the j with perm[j] == t.
        model.lm_head.weight.copy_(embed[perm])
    model = model.to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    return config


def build_draft(path, seed, target_config):
    gen = torch.Generator().manual_seed(seed + 1)

    def randn(*shape, scale):
        return (torch.randn(shape, generator=gen) * scale).to(torch.bfloat16).contiguous()

    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)  # noqa: E731
    tensors = {}
    for i in range(DRAFT_LAYERS):
        p = "layers.%d." % i
        s = 1.0 / HIDDEN**0.5
        tensors[p + "self_attn.q_proj.weight"] = randn(HEADS * HEAD_DIM, HIDDEN, scale=s)
        tensors[p + "self_attn.k_proj.weight"] = randn(KV_HEADS * HEAD_DIM, HIDDEN, scale=s)
        tensors[p + "self_attn.v_proj.weight"] = randn(KV_HEADS * HEAD_DIM, HIDDEN, scale=s)
        tensors[p + "self_attn.o_proj.weight"] = randn(HIDDEN, HEADS * HEAD_DIM, scale=OUTPUT_SCALE)
        tensors[p + "self_attn.q_norm.weight"] = ones(HEAD_DIM)
        tensors[p + "self_attn.k_norm.weight"] = ones(HEAD_DIM)
        tensors[p + "input_layernorm.weight"] = ones(HIDDEN)
        tensors[p + "post_attention_layernorm.weight"] = ones(HIDDEN)
        tensors[p + "mlp.gate_proj.weight"] = randn(INTERMEDIATE, HIDDEN, scale=s)
        tensors[p + "mlp.up_proj.weight"] = randn(INTERMEDIATE, HIDDEN, scale=s)
        tensors[p + "mlp.down_proj.weight"] = randn(HIDDEN, INTERMEDIATE, scale=OUTPUT_SCALE)
    tensors["norm.weight"] = ones(HIDDEN)
    tensors["hidden_norm.weight"] = ones(HIDDEN)
    tensors["fc.weight"] = randn(HIDDEN, len(TARGET_LAYER_IDS) * HIDDEN, scale=1.0 / (2 * HIDDEN) ** 0.5)
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    config = {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": VOCAB,
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": DRAFT_LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": target_config.rms_norm_eps,
        "rope_theta": getattr(target_config, "rope_theta", None) or 1000000.0,
        "max_position_embeddings": 4096,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "block_size": BLOCK_SIZE,
        "num_target_layers": LAYERS,
        "dflash_config": {
            "block_size": BLOCK_SIZE,
            "target_layer_ids": TARGET_LAYER_IDS,
            "mask_token_id": MASK_TOKEN_ID,
        },
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=2, sort_keys=True)
        handle.write("\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    target = os.path.join(args.outdir, "target")
    draft = os.path.join(args.outdir, "draft")
    tokenizer = build_tokenizer(target)
    eos_id = tokenizer.convert_tokens_to_ids(EOS)
    config = build_target(target, args.seed, eos_id)
    build_draft(draft, args.seed, config)
    print(
        json.dumps(
            {
                "target": target,
                "draft": draft,
                "vocab": VOCAB,
                "tokenizer_size": len(tokenizer),
                "block_size": BLOCK_SIZE,
                "target_layer_ids": TARGET_LAYER_IDS,
                "eos_id": eos_id,
            }
        )
    )


if __name__ == "__main__":
    main()
