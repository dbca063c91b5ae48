# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device runs only (appended to the scratch site's sitecustomize.py by tests/device/run-ddtree --hybrid).

sglang 0.5.17's models/qwen2_5_vl.py imports Qwen2_5_VisionRotaryEmbedding from transformers'
modeling_qwen2_5_vl; the device machine's transformers 5.17 no longer defines it, so sglang's Qwen VL
processors fail to import and Qwen3_5ForConditionalGeneration (the hybrid target's real class) is
refused at start. sglang 0.5.17 pins transformers 5.12.1, which has it: a real host does not need
this. The standard vision rotary embedding, supplied only where the name is missing; lazy, like
tests/device/sitecustomize.
"""

import importlib.abc
import importlib.util
import sys

_QWEN25_VL = "transformers.models.qwen2_5_vl.modeling_qwen2_5_vl"


def _vision_rotary_class():
    import torch  # noqa: PLC0415 - only once transformers' module is imported

    class Qwen2_5_VisionRotaryEmbedding(torch.nn.Module):  # the name sglang imports
        def __init__(self, dim, theta=10000.0):
            super().__init__()
            inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        def forward(self, seqlen):
            seq = torch.arange(seqlen, device=self.inv_freq.device, dtype=self.inv_freq.dtype)
            return torch.outer(seq, self.inv_freq)

    return Qwen2_5_VisionRotaryEmbedding


class _SupplyVisionRotary(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _QWEN25_VL:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            if not hasattr(module, "Qwen2_5_VisionRotaryEmbedding"):
                module.Qwen2_5_VisionRotaryEmbedding = _vision_rotary_class()

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _SupplyVisionRotary())
