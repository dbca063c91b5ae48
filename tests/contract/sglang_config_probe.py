# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse model configs with sglang's own config code, without torch or a GPU (a subprocess of
tests/contract/test_hybrid_model_configs.py).

    python sglang_config_probe.py SGLANG_TREE TP < {"target": {...}, "draft": {...} | null}

Runs the real files of the sglang source tree: ``configs/qwen3_5.py`` (Qwen3_5Config and its text
/ vision sub-configs), ``configs/qwen3_next.py`` (layer layout, ``mamba2_cache_params``),
``configs/qwen3_vl.py``, ``configs/mamba_utils.py`` (state shapes and bytes per request) and, from
``speculative/dflash_utils.py``, the draft-config functions (``parse_dflash_draft_config``,
``get_dflash_layer_types``, ...) lifted out of that module by name, on the real transformers of
PYTHONPATH. Only leaves that pull in torch / CUDA are stood in for, each with the behaviour these
files use: torch's three dtypes (name + itemsize), ``divide`` (exact integer division, refusing a
remainder as sglang's does), ``envs`` (no SGLANG_MAMBA_* overrides), ``get_parallel`` (the TP size
asked for), ``is_cpu`` (False: a GPU host). Prints one JSON object.
"""

import ast
import json
import pathlib
import sys
import types


class _DType:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


def _module(name, **attrs):
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def _divide(numerator, denominator):
    # sglang.srt.distributed.utils.divide: ensure_divisibility, then //
    assert numerator % denominator == 0, f"{numerator} is not divisible by {denominator}"
    return numerator // denominator


class _Env:
    def get(self):
        return None


def install(tree, tp):
    torch = _module("torch", dtype=_DType)
    for name, size in (("float32", 4), ("bfloat16", 2), ("float16", 2)):
        setattr(torch, name, _DType(name, size))
    srt = tree / "sglang" / "srt"
    _module("sglang", __path__=[str(tree / "sglang")])
    _module("sglang.srt", __path__=[str(srt)])
    _module("sglang.srt.configs", __path__=[str(srt / "configs")])  # its __init__ imports every model
    envs = types.SimpleNamespace(SGLANG_MAMBA_CONV_DTYPE=_Env(), SGLANG_MAMBA_SSM_DTYPE=_Env())
    _module("sglang.srt.environ", envs=envs)
    _module("sglang.srt.distributed", __path__=[])
    _module("sglang.srt.distributed.utils", divide=_divide)
    _module("sglang.srt.runtime_context", get_parallel=lambda: types.SimpleNamespace(attn_tp_size=tp))
    _module("sglang.srt.utils", is_cpu=lambda: False)

    def _not_on_gpu(*args, **kwargs):
        raise AssertionError("adjust_tp_num_heads_if_necessary runs on CPU hosts only")

    _module("sglang.srt.configs.update_config", adjust_tp_num_heads_if_necessary=_not_on_gpu)


def dflash_functions(tree):
    """The draft-config functions of speculative/dflash_utils.py, executed from its own source."""
    path = tree / "sglang" / "srt" / "speculative" / "dflash_utils.py"
    source = path.read_text(encoding="utf-8")
    wanted = {
        "DEFAULT_DFLASH_MASK_TOKEN", "build_target_layer_ids", "get_dflash_layer_types",
        "get_dflash_attention_sliding_window_size", "_cfg_get", "_get_text_config", "_get_dflash_config",
        "_parse_optional_int", "DFlashDraftConfig", "parse_dflash_draft_config",
    }  # fmt: skip
    body = []
    for node in ast.parse(source).body:
        names = {getattr(node, "name", None)} | {t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)}
        if names & wanted:
            body.append(node)
    missing = (
        wanted
        - {getattr(n, "name", None) for n in body}
        - {t.id for n in body for t in getattr(n, "targets", []) if isinstance(t, ast.Name)}
    )
    assert not missing, f"{path} lacks {sorted(missing)}"
    header = (
        "from __future__ import annotations\nimport logging\nfrom collections.abc import Sequence\n"
        "from dataclasses import dataclass\nfrom numbers import Integral\nfrom typing import Any, List, Optional\n"
        "logger = logging.getLogger('dflash_utils')\n"
    )
    module = _module("sglang_dflash_utils_subset")  # a dataclass needs its module in sys.modules
    exec(compile(header + ast.unparse(ast.Module(body=body, type_ignores=[])), str(path), "exec"), module.__dict__)
    return module.__dict__


def parse_target(config):
    from sglang.srt.configs.qwen3_5 import Qwen3_5Config, Qwen3_5TextConfig  # noqa: PLC0415 - after install()

    kwargs = {k: v for k, v in config.items() if k != "model_type"}
    if config.get("model_type") == "qwen3_5":
        parsed = Qwen3_5Config(**kwargs)
        text = parsed.text_config
    else:
        parsed = text = Qwen3_5TextConfig(**kwargs)
    cache = text.mamba2_cache_params
    return {
        "class": type(parsed).__name__,
        "text_class": type(text).__name__,
        "vision_class": type(getattr(parsed, "vision_config", None)).__name__,
        "text_model_type": text.model_type,
        "num_hidden_layers": text.num_hidden_layers,
        "full_attention_layer_ids": text.full_attention_layer_ids,
        "linear_layer_ids": text.linear_layer_ids,
        "attn_output_gate": getattr(text, "attn_output_gate", None),
        "partial_rotary_factor": getattr(text, "partial_rotary_factor", None),
        "rope_scaling": getattr(text, "rope_scaling", None),
        "conv_shape": [list(s) for s in cache.shape.conv],
        "temporal_shape": list(cache.shape.temporal),
        "ssm_dtype": cache.dtype.temporal.name,
        "conv_dtype": cache.dtype.conv.name,
        "mamba_cache_per_req": cache.mamba_cache_per_req,
    }


def parse_draft(config, target_layers, dflash):
    from transformers import Qwen3Config  # noqa: PLC0415 - the class AutoConfig picks for model_type qwen3

    hf = Qwen3Config(**{k: v for k, v in config.items() if k != "model_type"})
    draft = dflash["parse_dflash_draft_config"](draft_hf_config=hf)
    return {
        "architectures": hf.architectures,
        "layer_types": list(dflash["get_dflash_layer_types"](hf) or []),
        "sliding_window": dflash["get_dflash_attention_sliding_window_size"](hf),
        "block_size": draft.resolve_block_size(default=16),
        "target_layer_ids": draft.resolve_target_layer_ids(
            target_num_layers=target_layers, draft_num_layers=draft.require_num_layers()
        ),
        "mask_token_id": draft.mask_token_id,
        "num_target_layers": draft.num_target_layers,
    }


def main():
    tree, tp = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    configs = json.load(sys.stdin)
    # transformers first: it must see a host without torch (the stand-in is for sglang's files only).
    import transformers  # noqa: PLC0415
    from transformers import PretrainedConfig, Qwen3Config  # noqa: F401, PLC0415

    install(tree, tp)
    out = {"target": parse_target(configs["target"])}
    if configs.get("draft") is not None:
        out["draft"] = parse_draft(configs["draft"], out["target"]["num_hidden_layers"], dflash_functions(tree))
    out["transformers"] = transformers.__version__
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
