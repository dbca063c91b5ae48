# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device runs only: let sglang 0.5.17 run over the lent GPU host's newer transformers (5.17).

sglang 0.5.17 pins transformers 5.12.1; the host has 5.17, and two things differ:

1. transformers 5.17 already registers ``qwen3_asr``; sglang 0.5.17 registers it again with
   ``AutoConfig.register`` and that raises. Here ``register`` defaults to ``exist_ok=True``.
2. transformers 5.17's ``modeling_qwen2_5_vl`` no longer defines ``Qwen2_5_VisionRotaryEmbedding``,
   which sglang 0.5.17's ``models/qwen2_5_vl.py`` imports; ``multimodal/processors/qwen_vl.py`` then
   fails to import and no processor is registered for ``Qwen3_5ForConditionalGeneration`` (the
   mission's model class). Here the module gets the standard vision rotary embedding back when it
   lacks it: ``inv_freq = 1 / theta^(arange(0, dim, 2) / dim)``, ``forward(seqlen)`` = the outer
   product of ``arange(seqlen)`` and ``inv_freq``.

3. (counting, not compatibility) with ``SPECDEC_DDTREE_ACCEPT_STATS=PATH`` a DDTREE server's accepted
   tree nodes are counted on and off the draft's top-1 chain (tests/device/ddtree_accept_stats.py).

A real host with the pinned transformers meets neither of 1 and 2: nothing here is part of what the
collection installs. On PYTHONPATH; lazy: nothing is imported until transformers' own module is,
so every other Python process (Ansible's included) starts as fast as without it.
"""

import importlib.abc
import importlib.util
import os
import sys

_AUTO_CONFIG = "transformers.models.auto.configuration_auto"
_QWEN2_5_VL = "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl"


def _register_exist_ok(module):
    auto = module.AutoConfig
    register = auto.register

    def register_exist_ok(model_type, config, exist_ok=False):
        return register(model_type, config, exist_ok=True)

    auto.register = staticmethod(register_exist_ok)


def _vision_rotary_embedding(module):
    if hasattr(module, "Qwen2_5_VisionRotaryEmbedding"):
        return
    import torch  # noqa: PLC0415 - only once transformers' module is imported (torch is there then)
    from torch import nn  # noqa: PLC0415

    class Qwen2_5_VisionRotaryEmbedding(nn.Module):  # the name sglang 0.5.17 imports
        def __init__(self, dim, theta=10000.0):
            super().__init__()
            inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, seqlen):
            seq = torch.arange(seqlen, device=self.inv_freq.device, dtype=self.inv_freq.dtype)
            return torch.outer(seq, self.inv_freq)

    module.Qwen2_5_VisionRotaryEmbedding = Qwen2_5_VisionRotaryEmbedding


_PATCHES = {_AUTO_CONFIG: _register_exist_ok, _QWEN2_5_VL: _vision_rotary_embedding}

# 3. Only with SPECDEC_DDTREE_ACCEPT_STATS=PATH (a DDTREE server whose accepted nodes are counted):
#    sglang's verify_tree_greedy_func is wrapped by tests/device/ddtree_accept_stats.py, which counts the
#    accepted nodes on and off the draft's top-1 chain into PATH. Outputs are unchanged.
_EAGLE_UTILS = "sglang.srt.speculative.eagle_utils"


def _count_ddtree_accepts(module):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import ddtree_accept_stats  # noqa: PLC0415 - tests/device, next to this folder

    path = os.environ[ddtree_accept_stats.ENV]
    module.verify_tree_greedy_func = ddtree_accept_stats.wrap_verify(module.verify_tree_greedy_func, path)


if os.environ.get("SPECDEC_DDTREE_ACCEPT_STATS"):
    _PATCHES[_EAGLE_UTILS] = _count_ddtree_accepts


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    def __init__(self):
        self.pending = dict(_PATCHES)

    def find_spec(self, name, path=None, target=None):
        patch = self.pending.pop(name, None)
        if patch is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            if self.pending:
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            patch(module)

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _PatchAfterImport())
