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
import shutil

# The hybrid configs (hybrid_target_config, hybrid_draft_config, real_27b_configs) are plain dicts
# that a CPU test reads where torch / tokenizers / transformers are not installed; building any
# model needs them (_need_ml says which one is missing).
try:
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
except ImportError as _missing:
    _ML_MISSING = _missing
else:
    _ML_MISSING = None

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


def _need_ml():
    if _ML_MISSING is not None:
        raise SystemExit("building the tiny models needs torch, tokenizers and transformers: %s" % _ML_MISSING)


def build_tokenizer(path, extra_special_tokens=()):
    _need_ml()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1024,
        special_tokens=[EOS, "<|user|>", "<|assistant|>", "<|system|>", *extra_special_tokens],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([CORPUS] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS, unk_token=None)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(path)
    return fast


def build_target(path, seed, eos_id):
    _need_ml()
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
    _need_ml()
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


# --- the hybrid pair: the mission's architecture (Qwen3.6-27B + its DFlash draft), tiny -----------
# Target: Qwen3_5ForConditionalGeneration (a vision tower + a qwen3_5_text text model). The text layers
# keep the real per-layer geometry (Gated DeltaNet: 16 key / 48 value heads of 128, conv kernel 4,
# fp32 ssm state; gated attention: 24 query / 4 KV heads of 256, partial rotary 0.25, interleaved
# mrope [11, 11, 10]), so the GDN and attention kernels are the ones the 27B runs; only the width,
# the depth and the vocabulary are small. full_attention_interval 4 over 8 layers: two groups of
# [3 x GDN + 1 attention]. The draft keeps the real draft's attention geometry (32 / 8 heads of 128)
# and its layer pattern (sliding ... full), and reads target layers spread from 1 to L - 3 as the
# real draft's [1, 16, 31, 46, 61] spread over 64 layers.
HY_HIDDEN = 256
HY_INTERMEDIATE = 512
HY_LAYERS = 8
HY_FULL_ATTENTION_INTERVAL = 4
HY_VOCAB = 4096
HY_DRAFT_LAYERS = 2
HY_DRAFT_LAYER_TYPES = ["sliding_attention", "full_attention"]
HY_SLIDING_WINDOW = 64
HY_BLOCK_SIZE = 4
HY_TARGET_LAYER_IDS = [1, 3, 5]  # each <= HY_LAYERS - 2
HY_MASK_TOKEN_ID = HY_VOCAB - 1
# The vision placeholder tokens a Qwen3-VL processor looks up in the tokenizer.
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
# Qwen3.6-27B / Qwen3.6-27B-DFlash (public config.json): the geometry of the dummy-weight runs.
REAL_27B = {"hidden": 5120, "intermediate": 17408, "layers": 64, "vocab": 248320}
REAL_DRAFT = {"layers": 5, "target_layer_ids": [1, 16, 31, 46, 61], "mask_token_id": 248070, "block_size": 16}


def _layer_types(layers, interval):
    return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(layers)]


def qwen3_5_text_config(*, hidden, intermediate, layers, vocab, eos_id=None, max_positions=4096):
    """A qwen3_5_text config dict in Qwen3.6-27B's layout (per-layer geometry of the real model)."""
    return {
        "model_type": "qwen3_5_text",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "full_attention_interval": HY_FULL_ATTENTION_INTERVAL,
        "layer_types": _layer_types(layers, HY_FULL_ATTENTION_INTERVAL),
        "num_attention_heads": 24,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "attn_output_gate": True,
        "partial_rotary_factor": 0.25,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10000000,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 48,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32",
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "max_position_embeddings": max_positions,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "eos_token_id": eos_id,
        "dtype": "bfloat16",
    }


def qwen3_5_config(text_config, vision_config, token_ids):
    """The conditional-generation config.json dict around a text config and a vision tower."""
    return {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": text_config,
        "vision_config": vision_config,
        "image_token_id": token_ids["<|image_pad|>"],
        "video_token_id": token_ids["<|video_pad|>"],
        "vision_start_token_id": token_ids["<|vision_start|>"],
        "vision_end_token_id": token_ids["<|vision_end|>"],
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
    }


def hybrid_target_config(token_ids=None, eos_id=0):
    """The tiny hybrid target's config.json dict (token_ids: the vision tokens' ids in the tokenizer)."""
    token_ids = token_ids or {name: 4 + i for i, name in enumerate(VISION_TOKENS)}
    text = qwen3_5_text_config(
        hidden=HY_HIDDEN, intermediate=HY_INTERMEDIATE, layers=HY_LAYERS, vocab=HY_VOCAB, eos_id=eos_id
    )
    vision = {
        "model_type": "qwen3_5",
        "depth": 1,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_heads": 2,
        "in_channels": 3,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": HY_HIDDEN,
        "num_position_embeddings": 64,
        "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": [],
    }
    return qwen3_5_config(text, vision, token_ids)


def dflash_draft_config(*, hidden, intermediate, layers, layer_types, sliding_window, vocab, block_size,
                        target_layers, target_layer_ids, mask_token_id, max_positions=4096):  # fmt: skip
    """A DFlashDraftModel config.json dict (the attention geometry of Qwen3.6-27B-DFlash)."""
    return {
        "architectures": ["DFlashDraftModel"],
        "model_type": "qwen3",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "layer_types": list(layer_types),
        "sliding_window": sliding_window,
        "use_sliding_window": True,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000000,
        "max_position_embeddings": max_positions,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "block_size": block_size,
        "num_target_layers": target_layers,
        "dflash_config": {
            "block_size": block_size,
            "target_layer_ids": list(target_layer_ids),
            "mask_token_id": mask_token_id,
        },
    }


def hybrid_draft_config(hidden=HY_HIDDEN, block_size=HY_BLOCK_SIZE):
    """The tiny hybrid draft's config.json dict (hidden: another width makes a mismatched draft)."""
    return dflash_draft_config(
        hidden=hidden, intermediate=HY_INTERMEDIATE, layers=HY_DRAFT_LAYERS, layer_types=HY_DRAFT_LAYER_TYPES,
        sliding_window=HY_SLIDING_WINDOW, vocab=HY_VOCAB, block_size=block_size, target_layers=HY_LAYERS,
        target_layer_ids=HY_TARGET_LAYER_IDS, mask_token_id=HY_MASK_TOKEN_ID,
    )  # fmt: skip


def real_27b_configs(eos_id=None):
    """(conditional-generation config, text-class config, draft config) of Qwen3.6-27B's geometry.

    The vision tower is the real one's shape (27 blocks of 1152); the token ids are placeholders
    inside the vocabulary (the dummy-weight runs send token ids, never images).
    """
    r = REAL_27B
    text = qwen3_5_text_config(hidden=r["hidden"], intermediate=r["intermediate"], layers=r["layers"],
                               vocab=r["vocab"], eos_id=eos_id, max_positions=262144)  # fmt: skip
    vision = {
        "model_type": "qwen3_5", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "num_heads": 16,
        "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "out_hidden_size": r["hidden"], "num_position_embeddings": 2304, "hidden_act": "gelu_pytorch_tanh",
        "deepstack_visual_indexes": [],
    }  # fmt: skip
    ids = {"<|vision_start|>": 248053, "<|vision_end|>": 248054, "<|image_pad|>": 248056, "<|video_pad|>": 248057}
    conditional = qwen3_5_config(text, vision, ids)
    causal = dict(text, architectures=["Qwen3_5ForCausalLM"])
    draft = dflash_draft_config(
        hidden=r["hidden"], intermediate=r["intermediate"], layers=REAL_DRAFT["layers"],
        layer_types=["sliding_attention"] * (REAL_DRAFT["layers"] - 1) + ["full_attention"], sliding_window=2048,
        vocab=r["vocab"], block_size=REAL_DRAFT["block_size"], target_layers=r["layers"],
        target_layer_ids=REAL_DRAFT["target_layer_ids"], mask_token_id=REAL_DRAFT["mask_token_id"],
        max_positions=262144,
    )  # fmt: skip
    return conditional, causal, draft


def _write_json(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(data, handle, indent=2, sort_keys=True)
        handle.write("\n")


def _peak(model, embed_module, head_module, gen, output_names):
    """Peaked logits (the dense pair's recipe): N(0, 1) embeddings, the head a permutation of them,
    small output projections, every other projection 1/sqrt(fan_in); norms keep the class's init."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "visual" in name or param.dim() != 2 or name.endswith(("embed_tokens.weight", "lm_head.weight")):
                continue
            scale = OUTPUT_SCALE if name.endswith(output_names) else 1.0 / param.shape[1] ** 0.5
            param.copy_(torch.randn(param.shape, generator=gen) * scale)
        vocab, hidden = embed_module.weight.shape
        embed = torch.randn((vocab, hidden), generator=gen)
        embed_module.weight.copy_(embed)
        head_module.weight.copy_(embed[torch.randperm(vocab, generator=gen)])


def build_hybrid_target(path, seed, tokenizer):
    _need_ml()
    from transformers import Qwen3_5Config, Qwen3_5ForConditionalGeneration  # noqa: PLC0415 - newer transformers only

    token_ids = {name: tokenizer.convert_tokens_to_ids(name) for name in VISION_TOKENS}
    config_dict = hybrid_target_config(token_ids, eos_id=tokenizer.convert_tokens_to_ids(EOS))
    config = Qwen3_5Config(**{k: v for k, v in config_dict.items() if k != "model_type"})
    torch.manual_seed(seed)
    model = Qwen3_5ForConditionalGeneration(config)
    gen = torch.Generator().manual_seed(seed)
    text = model.model.language_model
    _peak(model, text.embed_tokens, model.lm_head, gen, ("o_proj.weight", "down_proj.weight", "out_proj.weight"))
    model = model.to(torch.bfloat16)
    model.save_pretrained(path, safe_serialization=True)
    return config_dict


def save_vl_processor(path, tokenizer):
    """A Qwen3-VL processor (image + video processor + the tokenizer), so that the real class's
    multimodal processor loads (sglang 0.5.17 looks one up for Qwen3_5ForConditionalGeneration)."""
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor  # noqa: PLC0415 - newer transformers only
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor  # noqa: PLC0415

    processor = Qwen3VLProcessor(
        image_processor=Qwen2VLImageProcessor(), tokenizer=tokenizer, video_processor=Qwen3VLVideoProcessor()
    )
    processor.save_pretrained(path)


def build_hybrid_draft(path, seed, hidden=HY_HIDDEN, block_size=HY_BLOCK_SIZE):
    _need_ml()
    config = hybrid_draft_config(hidden, block_size)
    gen = torch.Generator().manual_seed(seed + 1)

    def randn(*shape, scale):
        return (torch.randn(shape, generator=gen) * scale).to(torch.bfloat16).contiguous()

    def ones(n):
        return torch.ones(n, dtype=torch.bfloat16)

    heads, kv, dim = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    inter = HY_INTERMEDIATE
    s = 1.0 / hidden**0.5
    tensors = {}
    for i in range(config["num_hidden_layers"]):
        p = "layers.%d." % i
        tensors[p + "self_attn.q_proj.weight"] = randn(heads * dim, hidden, scale=s)
        tensors[p + "self_attn.k_proj.weight"] = randn(kv * dim, hidden, scale=s)
        tensors[p + "self_attn.v_proj.weight"] = randn(kv * dim, hidden, scale=s)
        tensors[p + "self_attn.o_proj.weight"] = randn(hidden, heads * dim, scale=OUTPUT_SCALE)
        tensors[p + "self_attn.q_norm.weight"] = ones(dim)
        tensors[p + "self_attn.k_norm.weight"] = ones(dim)
        tensors[p + "input_layernorm.weight"] = ones(hidden)
        tensors[p + "post_attention_layernorm.weight"] = ones(hidden)
        tensors[p + "mlp.gate_proj.weight"] = randn(inter, hidden, scale=s)
        tensors[p + "mlp.up_proj.weight"] = randn(inter, hidden, scale=s)
        tensors[p + "mlp.down_proj.weight"] = randn(hidden, inter, scale=OUTPUT_SCALE)
    tensors["norm.weight"] = ones(hidden)
    tensors["hidden_norm.weight"] = ones(hidden)
    n = len(HY_TARGET_LAYER_IDS)
    tensors["fc.weight"] = randn(hidden, n * hidden, scale=1.0 / (n * hidden) ** 0.5)
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    _write_json(os.path.join(path, "config.json"), config)
    return config


def build_hybrid_pair(out_dir, *, seed=0, block_size=HY_BLOCK_SIZE):
    """The tiny hybrid pair: {"target": OUT/hybrid-target, "draft": OUT/hybrid-draft} (the draft's block B).

    The target has a byte-level BPE tokenizer with a chat template and the vision tokens, and a saved
    Qwen3-VL processor; the draft has no embedding and no head (it uses the target's).
    """
    target = os.path.join(out_dir, "hybrid-target")
    draft = os.path.join(out_dir, "hybrid-draft")
    tokenizer = build_tokenizer(target, extra_special_tokens=VISION_TOKENS)
    build_hybrid_target(target, seed, tokenizer)
    save_vl_processor(target, tokenizer)
    build_hybrid_draft(draft, seed, block_size=block_size)
    return {"target": target, "draft": draft}


def write_27b_dirs(out_dir, tokenizer_dir):
    """Config-only model dirs of the real 27B geometry for --load-format dummy runs:
    OUT/27b-conditional (Qwen3_5ForConditionalGeneration), OUT/27b-text (Qwen3_5ForCausalLM),
    OUT/27b-draft (DFlashDraftModel). The tokenizer / processor files come from tokenizer_dir."""
    conditional, causal, draft = real_27b_configs()
    dirs = {"conditional": "27b-conditional", "text": "27b-text", "draft": "27b-draft"}
    for key, config in (("conditional", conditional), ("text", causal), ("draft", draft)):
        path = os.path.join(out_dir, dirs[key])
        _write_json(os.path.join(path, "config.json"), config)
        if key != "draft":
            for name in os.listdir(tokenizer_dir):
                keep = name.endswith(".jinja") or (
                    name.endswith(".json") and name not in ("config.json", "generation_config.json")
                )
                if keep:
                    shutil.copy(os.path.join(tokenizer_dir, name), os.path.join(path, name))
    return {key: os.path.join(out_dir, name) for key, name in dirs.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("outdir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--arch", choices=("dense", "hybrid"), default="dense")
    parser.add_argument("--with-27b", action="store_true", help="hybrid: also OUT/27b-* config-only dirs")
    parser.add_argument("--block", type=int, default=HY_BLOCK_SIZE, help="hybrid: the draft's block size B")
    args = parser.parse_args()
    if args.arch == "hybrid":
        made = build_hybrid_pair(args.outdir, seed=args.seed, block_size=args.block)
        if args.with_27b:
            made.update({"27b-" + k: v for k, v in write_27b_dirs(args.outdir, made["target"]).items()})
        print(json.dumps(made))
        return
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
