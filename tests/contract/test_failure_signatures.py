"""Contract: the failure classifier keys on text that the real sglang 0.5.23 source prints."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils import failure_classifier as fc

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
