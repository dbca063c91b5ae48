"""Tracebacks as sglang 0.5.23 prints them, with its real module paths and exception strings.

Frames name files under the interpreter's site-packages, the way a release venv would show them.
"""

from __future__ import annotations

import sysconfig

SITE = sysconfig.get_paths()["purelib"]

CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

CUDA_ERROR_TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)


def _frames(frames: list[tuple[str, int, str, str]]) -> str:
    out = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        out.append(f'  File "{SITE}/{path}", line {line}, in {func}')
        if code:
            out.append(f"    {code}")
    return "\n".join(out) + "\n"


# The main process resolving its arguments (sglang 0.5.17), before any hook runs.
_RESOLVE_HEAD = [
    ("sglang/launch_server.py", 84, "<module>", "run_server(server_args)"),
    ("sglang/launch_server.py", 26, "run_server", "server_args.resolve_once()"),
    ("sglang/srt/server_args.py", 237, "resolve_once", "run_resolution_pipeline(self)"),
]

_SCHEDULER_HEAD = [
    (
        "sglang/srt/managers/scheduler.py",
        6361,
        "run_scheduler_process",
        "scheduler = Scheduler(server_args, port_args)",
    ),
    ("sglang/srt/managers/scheduler.py", 512, "__init__", "self.init_model_worker()"),
    ("sglang/srt/managers/scheduler.py", 781, "init_model_worker", "self.tp_worker = TpModelWorker(**worker_kwargs)"),
    ("sglang/srt/managers/tp_worker.py", 268, "__init__", "self._init_model_runner()"),
    ("sglang/srt/managers/tp_worker.py", 351, "_init_model_runner", "self._model_runner = ModelRunner("),
    ("sglang/srt/model_executor/model_runner.py", 402, "__init__", "self.initialize(pre_model_load_memory)"),
]


def scheduler_crash_on_start(architecture: str) -> str:
    """A generic scheduler exception while the model is built (a broken patch, a bad checkpoint)."""
    return (
        _frames(
            [
                *_SCHEDULER_HEAD,
                ("sglang/srt/model_executor/model_runner.py", 611, "initialize", "self.load_model()"),
                ("sglang/srt/model_executor/model_runner.py", 1298, "load_model", "self.model = get_model("),
                (
                    "sglang/srt/model_loader/__init__.py",
                    58,
                    "get_model",
                    "return loader.load_model(model_config=model_config, device_config=device_config)",
                ),
                ("sglang/srt/model_loader/loader.py", 671, "load_model", "self.load_weights_and_postprocess("),
                ("sglang/srt/models/qwen3_next.py", 1187, "load_weights", "param = params_dict[name]"),
            ]
        )
        + f"KeyError: 'model.layers.0.linear_attn.dt_bias' (architecture {architecture})\n"
    )


def not_enough_memory(mem_fraction_static: float) -> str:
    return (
        _frames(
            [
                *_SCHEDULER_HEAD,
                (
                    "sglang/srt/model_executor/model_runner.py",
                    640,
                    "initialize",
                    "self.init_memory_pool(pre_model_load_memory)",
                ),
                (
                    "sglang/srt/model_executor/model_runner_kv_cache_mixin.py",
                    214,
                    "init_memory_pool",
                    "pool_config = configurator.configure(self.server_args, pre_model_load_memory)",
                ),
                ("sglang/srt/model_executor/pool_configurator.py", 188, "configure", "return MemoryPoolConfig("),
                ("<string>", 12, "__init__", ""),
                ("sglang/srt/model_executor/pool_configurator.py", 97, "__post_init__", "raise RuntimeError(msg)"),
            ]
        ).replace(f'  File "{SITE}/<string>"', '  File "<string>"')
        + "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        + f"Current value: mem_fraction_static={mem_fraction_static}\n"
    )


def cuda_oom_capture(cuda_graph: bool) -> str:
    oom = (
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 139.80 GiB of which "
        "1.12 GiB is free. Including non-PyTorch memory, this process has 138.67 GiB memory in use. Of the "
        "allocated memory 131.90 GiB is allocated by PyTorch, and 4.21 GiB is reserved by PyTorch but "
        "unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    if not cuda_graph:
        return (
            _frames(
                [
                    *_SCHEDULER_HEAD,
                    (
                        "sglang/srt/model_executor/model_runner.py",
                        640,
                        "initialize",
                        "self.init_memory_pool(pre_model_load_memory)",
                    ),
                    ("sglang/srt/mem_cache/memory_pool.py", 815, "__init__", "self._create_buffers()"),
                    ("sglang/srt/mem_cache/memory_pool.py", 851, "_create_buffers", "torch.zeros("),
                ]
            )
            + f"torch.OutOfMemoryError: {oom}\n"
        )
    inner = (
        _frames(
            [
                ("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", 598, "__init__", "self.capture()"),
                (
                    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
                    744,
                    "capture",
                    "graph, output_buffers = self.capture_one_batch_size(bs, forward)",
                ),
                ("torch/cuda/graphs.py", 268, "__exit__", "self.cuda_graph.capture_end()"),
            ]
        )
        + f"torch.OutOfMemoryError: {oom}\n"
    )
    outer = (
        _frames(
            [
                *_SCHEDULER_HEAD,
                ("sglang/srt/model_executor/model_runner.py", 668, "initialize", "self.init_device_graphs()"),
                (
                    "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py",
                    761,
                    "capture_decode_graph",
                    "graph_runner = GraphRunnerCls(model_runner)",
                ),
                ("sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", 603, "__init__", "raise Exception("),
            ]
        )
        + f"Exception: Capture cuda graph failed: {oom}\n{CUDA_GRAPH_CAPTURE_FAILED_MSG}"
    )
    return inner + "\nDuring handling of the above exception, another exception occurred:\n\n" + outer


def cuda_error() -> str:
    return (
        _frames(
            [
                *_SCHEDULER_HEAD,
                ("sglang/srt/model_executor/model_runner.py", 655, "initialize", "self.init_attention_backends()"),
                (
                    "sglang/srt/layers/attention/hybrid_linear_attn_backend.py",
                    402,
                    "__init__",
                    "self.linear_attn_backend = GDNAttnBackend(model_runner)",
                ),
                (
                    "sglang/srt/layers/attention/fla/chunk.py",
                    233,
                    "chunk_gated_delta_rule_fwd",
                    "g = chunk_local_cumsum(g, chunk_size=64, cu_seqlens=cu_seqlens)",
                ),
                (
                    "triton/runtime/jit.py",
                    390,
                    "<lambda>",
                    "return lambda *args, **kwargs: self.run(grid=grid, warmup=False, *args, **kwargs)",
                ),
                (
                    "triton/backends/nvidia/driver.py",
                    713,
                    "__call__",
                    "self.launch(gridX, gridY, gridZ, stream, function, *args)",
                ),
            ]
        )
        + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + CUDA_ERROR_TAIL
    )


def generation_crash() -> str:
    """The forward pass dies on the first real batch (field report incident 3)."""
    return (
        _frames(
            [
                ("sglang/srt/managers/scheduler.py", 6366, "run_scheduler_process", "scheduler.run_event_loop()"),
                (
                    "sglang/srt/managers/scheduler.py",
                    1402,
                    "event_loop_overlap",
                    "batch_result = self.run_batch(batch)",
                ),
                (
                    "sglang/srt/managers/scheduler.py",
                    2877,
                    "run_batch",
                    "batch_result = self.model_worker.forward_batch_generation(",
                ),
                (
                    "sglang/srt/speculative/dflash_worker.py",
                    611,
                    "forward_batch_generation",
                    "logits_output, next_token_ids = self.verify(",
                ),
                ("sglang/srt/model_executor/model_runner.py", 2512, "forward", "output = self._forward_raw("),
                ("torch/nn/modules/module.py", 1779, "_wrapped_call_impl", "return self._call_impl(*args, **kwargs)"),
                ("torch/nn/modules/module.py", 1790, "_call_impl", "return forward_call(*args, **kwargs)"),
            ]
        )
        + "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        + CUDA_ERROR_TAIL
    )


def abi_mismatch() -> str:
    """torch and sgl_kernel built against different ABIs: the import of sglang fails in the launcher."""
    frames = _frames(
        [
            ("sglang/launch_server.py", 9, "<module>", "from sglang.srt.server_args import prepare_server_args"),
            ("sglang/srt/server_args.py", 190, "<module>", "from sglang.srt.utils.common import (  # noqa: F401"),
            ("sglang/srt/utils/__init__.py", 2, "<module>", "from sglang.srt.utils.common import *"),
            ("sglang/srt/utils/common.py", 97, "<module>", "from sgl_kernel import common_ops"),
            ("sgl_kernel/__init__.py", 5, "<module>", "common_ops = _load_architecture_specific_ops()"),
            ("sgl_kernel/load_utils.py", 188, "_load_architecture_specific_ops", "raise ImportError(error_msg)"),
        ]
    )
    runpy = (
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n  File "<frozen runpy>", line 88, in _run_code\n'
    )
    return (
        frames.replace("Traceback (most recent call last):\n", "Traceback (most recent call last):\n" + runpy, 1)
        + f"ImportError: {SITE}/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: "
        + "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib\n"
    )


def missing_model_path(path: str) -> str:
    """sglang treats a path that is not a directory as a Hugging Face repo id."""
    hf = _frames(
        [
            ("transformers/utils/hub.py", 479, "cached_files", "hf_hub_download("),
            ("huggingface_hub/utils/_validators.py", 106, "_inner_fn", "validate_repo_id(arg_value)"),
            ("huggingface_hub/utils/_validators.py", 154, "validate_repo_id", "raise HFValidationError("),
        ]
    ) + (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        f"'namespace/repo_name': '{path}'. Use `repo_type` argument if needed.\n"
    )
    outer = _frames(
        [
            *_RESOLVE_HEAD,
            (
                "sglang/srt/arg_groups/pipeline.py",
                157,
                "run_resolution_pipeline",
                "run_hook(handle_gpu_memory_settings, server_args)",
            ),
            (
                "sglang/srt/arg_groups/overrides.py",
                811,
                "model_config_of",
                "return ModelConfig.from_server_args(server_args)",
            ),
            ("sglang/srt/configs/model_config.py", 286, "__init__", "self.hf_config = get_config("),
            ("sglang/srt/utils/hf_transformers_utils.py", 544, "get_config", "config = AutoConfig.from_pretrained("),
            (
                "transformers/models/auto/configuration_auto.py",
                1376,
                "from_pretrained",
                "config_dict, unused_kwargs = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **kwargs)",  # noqa: E501
            ),
            (
                "transformers/configuration_utils.py",
                636,
                "get_config_dict",
                "config_dict, kwargs = cls._get_config_dict(pretrained_model_name_or_path, **kwargs)",
            ),
            ("transformers/utils/hub.py", 531, "cached_files", "raise OSError("),
        ]
    ) + (
        f"OSError: Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder "
        "or the repo_id of a model on the Hub.\n"
    )
    return hf + "\nThe above exception was the direct cause of the following exception:\n\n" + outer


def value_error(message: str) -> str:
    """A main-process argument-resolution error (e.g. DFLASH without a draft path)."""
    return (
        _frames(
            [
                *_RESOLVE_HEAD,
                (
                    "sglang/srt/arg_groups/pipeline.py",
                    241,
                    "run_resolution_pipeline",
                    "run_hook(handle_speculative_decoding, server_args)",
                ),
                ("sglang/srt/arg_groups/speculative_hook.py", 326, "_handle_dflash", "raise ValueError("),
            ]
        )
        + f"ValueError: {message}\n"
    )


def kv_cache_no_memory(mem_fraction_static: float) -> str:
    """sglang 0.5.17's wording (0.5.23 raises it from kv_cache_configurator.py too), as seen on an H200."""
    suggested = max(0.001, round(mem_fraction_static * 2 + 0.0005, 3))
    return (
        _frames(
            [
                ("sglang/srt/managers/scheduler.py", 4931, "run_scheduler_process", ""),
                ("sglang/srt/managers/scheduler.py", 498, "__init__", "self.init_model_worker()"),
                ("sglang/srt/managers/scheduler.py", 981, "init_model_worker", "self.init_memory_pools()"),
                ("sglang/srt/managers/scheduler.py", 953, "init_memory_pools", "self.init_target_memory_pool()"),
                ("sglang/srt/managers/scheduler.py", 949, "init_target_memory_pool", ""),
                ("sglang/srt/managers/tp_worker.py", 399, "alloc_memory_pool", ""),
                (
                    "sglang/srt/model_executor/model_runner.py",
                    775,
                    "alloc_memory_pool",
                    "result = self.kv_cache_configurator.configure(",
                ),
                (
                    "sglang/srt/mem_cache/kv_cache_configurator.py",
                    247,
                    "configure",
                    "config = self._resolve_memory_pool_config(pre_model_load_memory)",
                ),
                (
                    "sglang/srt/mem_cache/kv_cache_configurator.py",
                    1782,
                    "_resolve_memory_pool_config",
                    "available_bytes = self._profile_available_bytes(pre_model_load_memory)",
                ),
                (
                    "sglang/srt/mem_cache/kv_cache_configurator.py",
                    1647,
                    "_profile_available_bytes",
                    "raise ValueError(",
                ),
            ]
        )
        + "ValueError: Loaded weights leave no GPU memory for the KV cache under "
        + f"--mem-fraction-static={mem_fraction_static}. Raise --mem-fraction-static above {suggested:.3f} "
        + f"(minimum viable = 1 - available/pre = {suggested - 0.0002:.4f}). "
        + "If using speculative decoding, draft weights are now counted.\n"
    )


_MEMORY_POOL_HEAD = [
    ("sglang/srt/managers/scheduler.py", 4931, "run_scheduler_process", ""),
    ("sglang/srt/managers/scheduler.py", 498, "__init__", "self.init_model_worker()"),
    ("sglang/srt/managers/scheduler.py", 981, "init_model_worker", "self.init_memory_pools()"),
    ("sglang/srt/managers/scheduler.py", 953, "init_memory_pools", "self.init_target_memory_pool()"),
    (
        "sglang/srt/model_executor/model_runner.py",
        775,
        "alloc_memory_pool",
        "result = self.kv_cache_configurator.configure(",
    ),
    (
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        1782,
        "_resolve_memory_pool_config",
        "available_bytes = self._profile_available_bytes(pre_model_load_memory)",
    ),
]


def hybrid_memory(error_line: str) -> str:
    """One of sglang 0.5.17's three hybrid memory refusals (kv_cache_configurator.py), by its raise site."""
    if "state cache is too small" in error_line:
        frames = [
            ("sglang/srt/mem_cache/kv_cache_configurator.py", 1785, "_resolve_memory_pool_config", ""),
            ("sglang/srt/mem_cache/kv_cache_configurator.py", 1753, "resolve_max_num_reqs", "raise RuntimeError("),
        ]
    elif "Not enough GPU memory for hybrid" in error_line:
        frames = [
            ("sglang/srt/mem_cache/kv_cache_configurator.py", 1637, "_profile_available_bytes", ""),
            ("sglang/srt/mem_cache/kv_cache_configurator.py", 1963, "_handle_max_mamba_cache", "raise RuntimeError("),
        ]
    else:
        frames = [
            ("sglang/srt/mem_cache/kv_cache_configurator.py", 1647, "_profile_available_bytes", "raise ValueError(")
        ]
    return _frames([*_MEMORY_POOL_HEAD[:5], *_MEMORY_POOL_HEAD[5:], *frames]) + error_line + "\n"


def layer_capture_missing(message: str) -> str:
    """DFLASH on a target class without layer capture (sglang 0.5.17's text class Qwen3_5ForCausalLM)."""
    return (
        _frames(
            [
                *_SCHEDULER_HEAD,
                ("sglang/srt/model_executor/model_runner.py", 655, "initialize", "self.init_attention_backends()"),
                (
                    "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py",
                    61,
                    "configure_aux_hidden_state_capture",
                    "raise ValueError(",
                ),
            ]
        )
        + f"ValueError: {message}\n"
    )


def gdn_kernel_fault() -> str:
    """A Gated-DeltaNet triton kernel faulting on the first prefill (constructed from the GDN call path)."""
    return (
        _frames(
            [
                ("sglang/srt/managers/scheduler.py", 6366, "run_scheduler_process", "scheduler.run_event_loop()"),
                (
                    "sglang/srt/managers/scheduler.py",
                    2877,
                    "run_batch",
                    "batch_result = self.model_worker.forward_batch_generation(",
                ),
                ("sglang/srt/model_executor/model_runner.py", 2512, "forward", "output = self._forward_raw("),
                (
                    "sglang/srt/layers/attention/hybrid_linear_attn_backend.py",
                    771,
                    "forward_extend",
                    "core_attn_out = self.linear_attn_backend.forward_extend(",
                ),
                (
                    "sglang/srt/layers/attention/fla/chunk.py",
                    233,
                    "chunk_gated_delta_rule_fwd",
                    "g = chunk_local_cumsum(g, chunk_size=64, cu_seqlens=cu_seqlens)",
                ),
                (
                    "triton/backends/nvidia/driver.py",
                    713,
                    "__call__",
                    "self.launch(gridX, gridY, gridZ, stream, function, *args)",
                ),
            ]
        )
        + "RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered\n"
    )


# sglang 0.5.17 kernels/jit/utils/arch.py logs this warning when it cannot run nvcc (and goes on).
NVCC_VERSION_WARNING = (
    "Cannot run `/usr/local/cuda/bin/nvcc --version`: [Errno 2] No such file or directory: '/usr/local/cuda/bin/nvcc'"
)


def no_kernel_image() -> str:
    """FA3 (sgl_kernel's flash_ops, sm_80/86/90 only) launched on a GPU it has no code for (constructed on the
    fa3 call path; the message is torch's for cudaErrorNoKernelImageForDevice, sglang issues #12178, #15342)."""
    return (
        _frames(
            [
                ("sglang/srt/managers/scheduler.py", 6366, "run_scheduler_process", "scheduler.run_event_loop()"),
                ("sglang/srt/model_executor/model_runner.py", 2512, "forward", "output = self._forward_raw("),
                (
                    "sglang/srt/layers/attention/flashattention_backend.py",
                    812,
                    "forward_extend",
                    "result = flash_attn_with_kvcache(",
                ),
                (
                    "sgl_kernel/flash_attn.py",
                    263,
                    "flash_attn_with_kvcache",
                    "out, softmax_lse, *rest = torch.ops.sgl_kernel.fwd.default(",
                ),
            ]
        )
        + "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device\n"
        + CUDA_ERROR_TAIL
    )


def jit_compiler_missing() -> str:
    """flashinfer-python without flashinfer-cubin on a host without a CUDA toolkit: its attention wrapper
    compiles a kernel at init and finds no nvcc (constructed call path; flashinfer's own message)."""
    return (
        _frames(
            [
                *_SCHEDULER_HEAD,
                ("sglang/srt/model_executor/model_runner.py", 655, "initialize", "self.init_attention_backends()"),
                (
                    "sglang/srt/layers/attention/flashinfer_backend.py",
                    233,
                    "__init__",
                    "BatchPrefillWithPagedKVCacheWrapper(",
                ),
                ("flashinfer/prefill.py", 1422, "__init__", "self._cached_module = get_batch_prefill_module("),
                ("flashinfer/jit/core.py", 322, "build_and_load", "self.build(verbose)"),
                ("flashinfer/jit/cpp_ext.py", 95, "get_cuda_path", "raise RuntimeError("),
            ]
        )
        + "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist\n"
    )


def illegal_address_replay() -> str:
    """An illegal address inside the CUDA-graph replay of a speculative verify, hours after the start: the field's
    RTX PRO 6000 fault (sglang #24361: cudaErrorIllegalAddress in flashinfer's plan during replay; constructed)."""
    return (
        _frames(
            [
                ("sglang/srt/managers/scheduler.py", 6366, "run_scheduler_process", "scheduler.run_event_loop()"),
                (
                    "sglang/srt/managers/scheduler.py",
                    2877,
                    "run_batch",
                    "batch_result = self.model_worker.forward_batch_generation(",
                ),
                (
                    "sglang/srt/speculative/dflash_worker.py",
                    611,
                    "forward_batch_generation",
                    "logits_output, next_token_ids = self.verify(",
                ),
                (
                    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
                    1233,
                    "replay",
                    "output = self.backend.replay(self._replay_graph_key, forward_batch)",
                ),
                ("sglang/srt/layers/attention/flashinfer_backend.py", 1118, "call_begin_forward", "wrapper.plan("),
                ("flashinfer/prefill.py", 1706, "plan", "self._plan_info = self._cached_module.plan("),
            ]
        )
        + "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n"
        + CUDA_ERROR_TAIL
    )
