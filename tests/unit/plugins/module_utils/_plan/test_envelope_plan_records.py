"""The planner against what sglang logged on the H200 (tests/device/records/*/envelopes.json), within 5%.

Only measured numbers are compared (null = not measured); a run with no comparable number fails. A
logged size carries two decimals, so a difference within half of its last digit also agrees.
"""

import json
import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan import envelope_plan as ep

REPO = pathlib.Path(__file__).resolve().parents[5]
RECORDS = sorted((REPO / "tests" / "device" / "records").glob("*/envelopes.json"))
TOLERANCE = 0.05
# measured key -> (planned key, half of the last printed digit)
NUMBERS = {
    "weights_gb": ("weights_gb", 0.005),
    "mamba_ssm_gb": ("mamba_ssm_gb", 0.005),
    "mamba_conv_gb": ("mamba_conv_gb", 0.005),
    "mamba_slots": ("mamba_slots", 0),
    "intermediate_ssm_gb": ("intermediate_ssm_gb", 0.005),
    "intermediate_conv_gb": ("intermediate_conv_gb", 0.005),
    "kv_tokens": ("kv_tokens", 0),
    "kv_k_gb": ("kv_k_gb", 0.005),
    "kv_v_gb": ("kv_v_gb", 0.005),
    "min_viable_mem_fraction": ("min_viable_mem_fraction", 0.0005),
}


def runs():
    found = []
    for path in RECORDS:
        for run in json.loads(path.read_text())["runs"]:
            found.append(pytest.param(run, id=f"{path.parent.name}:{run['name']}"))
    return found


def plan_run(run: dict) -> dict:
    tp = int(run["tp_size"])
    free_mb = float(run["gpu_free_gb_before_load"]) * 1024
    total_mb = float(run.get("gpu_total_gb") or run["gpu_free_gb_before_load"]) * 1024
    gpus = [{"memory_total_mb": total_mb, "memory_free_mb": free_mb}] * tp
    envelope = dict(run["envelope"])
    flags = " ".join(run.get("launch_flags") or [])
    return ep.plan_envelope(
        run["target_config"],
        run.get("draft_config"),
        gpus,
        tp,
        envelope,
        cuda_context_mb=0,  # gpu_free_gb_before_load is sglang's own pre-load number
        disable_radix_cache=bool(envelope.get("disable_radix_cache")) or "--disable-radix-cache" in flags,
    )


def test_there_are_recorded_runs():
    assert RECORDS, "no tests/device/records/*/envelopes.json"
    assert any(True for _ in runs())


@pytest.mark.parametrize("run", runs())
def test_planner_matches_the_recorded_run(run):
    measured = run["measured"]
    plan = plan_run(run)
    compared = []
    if measured.get("outcome") is not None:
        predicted = "serves" if plan["error"] is None else "refused"
        assert predicted == measured["outcome"], (run["name"], plan["error"])
        compared.append("outcome")
    if measured.get("error"):
        # sglang's sentence before its numbers (the wording is sglang's; the numbers are compared above)
        head = measured["error"].split(" Raise ")[0].split(" Computed ")[0].split(" max_mamba_cache_size=")[0]
        assert plan["error"] and plan["error"].startswith(head), (plan["error"], head)
        compared.append("error")
    rows = []
    for key, (planned_key, half_digit) in NUMBERS.items():
        want = measured.get(key)
        if want is None:
            continue
        got = plan[planned_key]
        assert got is not None, f"{run['name']}: {key} measured {want}, the planner predicts none ({plan['error']})"
        diff = abs(got - want)
        rows.append(f"{key}: planned {got:.4f} measured {want} ({100 * diff / want if want else 0:.2f}%)")
        assert diff <= max(TOLERANCE * abs(want), half_digit), rows[-1]
        compared.append(key)
    assert compared and any(k in NUMBERS for k in compared), f"{run['name']}: no measured number to compare"
    print("\n".join([run["name"], *rows]))
