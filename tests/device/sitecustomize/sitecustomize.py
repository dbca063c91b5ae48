# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Device runs only: let sglang 0.5.17 register its configs over the host's newer transformers.

transformers 5.17 on the lent GPU host already registers ``qwen3_asr``; sglang 0.5.17 registers
it again with ``AutoConfig.register`` and that raises. On PYTHONPATH, this makes ``register``
default to ``exist_ok=True``. Lazy: nothing is imported until transformers' auto-config module
is, so every other Python process (Ansible's included) starts as fast as without it.
"""

import importlib.abc
import importlib.util
import sys

_TARGET = "transformers.models.auto.configuration_auto"


class _RegisterExistOk(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def patched(module):
            exec_module(module)
            auto = module.AutoConfig
            register = auto.register

            def register_exist_ok(model_type, config, exist_ok=False):
                return register(model_type, config, exist_ok=True)

            auto.register = staticmethod(register_exist_ok)

        spec.loader.exec_module = patched
        return spec


sys.meta_path.insert(0, _RegisterExistOk())
