"""The one classifier table: real sglang error strings map to the class an operator acts on."""

import re

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc

# (class, a log line as sglang 0.5.x / its dependencies print it)
REAL_LINES = [
    (
        "oom_mem_fraction",
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: mem_fraction_static=0.88",
    ),
    ("oom_mem_fraction", "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."),
    (
        # sglang 0.5.17 (and 0.5.23's kv_cache_configurator.py): the other wording, seen on the H200.
        "oom_mem_fraction",
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0005. "
        "Raise --mem-fraction-static above 0.001 (the weights alone take 0.0008 of the GPU).",
    ),
    (
        "scheduler_died",
        "Subprocess scheduler_0 (pid=4242) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
    ),
    (
        "cuda_oom",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
        "139.80 GiB of which 1.12 GiB is free.",
    ),
    (
        # Graph capture that ran out of memory is a memory failure, whatever the capture advice says.
        "cuda_oom",
        "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
        "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n",
    ),
    ("cuda_oom", "torch.cuda.OutOfMemoryError: CUDA error: out of memory"),
    (
        "cuda_graph_capture",
        "Exception: Capture cuda graph failed: operation not permitted when stream is capturing\n"
        "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n",
    ),
    ("cuda_error", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    ("cuda_error", "RuntimeError: CUDA error: device-side assert triggered"),
    ("cuda_error", "RuntimeError: CUDA driver error: unknown error"),
    ("gpu_not_visible", "RuntimeError: No CUDA GPUs are available"),
    ("cuda_error", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp"),
    (
        "abi_mismatch",
        "ImportError: /opt/venv/lib/python3.12/site-packages/sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: "
        "_ZN3c104cuda29c10_cuda_check_implementationEiPKcS2_ib",
    ),
    ("abi_mismatch", "ImportError: libcudart.so.13: cannot open shared object file: No such file or directory"),
    ("import_error", "ModuleNotFoundError: No module named 'sglang.srt.speculative.ddtree_utils'"),
    ("import_error", "ImportError: cannot import name 'DFlashWorker' from 'sglang.srt.speculative.dflash_worker'"),
    (
        "missing_model",
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/models/Qwen3.6-27B-DFlash'. Use `repo_type` argument if needed.",
    ),
    (
        "missing_model",
        "OSError: Incorrect path_or_model_id: '/models/missing'. Please provide either the path to a local folder "
        "or the repo_id of a model on the Hub.",
    ),
    ("missing_model", "OSError: /models/target does not appear to have a file named config.json."),
    (
        "port_in_use",
        "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address already in use",
    ),
    ("port_in_use", "OSError: [Errno 98] Address already in use"),
    ("port_in_use", "ValueError: port_base at 30001 is not available in 30 seconds. port_base is not available"),
    ("bad_arguments", "launch_server.py: error: argument --speculative-algorithm: invalid choice: 'DDTREE'"),
    ("bad_arguments", "ValueError: Unknown speculative algorithm name: DDTREE"),
    ("bad_arguments", "ValueError: DFLASH speculative decoding requires setting --speculative-draft-model-path."),
    (
        "wedged",
        "[2026-05-09 07:35:25] Health check failed. Server couldn't get a response from detokenizer for last 20 "
        "seconds. tic start time: 07:35:05. last_heartbeat time: 07:30:01",
    ),
    ("wedged", "[2026-05-09 07:35:25 TP0] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"),
    ("warmup_failed", "[2026-05-09 07:35:25] Initialization failed. warmup error: Traceback (most recent call last):"),
    (
        "scheduler_died",
        "[2026-05-09 07:35:25] Subprocess scheduler_0 (pid=4242) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...",
    ),
    (
        "scheduler_died",
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9). If exit code is -9 (SIGKILL), "
        "a common cause is the OS OOM killer.",
    ),
]


@pytest.mark.parametrize(("expected", "line"), REAL_LINES, ids=[f"{c}-{i}" for i, (c, _) in enumerate(REAL_LINES)])
def test_real_sglang_error_lines_get_their_class(expected, line):
    match = fc.classify(line)
    assert match is not None, line
    assert match.failure_class == expected
    assert match.hint


def test_specific_rows_win_over_generic_ones_in_table_order():
    text = (
        "ImportError: /x/sgl_kernel/common_ops.abi3.so: undefined symbol: _ZN3c10\n"  # abi before import_error
        "RuntimeError: CUDA error: out of memory\n"
    )
    assert fc.classify(text).failure_class == "abi_mismatch"
    assert fc.classify("CUDA error: out of memory").failure_class == "cuda_oom"


def test_generic_traceback_class_gives_way_to_a_specific_line_in_the_log():
    log = (
        "[TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
        "Traceback (most recent call last):\n"
        '  File "engine.py", line 2006, in _wait_for_scheduler_ready\n'
        "RuntimeError: Rank 0 scheduler died during initialization (exit code: -9).\n"
    )
    traceback = log.split("\n", 2)[2]
    match = fc.classify_failure(traceback, log)
    assert match.failure_class == "oom_mem_fraction"


def test_specific_traceback_class_wins_over_log_lines():
    log = "WARNING: ImportError: optional module missing\nRuntimeError: CUDA error: an illegal memory access\n"
    match = fc.classify_failure("RuntimeError: CUDA error: an illegal memory access", log)
    assert match.failure_class == "cuda_error"


def test_no_match_gives_none():
    assert fc.classify("KeyError: 'model.layers.0.linear_attn.dt_bias'") is None
    assert fc.classify("") is None
    assert fc.classify_failure(None, "all good") is None


def test_matched_line_is_the_whole_log_line():
    text = "first\n[TP0] RuntimeError: CUDA error: an illegal memory access was encountered\nlast"
    assert fc.classify(text).line == "[TP0] RuntimeError: CUDA error: an illegal memory access was encountered"


REQUIRED = [
    "crashed_on_start",
    "oom_mem_fraction",
    "cuda_oom",
    "cuda_error",
    "abi_mismatch",
    "import_error",
    "missing_model",
    "port_in_use",
    "restart_loop",
    "wedged",
    "probe_failed",
    "spec_mismatch",
    "low_acceptance",
    "timeout",
]


def test_every_contract_class_exists_with_a_one_line_hint():
    known = fc.classes()
    for name in REQUIRED:
        assert name in known
    for name in known:
        hint = fc.hint_for(name)
        assert hint and "\n" not in hint and len(hint) < 220, name


def test_table_rows_are_valid_regexes_with_hints():
    for row in fc.SIGNATURES:
        re.compile(row.pattern)
        assert row.hint and row.failure_class
    assert fc.hint_for("no_such_class") is None


def test_a_dead_scheduler_is_the_cause_and_the_failed_health_check_its_symptom():
    log = (
        "[2026-05-09 07:35:25] Subprocess scheduler_0 (pid=4245) crashed with exit code -9. "
        "Triggering SIGQUIT for cleanup...\n"
        "[2026-05-09 07:35:45] Health check failed. Server couldn't get a response from detokenizer for last 20 "
        "seconds.\n"
    )
    assert fc.classify_failure(None, log).failure_class == "scheduler_died"


HARMONY = (
    "[2026-11-30 18:00:01] OpenAI Responses API (/v1/responses) disabled: openai-harmony is not installed "
    "(ModuleNotFoundError: No module named 'openai_harmony')"
)


def test_a_benign_start_up_line_never_classifies():
    """0.5.17 logs this at every start and serves anyway: not an import_error."""
    assert fc.classify(HARMONY) is None
    log = HARMONY + "\n[2026-11-30 18:02:00] Subprocess scheduler_0 (pid=9) crashed with exit code -9.\n"
    assert fc.classify(log).failure_class == "scheduler_died"


def test_a_real_import_error_still_classifies_next_to_the_benign_line():
    log = HARMONY + "\nModuleNotFoundError: No module named 'sglang.srt.speculative.ddtree_utils'\n"
    assert fc.classify(log).failure_class == "import_error"


def test_died_while_serving_has_a_hint():
    assert "died_while_serving" in fc.classes()
    assert fc.hint_for("died_while_serving")
