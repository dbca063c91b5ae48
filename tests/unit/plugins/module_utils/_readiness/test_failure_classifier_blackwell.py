"""The Blackwell (12.0) failure classes: what killed the process decides, not the noise it survived."""

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc

TAIL = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be"
    " incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
)
REPLAY = (
    "Traceback (most recent call last):\n"
    '  File ".../sglang/srt/model_executor/runner/decode_cuda_graph_runner.py", line 1233, in replay\n'
    "    output = self.backend.replay(self._replay_graph_key, forward_batch)\n"
    '  File ".../flashinfer/prefill.py", line 1706, in plan\n'
    "torch.AcceleratorError: CUDA error: an illegal memory access was encountered\n" + TAIL
)
GDN_INIT = (
    "Traceback (most recent call last):\n"
    '  File ".../sglang/srt/layers/attention/fla/chunk.py", line 233, in chunk_gated_delta_rule_fwd\n'
    "RuntimeError: CUDA error: an illegal memory access was encountered\n" + TAIL
)


def test_no_kernel_image_wins_over_the_cuda_graph_capture_wrapper_and_cuda_error():
    text = (
        "Exception: Capture cuda graph failed: CUDA error: no kernel image is available for execution on the device\n"
    )
    found = fc.classify(text)
    assert found.failure_class == "no_kernel_image"
    assert "fa3: sm_80/86/90 only" in found.hint
    assert fc.classify("RuntimeError: cudaErrorNoKernelImageForDevice").failure_class == "no_kernel_image"


def test_illegal_address_in_a_replay_frame_is_its_own_class_and_elsewhere_stays_cuda_error():
    assert fc.classify_failure(REPLAY, REPLAY).failure_class == "illegal_address_graph_replay"
    assert fc.classify_failure(GDN_INIT, GDN_INIT).failure_class == "cuda_error"
    assert fc.classify("cudaErrorIllegalAddress: an illegal memory access").failure_class == "cuda_error"


def test_the_fatal_traceback_decides_over_an_illegal_address_survived_earlier():
    """A replay fault logged and survived hours ago does not make a later OOM an illegal address."""
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert fc.classify_failure(oom, REPLAY + "\n" + oom).failure_class == "cuda_oom"


def test_each_compiler_wording_is_jit_compiler_missing():
    for line in (
        "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
        "OSError: CUDA_HOME environment variable is not set. Please set it to your CUDA install root.",
        "/bin/sh: 1: nvcc: not found",
        "FileNotFoundError: [Errno 2] No such file or directory: 'nvcc'",
        # sglang 0.5.17 on the H200, the hybrid target's flashinfer gemma_rmsnorm JIT without ninja on PATH
        "FileNotFoundError: [Errno 2] No such file or directory: 'ninja'",
    ):
        assert fc.classify(line).failure_class == "jit_compiler_missing", line


def test_sglang_s_own_nvcc_version_warning_is_not_a_cause():
    warning = (
        "Cannot run `/usr/local/cuda/bin/nvcc --version`: [Errno 2] No such file or directory: "
        "'/usr/local/cuda/bin/nvcc'"
    )
    assert fc.classify(warning) is None
