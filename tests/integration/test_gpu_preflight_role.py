"""The sglang_preflight role over recorded nvidia-smi transcripts, with ct129's committed settings.

Runs tests/integration/gpu_preflight/ct129.yml on the controller (connection local) with a fake
nvidia-smi: GPU 1 lost and excluded is acknowledged with a warning and GPUs 0 and 2 are selected;
a hanging nvidia-smi fails within timeout_s + 5 s and leaves no process behind.
"""

import json
import os
import pathlib
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
PLAYBOOK = REPO / "tests" / "integration" / "gpu_preflight" / "ct129.yml"
FIXTURES = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"


def run(extra_env, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_DEPRECATION_WARNINGS="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    env.update(extra_env)
    argv = ["ansible-playbook", "-i", "localhost,", str(PLAYBOOK)]
    for value in extra:
        argv += ["-e", value]
    started = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - started


def test_ct129_with_gpu1_lost_selects_gpus_0_and_2_and_warns():
    rc, out, _ = run({"FAKE_SMI_DIR": str(FIXTURES / "constructed-device-handle-unknown-error")})
    assert rc == 0, out[-3000:]
    line = next(ln.strip() for ln in out.splitlines() if '"msg": "SELECTED ' in ln)
    selected = json.loads(json.loads("{" + line + "}")["msg"].removeprefix("SELECTED "))
    assert selected == ["GPU-b7e1c0de-0000-5f13-42d0-82f42c64e600", "GPU-b7e1c0de-0002-5f13-42d0-82f42c64e602"]
    warning = " ".join(out.split("[WARNING]: GPU 1 (00000000:2A:00.0)", 1)[1].split()[:40])
    assert "is lost and excluded" in warning
    assert "a lost GPU can still disturb the others" in warning
    assert "[DEPRECATION WARNING]" not in out


def test_hanging_nvidia_smi_fails_within_timeout_plus_5_s_and_leaves_no_process(tmp_path):
    pids_file = tmp_path / "pids"
    rc, out, elapsed = run(
        {"FAKE_SMI_DIR": str(FIXTURES / "constructed-device-handle-unknown-error"), "FAKE_SMI_HANG": str(pids_file)},
        "sglang_preflight_nvidia_smi_timeout_s=3",
    )
    assert rc == 2, out[-3000:]
    assert "[nvidia_smi_hang]" in out
    assert "[no_devices]" not in out and "[gpu_count]" not in out
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2  # the fake nvidia-smi and the child it started
    # The module's own share of the run: the playbook also starts Ansible itself (a few seconds).
    assert elapsed < 3 + 5 + 15
    assert [p for p in pids if running(p)] == []


def running(pid):
    try:
        return "\nState:\tZ" not in pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_ct129_envelopes_are_planned_on_the_nvidia_smi_memory_of_the_selected_gpus():
    rc, out, _ = run({"FAKE_SMI_DIR": str(FIXTURES / "constructed-device-handle-unknown-error")})
    assert rc == 0, out[-3000:]
    line = next(ln.strip() for ln in out.splitlines() if '"msg": "PLAN ' in ln)
    plan = json.loads(json.loads("{" + line + "}")["msg"].removeprefix("PLAN "))
    assert plan == {"fitting": ["full", "small", "small-nograph"], "skipped": []}
    assert "| 94.22 " in out  # the table: 97247 MiB free less the 768 MiB context = 94.22 GiB per GPU


def test_ct129_ladder_with_an_envelope_no_gpu_pair_can_hold_refuses_with_the_numbers():
    rc, out, _ = run(
        {"FAKE_SMI_DIR": str(FIXTURES / "constructed-device-handle-unknown-error")},
        '{"sglang_envelope_ladder": ["full"], "sglang_service_envelopes": {"full": {"context_length": 4194304,'
        ' "mem_fraction_static": 0.88, "max_running_requests": 16, "cuda_graph": true}}}',
    )
    assert rc == 2, out[-3000:]
    assert "no envelope of sglang_service_envelope_ladder=['full'] fits the selected GPUs (tp_size=2)" in out
    assert "fewer than one request of context_length 4194304" in out
