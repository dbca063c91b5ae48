"""Contract: the failure classifier keys on text that the real sglang 0.5.23 source prints."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc

# (file in the sglang 0.5.23 tree, literal as written in its source, class): the table keys on text
# that sglang really prints, checked against the source so a wording change shows up here.
SOURCE_LITERALS = [
    (
        "sglang/srt/model_executor/pool_configurator.py",
        "Not enough memory. Please try to increase --mem-fraction-static.",
        "oom_mem_fraction",
    ),
    (
        "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
        "Capture cuda graph failed: ",
        "cuda_graph_capture",
    ),
    (
        "sglang/srt/entrypoints/http_server.py",
        "Health check failed. Server couldn't get a response from detokenizer for last ",
        "wedged",
    ),
    ("sglang/srt/entrypoints/http_server.py", "Initialization failed. warmup error: ", "warmup_failed"),
    ("sglang/srt/utils/watchdog.py", " watchdog timeout ", "wedged"),
    ("sglang/srt/server_args.py", "Port is already in use. ", "port_in_use"),
    ("sglang/srt/speculative/spec_info.py", "Unknown speculative algorithm name: ", "bad_arguments"),
    (
        "sglang/srt/arg_groups/speculative_hook.py",
        "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
        "bad_arguments",
    ),
]


@pytest.mark.parametrize(("path", "literal", "expected"), SOURCE_LITERALS)
def test_signatures_match_strings_in_the_sglang_0_5_23_source(sglang_source_tree, path, literal, expected):
    source = (sglang_source_tree / path).read_text(encoding="utf-8")
    assert literal in source, f"{path} no longer contains {literal!r}: update the classifier table"
    assert fc.classify(literal).failure_class == expected


def test_subprocess_crash_template_in_the_source_is_matched(sglang_source_tree):
    source = (sglang_source_tree / "sglang/srt/utils/watchdog.py").read_text(encoding="utf-8")
    assert 'f"Subprocess {name} (pid={proc.pid}) crashed "' in source
    assert 'f"with exit code {proc.exitcode}. "' in source
    rendered = "Subprocess scheduler_0 (pid=77) crashed with exit code -9. Triggering SIGQUIT for cleanup..."
    assert fc.classify(rendered).failure_class == "scheduler_died"


# The mission's model (issue 19): wordings of sglang 0.5.17 (the release the H200 runs) for the
# hybrid classes. The ones the H200 produced are also replayed from its real logs
# (tests/unit/plugins/module_utils/_readiness/test_failure_classifier_hybrid_logs.py); mamba_pingpong and
# gdn_kernel_error are serving-time / other-GPU failures the H200 did not produce: their source
# wording is the test.
SOURCE_LITERALS_0_5_17 = [
    (
        "sglang/srt/model_executor/model_runner_components/attention_backend_setup.py",
        "implements neither ",
        "set_dspark_layers_to_capture nor set_dflash_layers_to_capture",
        "dflash_unsupported_target",
    ),
    (
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "Not enough GPU memory for hybrid (mamba/linear-attention) state cache. ",
        "",
        "mamba_cache_oom",
    ),
    (
        "sglang/srt/mem_cache/kv_cache_configurator.py",
        "Hybrid (mamba/linear-attention) state cache is too small to serve ",
        "",
        "mamba_cache_oom",
    ),
    (
        "sglang/srt/mem_cache/memory_pool.py",
        "Not enough space for mamba cache, try to increase --mamba-full-memory-ratio or --max-mamba-cache-size.",
        "",
        "mamba_cache_oom",
    ),
    (
        "sglang/srt/mem_cache/memory_pool.py",
        "Not enough space for mamba ping pong idx, try to increase --mamba-full-memory-ratio.",
        "",
        "mamba_pingpong",
    ),
    (
        "sglang/srt/layers/attention/linear/kernels/gdn_flashinfer.py",
        "FlashInfer GDN kernels are not available. ",
        "",
        "gdn_kernel_error",
    ),
    (
        "sglang/srt/layers/attention/linear/kernels/gdn_flashinfer.py",
        "FlashInfer GDN MTP (verify) kernel is unavailable.",
        "",
        "gdn_kernel_error",
    ),
    (
        "sglang/srt/layers/attention/linear/kernels/gdn_flashinfer.py",
        "FlashInfer GDN verify kernel only supports topk=1 ",
        "",
        "gdn_kernel_error",
    ),
    ("sglang/srt/layers/attention/linear/gdn_backend.py", "Unsupported GDN decode backend: ", "", "gdn_kernel_error"),
    ("sglang/srt/layers/attention/linear/gdn_backend.py", "GDN CuTe DSL backend requires CUDA", "", "gdn_kernel_error"),
    ("sglang/srt/models/dflash.py", "DFLASH fc.weight shape mismatch. ", "", "draft_mismatch"),
    ("sglang/srt/models/dflash.py", '"DFLASH target_hidden feature dim mismatch. "', "", "draft_mismatch"),
    (
        "sglang/srt/utils/common.py",
        "No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) or platform plugin is available.",
        "",
        "gpu_not_visible",
    ),
]


@pytest.mark.parametrize(("path", "literal", "rest", "expected"), SOURCE_LITERALS_0_5_17)
def test_hybrid_signatures_match_strings_in_the_sglang_0_5_17_source(sglang_tree, path, literal, rest, expected):
    """A literal split over two source strings is given as (literal, rest): both must be in the file."""
    source = (sglang_tree("0.5.17") / path).read_text(encoding="utf-8")
    for part in (literal, rest):
        assert part in source, f"{path} (0.5.17) no longer contains {part!r}: update the classifier table"
    assert fc.classify((literal + rest).strip('"')).failure_class == expected
