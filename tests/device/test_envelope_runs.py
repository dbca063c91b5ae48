"""The recorded envelope numbers are sglang's own log lines (tests/device/envelope_runs.py's parser).

Every run of tests/device/records/*/envelopes.json that names a log is parsed again from that log:
the measured numbers must be exactly what the parser reads there (nothing typed in by hand), and the
parser must read the real 0.5.17 lines it was written for.
"""

import json
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import envelope_runs  # noqa: E402

RECORDS = sorted((HERE / "records").glob("*/envelopes.json"))
KEYS = ("weights_gb", "mamba_ssm_gb", "mamba_conv_gb", "mamba_slots", "intermediate_ssm_gb",
        "intermediate_conv_gb", "kv_tokens", "kv_k_gb", "kv_v_gb", "min_viable_mem_fraction")  # fmt: skip


def logged_runs():
    found = []
    for path in RECORDS:
        for run in json.loads(path.read_text())["runs"]:
            if run["measured"].get("log"):
                found.append(pytest.param(path.parent, run, id=f"{path.parent.name}:{run['name']}"))
    return found


@pytest.mark.parametrize(("folder", "run"), logged_runs())
def test_each_recorded_number_is_read_from_its_log(folder, run):
    parsed = envelope_runs.parse_log((folder / run["measured"]["log"]).read_text(errors="replace"))
    for key in KEYS:
        assert run["measured"][key] == parsed[key], key
    assert run["gpu_free_gb_before_load"] == parsed["gpu_free_gb_before_load"]
    if run["measured"]["outcome"] == "refused":
        assert run["measured"]["error"] == parsed["error"]


def test_the_parser_reads_the_real_hybrid_lines():
    folder = HERE / "records" / "2026-12-01-h200-hybrid" / "logs"
    full = envelope_runs.parse_log((folder / "cond-dflash-131k-0.88-16-graphs.log").read_text(errors="replace"))
    assert (full["weights_class"], full["weights_gb"], full["draft_weights_gb"]) == (
        "Qwen3_5ForConditionalGeneration", 51.05, 3.38,
    )  # fmt: skip
    assert (full["mamba_slots"], full["mamba_ssm_gb"], full["intermediate_ssm_gb"]) == (18, 2.67, 9.0)
    assert full["mamba_capped_max_running_requests"] == 3 and full["max_running_requests"] == 3
    assert [p["tokens"] for p in full["kv_pools"]] == [202106, 202106]
    refused = envelope_runs.parse_log((folder / "text-131k-0.50-16.log").read_text(errors="replace"))
    assert refused["error"].startswith("RuntimeError: Not enough GPU memory for hybrid")
    assert refused["kv_tokens"] is None and refused["mamba_slots"] is None


def test_the_envelopes_name_the_flags_they_ran_with():
    flags = envelope_runs.flags_for(pathlib.Path("/m"), "27b-conditional", True, envelope_runs.RUNS[
        "cond-dflash-131k-0.88-16-graphs"][2])  # fmt: skip
    assert "--disable-cuda-graph" not in flags and "--disable-radix-cache" not in flags
    assert flags[flags.index("--speculative-num-draft-tokens") + 1] == "16"
    assert flags[flags.index("--load-format") + 1] == "dummy"
