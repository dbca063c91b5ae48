"""Command line, environment and the start-up sequence of the simulated sglang server."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import signal
import sys
import time
from decimal import Decimal

from sglang_engine_simulator import config_file, ddtree, hybrid, server_args_log, tracebacks
from sglang_engine_simulator.config_file import ConfigError
from sglang_engine_simulator.log import log, raw

FAULTS = (
    "none",
    "crash_on_start",
    "not_enough_memory",
    "kv_cache_too_small",
    "cuda_oom",
    "cuda_error",
    "abi_mismatch",
    "crash_on_first_generation",
    "wedged",
    "abort",
    "empty_output",
    "empty_text",
    "scheduler_death",
    "dies_after_first_answer",
    "spec_mismatch",
    "low_acceptance",
    "gdn_kernel_fault",
    "no_kernel_image",
    "jit_compiler_missing",
    "illegal_address_replay",
)
# Faults that kill a serving engine FAULT_AFTER_S after the ready line (scheduler_death) or after
# its first client generation was answered (dies_after_first_answer).
# illegal_address_replay: a CUDA-graph replay faults FAULT_AFTER_S after the ready line (hours in the field).
DEATH_FAULTS = ("scheduler_death", "dies_after_first_answer", "illegal_address_replay")
START_FAULTS = (
    "crash_on_start",
    "not_enough_memory",
    "kv_cache_too_small",
    "cuda_oom",
    "cuda_error",
    "abi_mismatch",
    "no_kernel_image",
    "jit_compiler_missing",
)
# Optional model files sglang 0.5.17 fails to import at every start on a newer transformers, logs and skips.
IGNORED_MODEL_IMPORTS = (
    ("inkling", "No module named 'helion'"),
    (
        "pixtral",
        "cannot import name 'PixtralRotaryEmbedding' from 'transformers.models.pixtral.modeling_pixtral'",
    ),
)
DISABLE_CUDA_GRAPH_DEPRECATION = (
    "\x1b[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. "
    "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.\x1b[0m"
)

# sglang 0.5.23 sglang/srt/arg_groups/choices.py ATTENTION_BACKEND_CHOICES
ATTENTION_BACKEND_CHOICES = [
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
]  # fmt: skip
DRAFT_ATTENTION_BACKEND_CHOICES = ["flashinfer", "fa3", "fa4", "triton", "ascend", "trtllm_mha"]
# sglang 0.5.17 sglang/srt/server_args.py SAMPLING_BACKEND_CHOICES (0.5.23 adds intel_xpu; token_oracle only
# under SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE): the values both releases accept.
SAMPLING_BACKEND_CHOICES = ["flashinfer", "pytorch", "ascend"]
DTYPE_CHOICES = ["auto", "half", "float16", "bfloat16", "float", "float32"]
CUDA_GRAPH_BACKEND_CHOICES = ["breakable", "full", "disabled"]
# Builtins of sglang 0.5.23 SpeculativeAlgorithm, plus DDTREE (the patchsets/ddtree-* sets add it).
SPECULATIVE_ALGORITHMS = (
    "DFLASH", "DDTREE", "UNO", "DSPARK", "EAGLE", "EAGLE3", "NEXTN", "FROZEN_KV_MTP", "STANDALONE", "NGRAM",
)  # fmt: skip


class EnvError(ValueError):
    """An SGLANG_SIM_* variable holds a value the simulator cannot use."""


def human_readable_int(value: str) -> int:
    """sglang's `--context-length` parser: `32768`, `32k`, `128Ki`, `25.6k`."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * iec[suffix]
        return int(Decimal(number) * {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"Invalid number: '{value}'") from None


class _DeprecatedStoreTrue(argparse.Action):
    """sglang's DeprecatedStoreTrueAction: stores True and prints its warning."""

    def __init__(self, option_strings, dest, new_flag=None, **kwargs):
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=0, const=True, default=False, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        log(
            f"\033[1;33m'{option_string}' is deprecated and will be removed in a future release. "
            f"Use '{self.new_flag}' instead.\033[0m"
        )
        setattr(namespace, self.dest, True)


def build_parser() -> argparse.ArgumentParser:
    """The flags the simulator accepts: each one exists in sglang 0.5.23 (tests cross-check this)."""
    p = argparse.ArgumentParser(
        prog="sglang-engine-simulator",
        description="TEST DOUBLE for the sglang server (no model, no GPU). Takes sglang's launch flags.",
        allow_abbrev=False,
    )
    a = p.add_argument
    # model
    a("--model-path", "--model", dest="model_path", type=str, required=True)
    a("--tokenizer-path", type=str, default=None)
    a("--served-model-name", type=str, default=None)
    a("--trust-remote-code", action="store_true")
    a("--context-length", type=human_readable_int, default=None)
    a("--dtype", type=str, choices=DTYPE_CHOICES, default="auto")
    a("--kv-cache-dtype", type=str, default="auto")
    a("--load-format", type=str, default="auto")
    a("--revision", type=str, default=None)
    a("--quantization", type=str, default=None)
    # serving
    a("--host", type=str, default="127.0.0.1")
    a("--port", type=int, default=30000)
    a("--api-key", type=str, default=None)
    a("--admin-api-key", type=str, default=None)
    a("--skip-server-warmup", action="store_true")
    # parallelism / device
    a("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    a("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    a("--device", type=str, default=None)
    a("--base-gpu-id", type=int, default=0)
    # memory / scheduling
    a("--mem-fraction-static", type=float, default=None)
    a("--max-running-requests", type=int, default=None)
    a("--max-total-tokens", type=int, default=None)
    a("--chunked-prefill-size", type=int, default=None)
    a("--max-prefill-tokens", type=int, default=16384)
    a("--page-size", type=int, default=None)
    a("--disable-radix-cache", action="store_true")
    a("--random-seed", type=int, default=None)
    a("--watchdog-timeout", type=float, default=300)
    # kernels / graphs
    a("--attention-backend", type=str, choices=ATTENTION_BACKEND_CHOICES, default=None)
    a("--sampling-backend", type=str, choices=SAMPLING_BACKEND_CHOICES, default=None)
    a("--disable-cuda-graph", action=_DeprecatedStoreTrue, new_flag="--cuda-graph-backend-{decode,prefill}=disabled")
    a("--cuda-graph-backend-decode", type=str, choices=CUDA_GRAPH_BACKEND_CHOICES, default=None)
    a("--cuda-graph-backend-prefill", type=str, choices=CUDA_GRAPH_BACKEND_CHOICES, default=None)
    a("--cuda-graph-max-bs-decode", type=int, default=None)
    a("--mamba-ssm-dtype", type=str, default=None)
    # speculative decoding
    a("--speculative-algorithm", type=str, default=None)
    a("--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", type=str)
    a("--speculative-num-draft-tokens", type=int, default=None)
    a("--speculative-dflash-block-size", type=int, default=None)
    a("--speculative-num-steps", type=int, default=None)
    a("--speculative-eagle-topk", type=int, default=None)
    a("--speculative-draft-attention-backend", type=str, choices=DRAFT_ATTENTION_BACKEND_CHOICES, default=None)
    # observability
    a("--log-level", type=str, default="info")
    a("--log-requests", action="store_true")
    a("--enable-metrics", action="store_true")
    return p


def accepted_flags() -> list[str]:
    """Every option string the simulator's parser accepts (for the cross-check against sglang)."""
    return sorted(s for action in build_parser()._actions for s in action.option_strings if s not in ("-h", "--help"))


@dataclasses.dataclass
class Settings:
    fault: str = "none"
    load_s: float = 0.5
    warmup_s: float = 0.5
    fault_after_s: float = 1.0
    death_grace_s: float = 3.0
    health_timeout_s: float = 20.0
    tokens_per_s: float = 200.0
    gpu_memory_mb: float | None = None  # hybrid mode: free MiB sglang sees before loading (None: no check)


def _env_float(env, name: str, default: float, positive: bool = False) -> float:
    raw_value = env.get(name, "").strip()
    if raw_value == "":
        return default
    try:
        value = float(raw_value)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf") or (positive and value == 0):  # also rejects NaN
        raise EnvError(
            f"{name}={raw_value!r} is not a {'positive' if positive else 'non-negative'} number of seconds; "
            f"set it to e.g. {default} or leave it unset"
        )
    return value


def settings_from_env(env=None) -> Settings:
    env = os.environ if env is None else env
    fault = env.get("SGLANG_SIM_FAULT", "").strip() or "none"
    if fault not in FAULTS:
        raise EnvError(f"SGLANG_SIM_FAULT={fault!r} is not a fault mode; use one of: {', '.join(FAULTS)}")
    health_default = _env_float(env, "SGLANG_HEALTH_CHECK_TIMEOUT", 20.0)
    return Settings(
        fault=fault,
        load_s=_env_float(env, "SGLANG_SIM_LOAD_S", 0.5),
        warmup_s=_env_float(env, "SGLANG_SIM_WARMUP_S", 0.5),
        fault_after_s=_env_float(env, "SGLANG_SIM_FAULT_AFTER_S", 2.0 if fault in DEATH_FAULTS else 1.0),
        death_grace_s=_env_float(env, "SGLANG_SIM_DEATH_GRACE_S", 3.0),
        health_timeout_s=_env_float(env, "SGLANG_SIM_HEALTH_TIMEOUT_S", health_default),
        tokens_per_s=_env_float(env, "SGLANG_SIM_TOKENS_PER_S", 200.0, positive=True),
        gpu_memory_mb=_env_float(env, "SGLANG_SIM_GPU_MEMORY_MB", 0.0) or None,
    )


def die_with_sigkill() -> None:
    """End the whole process the way sglang's tree ends after a scheduler failure: SIGKILL (137, 9/KILL)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(10)  # never reached
    os._exit(137)


def scheduler_exception(trace: str) -> None:
    """sglang: the scheduler logs its traceback, SIGQUITs the launcher, which kills the tree."""
    log(f"Scheduler hit an exception: {trace}", rank=0)
    log("Received sigquit from a child process. It usually means the child failed.")
    die_with_sigkill()


def read_model_config(path: str) -> dict:
    try:
        with open(os.path.join(path, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        return config if isinstance(config, dict) else {}
    except (OSError, ValueError):
        return {}


class Clock:
    """Sleeps that stop at a deadline (the fault time), so start-time faults fire on schedule."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline

    def sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        if self.deadline is not None:
            end = min(end, self.deadline)
        remaining = end - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)


def _resolution_errors(args) -> str | None:
    """Main-process checks sglang makes while resolving its arguments (exit 1, no scheduler yet)."""
    algo = (args.speculative_algorithm or "").upper()
    if args.speculative_algorithm and algo not in SPECULATIVE_ALGORITHMS:
        return f"Unknown speculative algorithm name: {args.speculative_algorithm}"
    error = _dflash_errors(args, algo) if algo in ("DFLASH", "DDTREE") else None
    if error:
        return error
    if args.mem_fraction_static is not None and not 0 < args.mem_fraction_static < 1:
        return f"mem_fraction_static must be in (0, 1), got {args.mem_fraction_static}"
    if not 0 <= args.port <= 65535:
        return f"port has invalid port number {args.port}. Valid TCP port range is 0-65535."
    return None


def _dflash_errors(args, algo: str) -> str | None:
    """The draft model and block size checks of DFLASH and DDTREE (and DDTREE's tree budget)."""
    if not args.speculative_draft_model_path:
        return f"{algo} speculative decoding requires setting --speculative-draft-model-path."
    block, draft = args.speculative_dflash_block_size, args.speculative_num_draft_tokens
    if block is not None and block <= 0:
        return f"DFLASH requires --speculative-dflash-block-size to be positive, got {block}."
    if block is not None and draft is not None and block != draft:
        return (
            "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
            f"For DFLASH they must match. speculative_num_draft_tokens={draft}, "
            f"speculative_dflash_block_size={block}."
        )
    if algo == "DDTREE":  # the ddtree patch sets check the tree budget here (ddtree.py)
        try:
            ddtree.resolve(draft or block or 16)
        except ValueError as exc:
            return str(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    try:
        settings = settings_from_env()
    except EnvError as exc:
        raw(f"sglang-engine-simulator: error: {exc}")
        return 2
    try:  # --config <file>.yaml: flags kept out of the command line (the API key)
        argv = config_file.merge(sys.argv[1:] if argv is None else argv)
    except (ConfigError, OSError) as exc:
        raw(tracebacks.value_error(str(exc)))
        return 1
    args = build_parser().parse_args(argv)  # exits 2 on unknown flags and bad values, like sglang

    deadline = start + settings.fault_after_s if settings.fault in START_FAULTS else None
    clock = Clock(deadline)
    if settings.fault == "abi_mismatch":
        clock.sleep(settings.fault_after_s)
        raw(tracebacks.abi_mismatch())
        return 1

    signal.signal(signal.SIGTERM, _sigterm_during_start)
    if args.disable_cuda_graph:  # real sglang prints this one in colour, before anything else
        raw(DISABLE_CUDA_GRAPH_DEPRECATION)
    log(f"sglang-engine-simulator: TEST DOUBLE standing in for sglang (no model, no GPU); fault={settings.fault}")
    # Like real sglang: the key in clear unless the sglang installed beside it carries the
    # redact-server-args patch set (server_args_log.py).
    log(server_args_log.server_args_line(vars(args), server_args_log.installed_redaction()))

    for path in (args.model_path, args.speculative_draft_model_path):
        if path is not None and not os.path.isdir(path):
            time.sleep(min(0.2, settings.load_s))
            raw(tracebacks.missing_model_path(path))
            return 1
    error = _resolution_errors(args)
    if error:
        raw(tracebacks.value_error(error))
        return 1

    from sglang_engine_simulator.server import Engine, serve  # noqa: PLC0415  (after the cheap checks)

    draft_config = read_model_config(args.speculative_draft_model_path) if args.speculative_draft_model_path else None
    engine = Engine(args, settings, read_model_config(args.model_path), draft_config)
    _load(engine, args, settings, clock)
    return serve(engine, start)


def _sigterm_during_start(signum, frame):
    log("Received SIGTERM while starting. Shutting down.")
    sys.stdout.flush()
    os._exit(0)


def _memory_faults(fault, args, clock: Clock, load_s: float, cuda_graph: bool) -> None:
    """The KV-cache faults, after the weights are loaded: both wordings sglang has, and CUDA OOM."""
    if fault == "not_enough_memory":  # 0.5.23's pool configurator
        clock.sleep(load_s)
        scheduler_exception(tracebacks.not_enough_memory(args.mem_fraction_static or 0.88))
    if fault == "kv_cache_too_small":  # 0.5.17 (and 0.5.23's kv_cache_configurator.py)
        clock.sleep(load_s)
        scheduler_exception(tracebacks.kv_cache_no_memory(args.mem_fraction_static or 0.0005))
    if fault == "cuda_oom" and not cuda_graph:
        clock.sleep(load_s)
        scheduler_exception(tracebacks.cuda_oom_capture(cuda_graph=False))


def _load(engine, args, settings: Settings, clock: Clock) -> None:
    """Port closed while loading: sglang's load-progress lines, and the start-time faults."""
    fault = settings.fault
    load_s = settings.fault_after_s if fault in START_FAULTS else settings.load_s
    ranks = range(max(1, args.tp_size))
    cuda_graph = not args.disable_cuda_graph and args.cuda_graph_backend_decode != "disabled"

    _load_weights(engine, fault, clock, load_s, ranks)
    clock.sleep(load_s * 0.1)
    _memory_faults(fault, args, clock, load_s, cuda_graph)
    pools = engine.hybrid
    if pools is not None:
        _hybrid_pools(engine, pools, args, ranks)
    for r in ranks:
        if pools is None:
            kv_line = f"KV Cache is allocated. #tokens: {engine.max_total_tokens}, K size: 30.12 GB, V size: 30.12 GB"
        else:
            engine.max_total_tokens, kv_line = pools.kv_line(engine.max_total_tokens)
        log(kv_line, rank=r)
        log("Memory pool end. avail mem=22.40 GB", rank=r)
    if pools is not None and pools.spec and pools.architecture == hybrid.TEXT_CLASS:
        # after the memory pool, when the attention backends are set up (model_runner.initialize)
        scheduler_exception(
            tracebacks.layer_capture_missing(
                f"Model {pools.architecture} implements neither set_dspark_layers_to_capture nor "
                "set_dflash_layers_to_capture, one of which is required for DFLASH/DSPARK."
            )
        )
    if fault == "cuda_error":
        clock.sleep(load_s)
        scheduler_exception(tracebacks.cuda_error())
    if fault == "jit_compiler_missing":  # flashinfer's attention wrappers compile their kernels at init
        log(tracebacks.NVCC_VERSION_WARNING)  # logged and survived: never the cause by itself
        clock.sleep(load_s)
        scheduler_exception(tracebacks.jit_compiler_missing())
    clock.sleep(load_s * 0.1)
    if cuda_graph:
        _capture_cuda_graphs(fault, clock, load_s, ranks)
    if fault == "no_kernel_image":  # the first attention kernel launch (capture, or the first forward)
        clock.sleep(load_s)
        scheduler_exception(tracebacks.no_kernel_image())
    else:
        clock.sleep(load_s * 0.2)
    log(
        f"max_total_num_tokens={engine.max_total_tokens}, chunked_prefill_size={args.chunked_prefill_size or 8192}, "
        f"max_prefill_tokens={args.max_prefill_tokens}, max_running_requests={engine.max_running_requests}, "
        f"context_len={engine.context_len}, available_gpu_mem=21.38 GB",
        rank=0,
    )


def _load_weights(engine, fault, clock: Clock, load_s: float, ranks) -> None:
    """Torch distributed init and the checkpoint shards (where ``crash_on_start`` fires), then the draft."""
    arch = engine.architecture
    for r in ranks:
        log("Init torch distributed begin.", rank=r)
    clock.sleep(load_s * 0.1)
    for r in ranks:
        log("Init torch distributed ends. elapsed=0.21 s, mem usage=0.10 GB", rank=r)
    for module, error in IGNORED_MODEL_IMPORTS:
        log(f"Ignore import error when loading sglang.srt.models.{module}: {error}")
    for r in ranks:
        log("Load weight begin. avail mem=139.35 GB", rank=r)
    shards = 4
    tic = time.monotonic()
    for i in range(shards + 1):
        bar = ("█" * int(10 * i / shards)).ljust(10)
        raw(f"Loading safetensors checkpoint shards: {100 * i // shards:3d}% Completed | {bar}| {i}/{shards}")
        if fault == "crash_on_start" and i == 2:
            clock.sleep(load_s)
            scheduler_exception(tracebacks.scheduler_crash_on_start(arch))
        if i < shards:
            clock.sleep(load_s * 0.5 / shards)
    elapsed = time.monotonic() - tic
    for r in ranks:
        log(
            f"Load weight end. elapsed={elapsed:.2f} s, type={arch}, dtype=torch.bfloat16, "
            "avail mem=88.21 GB, mem usage=51.14 GB.",
            rank=r,
        )
    if engine.spec_algorithm:
        log(f"Load weight begin. avail mem=88.21 GB (draft, {engine.spec_algorithm})", rank=0)
        log("Load weight end. elapsed=0.05 s, type=DFlashDraftModel, avail mem=84.02 GB, mem usage=4.19 GB.", rank=0)


def _capture_cuda_graphs(fault, clock: Clock, load_s: float, ranks) -> None:
    """CUDA graph capture (where ``cuda_oom`` fires when graphs are on)."""
    for r in ranks:
        log("Capture cuda graph begin. This can take up to several minutes. avail mem=22.40 GB", rank=r)
    if fault == "cuda_oom":
        clock.sleep(load_s)
        scheduler_exception(tracebacks.cuda_oom_capture(cuda_graph=True))
    clock.sleep(load_s * 0.2)
    for r in ranks:
        log(
            f"Capture cuda graph end. Time elapsed: {load_s * 0.2:.2f} s. mem usage=1.02 GB. avail mem=21.38 GB.",
            rank=r,
        )


def _hybrid_pools(engine, pools, args, ranks) -> None:
    """sglang 0.5.17's memory pool for a hybrid GDN target: its refusals, the request cap, the mamba pool."""
    if pools.error:
        scheduler_exception(tracebacks.hybrid_memory(pools.error))
    if pools.capped_warning:
        log(pools.capped_warning, rank=0)
    if pools.max_reqs is not None:
        engine.max_running_requests = pools.max_reqs
    for r in ranks:
        log(pools.mamba_line(), rank=r)
