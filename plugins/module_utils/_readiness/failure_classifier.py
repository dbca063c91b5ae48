# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one failure classifier of the collection: log text -> failure class -> hint.

``SIGNATURES`` is an ordered table. The first row whose pattern matches wins, so
specific rows come before generic ones (``undefined symbol`` before any
``ImportError``, CUDA out-of-memory before any ``CUDA error``). Patterns key on
tokens that survive sglang releases: flag names, exception types, CUDA error
names. To teach the classifier a new failure, add one row (and a test case with
the real log line).

``VERDICT_HINTS`` holds the classes the readiness state machine decides itself
(from unit state or the probe), not from log text.

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import re
from collections import namedtuple

# ``requires``: a second pattern that must also be found in the same text (the context that makes
# a generic error specific, e.g. an illegal address *during CUDA-graph replay*); None for most rows.
Signature = namedtuple("Signature", ["failure_class", "pattern", "hint", "requires"], defaults=(None,))
Classification = namedtuple("Classification", ["failure_class", "hint", "line"])

# Signature rows: (failure class, regex, one-line hint an operator can act on).
SIGNATURES = (
    # Torch / sgl_kernel built for another CUDA or torch ABI.
    Signature(
        "abi_mismatch",
        r"undefined symbol:|"
        r"lib(?:cudart|cublas|cublasLt|nvrtc|cudnn|nccl)[\w.]*\.so[\w.]*: cannot open shared object file|"
        r"(?:sgl_kernel|common_ops|flashinfer)\S*.*(?:ABI|compiled (?:against|for) .*CUDA)",
        "torch / sgl_kernel / flashinfer were built for different CUDA or torch ABIs: "
        "rebuild the venv from the runtime manifest so all of them match one CUDA (e.g. cu130)",
    ),
    # A run-time kernel compile (flashinfer's JIT, torch cpp_extension) that finds no CUDA compiler:
    # flashinfer-python without flashinfer-cubin on a host without a CUDA toolkit. Wordings:
    # flashinfer's "Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
    # torch's "CUDA_HOME environment variable is not set", a shell's "nvcc: not found", a raised
    # FileNotFoundError for nvcc, or for ninja (the H200 record 2026-12-05-h200-deploy-command:
    # flashinfer's gemma_rmsnorm built at the first prefill-graph capture, `ninja` not on the unit's
    # PATH). Not sglang's warning "Cannot run `.../nvcc --version`: [Errno 2] ...", which it logs and
    # survives (kernels/jit/utils/arch.py).
    Signature(
        "jit_compiler_missing",
        r"Could not find nvcc|CUDA_HOME environment variable is not set|\bnvcc: (?:command )?not found|"
        r"FileNotFoundError: \[Errno 2\] No such file or directory: '[^']*(?:nvcc|ninja)'",
        "a run-time kernel build (flashinfer JIT) found no nvcc or ninja: the host needs a CUDA toolkit and "
        "the unit's PATH the release venv's bin, or add flashinfer-jit-cache to the manifest",
    ),
    # A library without code for this GPU's compute capability (FA3's flash_ops on a 12.0 Blackwell:
    # sglang issues #12178, #15342). Before the CUDA-graph and generic CUDA rows.
    Signature(
        "no_kernel_image",
        r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice",
        "a library has no code for this GPU's compute capability (fa3: sm_80/86/90 only; trtllm_mha: SM100 "
        "only): choose a backend that has (triton); preflight's GPU code check names the library",
    ),
    # An illegal memory access inside a CUDA-graph replay, hours into serving: RTX PRO 6000 hosts
    # during speculative verify (sglang issue #24361, cudaErrorIllegalAddress in flashinfer's plan;
    # a fix claimed in PR #24401). Only with a replay frame in the same text; otherwise cuda_error.
    Signature(
        "illegal_address_graph_replay",
        r"an illegal memory access was encountered|cudaErrorIllegalAddress",
        "illegal address in a CUDA-graph replay (RTX PRO 6000 speculative verify, sglang #24361): the "
        "watchdog's restart brings it back; if it recurs use a *-nograph envelope, check dmesg for Xid",
        r"\breplay\b",
    ),
    # The hybrid (Gated DeltaNet / mamba) rows come before the generic memory and CUDA rows: their
    # messages also say "increase --mem-fraction-static" / "CUDA". Wordings of sglang 0.5.17, each
    # seen on the H200 (tests/unit/fixtures/sglang-0.5.17-h200-hybrid) or quoted from its source.
    # DFLASH on a target class that cannot hand the draft its hidden states (0.5.17's text class).
    Signature(
        "dflash_unsupported_target",
        r"implements neither set_dspark_layers_to_capture nor set_dflash_layers_to_capture",
        "DFLASH needs a target class that hands the draft its hidden states (sglang's text class "
        "Qwen3_5ForCausalLM does not): serve the checkpoint's own class (Qwen3_5ForConditionalGeneration)",
    ),
    # The recurrent-state pool of a hybrid model: per request slot (and per draft token under
    # speculative verify) it does not fit, or it ran out of slots while serving. A smaller envelope
    # (fewer running requests / draft tokens, a larger mem fraction) fixes it: a ladder class.
    Signature(
        "mamba_cache_oom",
        r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache|"
        r"Hybrid \(mamba/linear-attention\) state cache is too small to serve|"
        r"Not enough space for mamba cache, try to increase",
        "the hybrid model's GDN state pool does not fit (~147 MB a request for Qwen3.6-27B, more per "
        "draft token): fewer running requests / draft tokens or a larger mem fraction (next envelope)",
    ),
    Signature(
        "mamba_pingpong",
        r"Not enough space for mamba ping pong idx",
        "the mamba state pool has no slot for a request's ping-pong buffer (radix cache, extra-buffer "
        "strategy): raise --mamba-full-memory-ratio or lower --max-running-requests",
    ),
    # sglang's own Gated DeltaNet kernel / backend refusals (a CUDA error inside a GDN kernel is a
    # cuda_error: the field's was a GPU that had crashed before).
    Signature(
        "gdn_kernel_error",
        r"FlashInfer GDN [\w ()]*kernels? (?:is|are) (?:not )?(?:un)?available|"
        r"Unsupported GDN (?:decode|prefill) backend|GDN CuTe DSL backend requires CUDA|"
        r"FlashInfer GDN (?:backend requires CUDA|verify kernel only supports topk=1|MTP kernel requires)|"
        r"Tracked GDN state precedes the first FlashInfer checkpoint",
        "a Gated DeltaNet kernel is missing or refused this GPU / backend: use --linear-attn-backend "
        "triton or a flashinfer with GDN kernels for this GPU (SM90+); run the GPU preflight",
    ),
    # Tensor parallel asks for a GPU index the process does not see.
    Signature(
        "tp_exceeds_gpus",
        r"invalid device ordinal|GPU device may be out of range",
        "sglang asked for more GPUs than the process sees: --tp-size must not exceed the GPUs of the "
        "unit's CUDA_VISIBLE_DEVICES (sglang_service_gpu_uuids); select that many GPUs or lower it",
    ),
    # No GPU at all: CUDA_VISIBLE_DEVICES names an index or UUID the host does not have.
    Signature(
        "gpu_not_visible",
        r"No accelerator \(CUDA, XPU, HPU, NPU, MUSA, MPS\) or platform plugin is available|"
        r"no CUDA-capable device is detected|No CUDA GPUs are available",
        "the process sees no GPU: CUDA_VISIBLE_DEVICES names an index or UUID this host lacks (compare "
        "`nvidia-smi -L` with sglang_service_gpu_uuids), or the GPU fell off the bus (dmesg)",
    ),
    # A weights file that is cut short or damaged (safetensors cannot read its header).
    Signature(
        "model_corrupt",
        r"SafetensorError: Error while deserializing header|incomplete metadata, file not fully covered|"
        r"HeaderTooLarge|MetadataIncompleteBuffer|InvalidHeaderDeserialization",
        "a weights file is truncated or damaged (an interrupted copy): compare the shards' sizes and "
        "sha256 with the source, copy the damaged shard again, then deploy",
    ),
    # A DFlash draft made for another target (hidden size / captured layers differ).
    Signature(
        "draft_mismatch",
        r"DFLASH (?:target_hidden feature dim|fc\.weight shape) mismatch",
        "the DFlash draft does not match this target (its hidden size or target layers differ): use "
        "the draft published for exactly this target model",
    ),
    # sglang's KV pool came out empty: the static memory fraction is too small.
    Signature(
        "oom_mem_fraction",
        r"Not enough memory\. Please try to increase --mem-fraction-static|increase --mem-fraction-static|"
        r"leave no GPU memory for the KV cache|[Rr]aise --mem-fraction-static",
        "the KV cache does not fit: raise --mem-fraction-static, or lower --context-length / "
        "--max-running-requests (the next smaller envelope)",
    ),
    Signature(
        "cuda_oom",
        r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED|"
        r"cudaErrorMemoryAllocation|CUDA error: out of memory",
        "the GPU ran out of memory: use a smaller envelope (context / mem-fraction / running requests), "
        "check nvidia-smi for other processes on the selected GPUs",
    ),
    Signature(
        "cuda_graph_capture",
        r"Capture cuda graph failed",
        "CUDA graph capture failed: lower --cuda-graph-max-bs or disable CUDA graphs "
        "(the *-nograph envelope); read the exception for the underlying CUDA error",
    ),
    Signature(
        "cuda_error",
        r"CUDA error:|CUDA driver error|cudaError\w+|CUBLAS_STATUS_\w+|CUDNN_STATUS_\w+|NCCL error|"
        r"an illegal memory access was encountered|device-side assert triggered|"
        r"CUDA driver version is insufficient|Found no NVIDIA driver|uncorrectable ECC error",
        "a CUDA/GPU fault, not a config problem: run the GPU preflight (nvidia-smi health, CUDA "
        "sanity matmul) on the selected GPUs and move off a faulty GPU",
    ),
    # sglang rejected its own command line (e.g. DDTREE without the DDTree patch set).
    Signature(
        "bad_arguments",
        r"error: argument --[\w-]+|error: unrecognized arguments|invalid choice: '|"
        r"error: the following arguments are required|Unknown speculative algorithm name|"
        r"speculative decoding requires setting --[\w-]+|"
        r"Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set",
        "sglang rejected a launch flag: check the unit's flags against this sglang version "
        "(DDTREE needs the DDTree patch set applied)",
    ),
    Signature(
        "missing_model",
        r"Repo id must (?:be in the form|use alphanumeric)|HFValidationError|Incorrect path_or_model_id|"
        r"is not a local folder and is not a valid model identifier|"
        r"does not appear to have (?:a )?file named|Can't load (?:the )?(?:configuration|tokenizer) for|"
        r"No such file or directory: '[^']*(?:config\.json|\.safetensors|tokenizer[^']*)'|"
        r"[Mm]odel path .* does not exist|We couldn't connect to 'https://huggingface\.co'",
        "the model or draft path is wrong or incomplete: check --model-path and "
        "--speculative-draft-model-path exist on the host with config.json and weights",
    ),
    Signature(
        "port_in_use",
        r"[Aa]ddress already in use|Errno 98|Port is already in use|is not available in \d+ seconds|"
        r"is used by a process already",
        "another process holds the port: stop it (ss -ltnp 'sport = :PORT') or choose another port",
    ),
    Signature(
        "import_error",
        r"ModuleNotFoundError: No module named|ImportError: cannot import name|\bImportError: ",
        "the release venv is incomplete or a patch set does not match this sglang: "
        "re-run the runtime and patch steps, then verify the venv",
    ),
    # A scheduler died without a classified traceback (e.g. SIGKILLed by the OOM killer).
    # "Received sigquit from a child process" follows every scheduler exception: not a signature.
    Signature(
        "scheduler_died",
        r"Subprocess \S+ \(pid=\d+\) crashed with exit code|Rank \d+ scheduler (?:died|is dead)",
        "a scheduler process died: exit code -9 is SIGKILL, usually the host OOM killer "
        "(dmesg -T | grep -i oom) or an operator; otherwise read the traceback above it",
    ),
    # Signs of a stuck engine, logged by sglang itself.
    Signature(
        "wedged",
        r"Health check failed\. Server couldn't get a response from detokenizer|watchdog timeout",
        "the engine stopped answering: read the traceback of the stuck rank, check the GPUs, restart",
    ),
    Signature(
        "warmup_failed",
        r"Initialization failed\. warmup error",
        "sglang's own warmup request failed: read the traceback; try --disable-cuda-graph or "
        "another attention backend for this GPU",
    ),
)

# Rows that only say *that* something died, not why: a specific row anywhere in the log wins.
GENERIC_CLASSES = frozenset(("scheduler_died", "warmup_failed"))

# Lines sglang logs at every start and then serves anyway: never a cause. Seen with 0.5.17 on the
# H200: "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed
# (ModuleNotFoundError: No module named 'openai_harmony')" and "Ignore import error when loading
# sglang.srt.models.inkling: No module named 'helion'" (optional model files).
BENIGN = re.compile(
    r"\bdisabled\b[^\n]*\((?:ModuleNotFoundError|ImportError)\b|Ignore import error when loading sglang\.srt\.models\."
)

# Classes decided by the readiness state machine, not by log text.
VERDICT_HINTS = {
    "crashed_on_start": "the process died before serving: read `exception_line` and `traceback`; "
    "fix the cause before restarting (a restart will fail the same way)",
    "died_while_serving": "the server died after it had been ready, with nothing in its log saying why: "
    "check the host (dmesg -T for the OOM killer, nvidia-smi for a lost GPU) and who stopped it",
    "not_started": "the unit is not loaded or was never started: check the unit name and start it first",
    "restart_loop": "systemd keeps restarting a failing process: read `cause_class` and `traceback` "
    "of the first failed start; restarting will not fix it",
    "wedged": "the server answers metadata but never generates: the engine is stuck; read the "
    "journal for the stuck rank, check the GPUs, restart the service",
    "probe_failed": "the test generation failed: read probe.error / probe.body; check the model, "
    "the api_key and the probe settings",
    "spec_mismatch": "the server does not run the expected speculative algorithm: check "
    "--speculative-algorithm in the unit and that the patch set is applied",
    "low_acceptance": "speculative accept length is below min_accept_length: check the draft model "
    "matches the target and --speculative-num-draft-tokens matches the draft block size",
    "model_integrity": "a model file is missing or damaged (an interrupted copy): copy the named file again "
    "from the source (compare its size with the source's), then deploy",
    "timeout": "no verdict within startup_timeout: read `progress` for where the start was; "
    "raise startup_timeout for slow loads (cold kernel caches take minutes)",
}

_COMPILED = tuple(
    (row, re.compile(row.pattern), re.compile(row.requires) if row.requires else None) for row in SIGNATURES
)


def classes():
    """Every failure class the collection knows, table classes first."""
    seen = []
    for row in SIGNATURES:
        if row.failure_class not in seen:
            seen.append(row.failure_class)
    for name in VERDICT_HINTS:
        if name not in seen:
            seen.append(name)
    return seen


def hint_for(failure_class):
    """The one-line hint for a class (verdict classes first, then the first table row)."""
    if failure_class in VERDICT_HINTS:
        return VERDICT_HINTS[failure_class]
    for row in SIGNATURES:
        if row.failure_class == failure_class:
            return row.hint
    return None


def _without_benign(text):
    if not text or not BENIGN.search(text):
        return text
    return "\n".join(line for line in text.splitlines() if not BENIGN.search(line))


def classify(text):
    """Return the first table row matching ``text`` as a Classification, or None.

    ``line`` is the log line that matched (stripped), for the result's ``reason``. Lines of
    ``BENIGN`` (logged at every start, survived) never match.
    """
    text = _without_benign(text)
    if not text:
        return None
    for row, regex, requires in _COMPILED:
        match = regex.search(text)
        if match and (requires is None or requires.search(text)):
            start = text.rfind("\n", 0, match.start()) + 1
            end = text.find("\n", match.end())
            line = text[start : end if end >= 0 else len(text)].strip()
            return Classification(row.failure_class, row.hint, line)
    return None


def classify_failure(traceback_text, log_text):
    """Classify a failed start: the last traceback decides first, then the log.

    Give it the fatal part of the log (``journal.fatal_region``: what was logged after the last sign
    of progress), so that an error logged and survived earlier in the start never decides.

    A generic class (``GENERIC_CLASSES``: "a scheduler died", "warmup failed") from the last
    traceback gives way to a specific match elsewhere in the log: sglang's main process often
    raises the generic error after the scheduler logged the real one.
    """
    from_traceback = classify(traceback_text)
    if from_traceback and from_traceback.failure_class not in GENERIC_CLASSES:
        return from_traceback
    from_log = classify(log_text)
    if from_log and (from_traceback is None or from_log.failure_class not in GENERIC_CLASSES):
        return from_log
    return from_traceback or from_log
