"""nvidia_gpu_facts end to end over recorded nvidia-smi transcripts, replayed by a fake nvidia-smi.

Covers the issue-11 GPU fixes: an excluded lost GPU is acknowledged with a warning (ct129), the
whole gathering is bounded by timeout_s and kills the process group of a hung call, and a bare
``Unknown Error`` means lost.
"""

import os
import pathlib
import time

import pytest
import yaml
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdec.sglang.plugins.module_utils._gpu import nvidia_smi
from ansible_collections.specdec.sglang.plugins.modules.nvidia_gpu_facts import ARGUMENT_SPEC, facts_and_selection
from support.module_run import set_module_args

REPO = pathlib.Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"
FAKE = FIXTURES / "fake-nvidia-smi.sh"
CT129 = REPO / "inventory" / "host_vars" / "ct129" / "main.yml"


def params(**overrides) -> dict:
    p = {name: spec["default"] for name, spec in ARGUMENT_SPEC.items()}
    p["nvidia_smi"] = str(FAKE)
    p.update(overrides)
    return p


@pytest.fixture
def run_command(monkeypatch):
    """The real AnsibleModule.run_command the module hands to nvidia_smi.collect."""
    set_module_args(monkeypatch, {})
    return AnsibleModule(argument_spec={}).run_command


@pytest.fixture
def transcript(monkeypatch):
    def use(name: str):
        directory = FIXTURES / name
        if not directory.is_dir():
            pytest.fail(f"transcript missing: {directory}")
        monkeypatch.setenv("FAKE_SMI_DIR", str(directory))

    return use


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_ct129_committed_settings_with_gpu1_lost_select_gpus_0_and_2_and_warn(run_command, transcript):
    settings = yaml.safe_load(CT129.read_text())
    transcript("constructed-device-handle-unknown-error")
    out = facts_and_selection(
        params(
            count=settings["sglang_service_tp_size"],
            exclude=settings["sglang_preflight_excluded_gpus"],
            expected_count=settings["sglang_preflight_expected_gpu_count"],
            expected_name=settings["sglang_preflight_expected_gpu_name"],
            min_cuda_version="13.0",
        ),
        run_command,
    )
    assert out["host_problems"] == []
    assert out["selection"]["ok"] is True
    assert out["selection"]["indices"] == [0, 2]
    assert [w["class"] for w in out["host_warnings"]] == ["excluded_gpu_lost"]
    message = out["host_warnings"][0]["message"]
    assert message.startswith("GPU 1 (00000000:2A:00.0) is lost and excluded")
    assert "can still disturb the others" in message


def test_lost_gpu_that_is_not_excluded_still_fails_the_count(run_command, transcript):
    transcript("constructed-device-handle-unknown-error")
    out = facts_and_selection(params(count=2, expected_count=8), run_command)
    assert [p["class"] for p in out["host_problems"]] == ["gpu_count"]
    assert "7 reachable" in out["host_problems"][0]["message"]
    assert out["host_warnings"] == []


def test_excluding_a_healthy_gpu_does_not_hide_a_lost_one(run_command, transcript):
    transcript("constructed-device-handle-unknown-error")
    out = facts_and_selection(params(count=2, exclude=["3"], expected_count=8), run_command)
    assert [p["class"] for p in out["host_problems"]] == ["gpu_count"]
    assert out["host_warnings"] == []


def test_bare_unknown_error_row_means_lost_and_is_acknowledged_when_excluded(run_command, transcript):
    transcript("constructed-bare-unknown-error")
    out = facts_and_selection(params(count=2, exclude=["1"], expected_count=8), run_command)
    gpu1 = out["gpus"][1]
    assert gpu1["lost"] is True
    assert gpu1["uuid"] is None
    assert gpu1["health"]["usable"] is False
    assert out["selection"]["indices"] == [0, 2]
    assert [w["class"] for w in out["host_warnings"]] == ["excluded_gpu_lost"]


def test_hanging_nvidia_smi_fails_within_the_budget_and_leaves_no_process(
    run_command, transcript, tmp_path, monkeypatch
):
    transcript("constructed-device-handle-unknown-error")
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_SMI_HANG", str(pids_file))
    started = time.monotonic()
    out = facts_and_selection(params(count=1, timeout_s=2, expected_count=8), run_command)
    elapsed = time.monotonic() - started
    assert elapsed < 2 + 5
    # One call only: after a hang the next call would hang too.
    assert out["commands"] == {"query_gpu": None}
    assert [p["class"] for p in out["host_problems"]] == ["nvidia_smi_hang"]
    assert "2 s budget" in out["host_problems"][0]["message"]
    pids = [int(x) for x in pids_file.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 3
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if alive(pid)] == []
    assert out["selection"]["ok"] is False


def test_three_calls_share_one_budget():
    budgets = []

    def run(argv, timeout_s):
        budgets.append(timeout_s)
        clock.now += 25  # every call takes 25 s of the 60 s budget
        if timeout_s < 25:
            return {"rc": None, "stdout": "", "stderr": "", "timed_out": True, "missing": False}
        return {"rc": 0, "stdout": "", "stderr": "", "timed_out": False, "missing": False}

    class Clock:
        now = 1000.0

        def __call__(self):
            return self.now

    clock = Clock()
    calls = nvidia_smi.collect("nvidia-smi", 60, run=run, clock=clock)
    assert budgets == [60, 35, 10]
    assert [e["class"] for e in calls["host_errors"]] == ["nvidia_smi_hang"]
    assert calls["commands"] == {"query_gpu": 0, "xml": 0, "compute_apps": None}


def test_missing_nvidia_smi_is_one_problem_not_also_no_gpu(run_command, tmp_path):
    out = facts_and_selection(params(nvidia_smi=str(tmp_path / "absent"), count=1), run_command)
    assert [p["class"] for p in out["host_problems"]] == ["nvidia_smi_missing"]


def test_healthy_transcript_runs_all_three_calls(run_command, monkeypatch):
    monkeypatch.setenv("FAKE_SMI_DIR", str(FIXTURES / "real-h200"))
    out = facts_and_selection(params(count=1, min_cuda_version="13.0"), run_command)
    assert out["commands"] == {"query_gpu": 0, "xml": 0, "compute_apps": 0}
    assert out["host_problems"] == [] and out["host_warnings"] == []
    assert out["selection"]["uuids"] == ["GPU-5a6eafee-1932-5f13-42d0-82f42c64e659"]
    assert os.access(FAKE, os.X_OK)


def test_blackwell_transcript_reports_compute_capability_per_gpu(run_command, transcript):
    transcript("constructed-rtx-pro-6000-blackwell-8gpu")
    out = facts_and_selection(
        params(count=2, expected_count=8, expected_name="NVIDIA RTX PRO 6000 Blackwell"), run_command
    )
    assert out["host_problems"] == [] and out["host_warnings"] == []
    assert [g["compute_capability"] for g in out["gpus"]] == ["12.0"] * 8
    assert out["selection"]["indices"] == [0, 1]


def test_driver_without_compute_cap_warns_and_still_reads_the_gpus(run_command, transcript):
    transcript("constructed-driver-without-compute-cap")
    out = facts_and_selection(params(count=1), run_command)
    assert [w["class"] for w in out["host_warnings"]] == ["compute_cap_unknown"]
    assert "does not know the query field compute_cap" in out["host_warnings"][0]["message"]
    assert len(out["gpus"]) == 8 and {g["compute_capability"] for g in out["gpus"]} == {None}
    assert out["commands"]["query_gpu"] == 0
    assert out["selection"]["ok"] is True


def test_the_bound_is_coreutils_timeout_around_the_call_and_its_exit_status_is_read(run_command, tmp_path):
    argvs = []

    def recording(argv):
        argvs.append(argv)
        return run_command(argv)

    hung = nvidia_smi.run_bounded(["sleep", "30"], 0.5, recording)
    assert argvs == [["timeout", "--kill-after=2", "0.500", "sleep", "30"]]
    assert hung == {"rc": None, "stdout": "", "stderr": "", "timed_out": True, "missing": False}
    missing = nvidia_smi.run_bounded([str(tmp_path / "absent")], 5, run_command)
    assert missing["missing"] is True and missing["stderr"] == f"{tmp_path / 'absent'}: not found"
    done = nvidia_smi.run_bounded(["sh", "-c", "echo out; echo err >&2; exit 3"], 5, run_command)
    assert done == {"rc": 3, "stdout": "out\n", "stderr": "err\n", "timed_out": False, "missing": False}
    assert nvidia_smi.run_bounded(["true"], 0, run_command)["timed_out"] is True


def test_collect_needs_a_run_command():
    with pytest.raises(TypeError, match="run_command"):
        nvidia_smi.collect("nvidia-smi", 60)
