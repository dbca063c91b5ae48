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
    # 262144 tokens (the model's own maximum; more is refused before planning) at mem 0.30: the
    # weights leave too little for the hybrid state cache on either GPU of the pair.
    rc, out, _ = run(
        {"FAKE_SMI_DIR": str(FIXTURES / "constructed-device-handle-unknown-error")},
        '{"sglang_envelope_ladder": ["full"], "sglang_service_envelopes": {"full": {"context_length": 262144,'
        ' "mem_fraction_static": 0.30, "max_running_requests": 16, "cuda_graph": true}}}',
    )
    assert rc == 2, out[-3000:]
    assert "no envelope of sglang_service_envelope_ladder=['full'] fits the selected GPUs (tp_size=2)" in out
    assert "Not enough GPU memory for hybrid (mamba/linear-attention) state cache" in out


# --- compiled GPU code against 12.0 GPUs (issue 34) ---------------------------------------

BLACKWELL = REPO / "tests" / "integration" / "gpu_preflight" / "blackwell.yml"
CUBIN = '{"extra_manifest": [{"name": "flashinfer-cubin", "version": "0.6.15.post1"}]}'
# sglang picks the attention and sampling backends itself (the roles' former defaults).
SGLANG_CHOOSES = ("sglang_service_attention_backend=", "sglang_service_sampling_backend=")


def run_blackwell(tmp_path, *extra, transcript="constructed-rtx-pro-6000-blackwell-8gpu"):
    """blackwell.yml with no nvcc reachable (PATH without it, no CUDA_HOME, no CUDA root)."""
    bin_dir = pathlib.Path(os.environ.get("VIRTUAL_ENV") or REPO / ".venv") / "bin"
    env = {
        "FAKE_SMI_DIR": str(FIXTURES / transcript),
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "CUDA_HOME": "",
        "CUDA_PATH": "",
    }
    env_all = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_CALLBACK_RESULT_FORMAT="json", **env)
    argv = [
        str(bin_dir / "ansible-playbook"),
        "-i",
        "localhost,",
        str(BLACKWELL),
        "-e",
        '{"_sglang_preflight_cuda_roots": []}',
    ]
    for value in extra:
        argv += ["-e", value]
    proc = subprocess.run(argv, cwd=REPO, env=env_all, capture_output=True, text=True, timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def gpu_code_result(out):
    line = next(ln.strip() for ln in out.splitlines() if '"msg": "GPU_CODE ' in ln)
    return json.loads(json.loads("{" + line + "}")["msg"].removeprefix("GPU_CODE "))


def test_fa3_on_12_0_gpus_is_refused_in_preflight_naming_flash_ops_and_its_capabilities(tmp_path):
    rc, out = run_blackwell(tmp_path, "sglang_service_attention_backend=fa3", CUBIN)
    assert rc == 2, out[-3000:]
    assert (
        "no GPU code for the selected GPUs: sglang-kernel 0.4.5 flash_ops for attention backend fa3"
        " (sglang_service_attention_backend) has no code for compute capability 12.0 (sm_120): it holds"
        " SASS sm_80, sm_86, sm_90a; no PTX" in out
    )
    assert '"msg": "GPU_CODE' not in out


def test_trtllm_mha_on_12_0_gpus_is_refused(tmp_path):
    rc, out = run_blackwell(tmp_path, "sglang_service_attention_backend=trtllm_mha", CUBIN)
    assert rc == 2, out[-3000:]
    assert (
        "attention backend trtllm_mha (sglang_service_attention_backend) does not run on compute capability 12.0" in out
    )


def test_the_defaults_on_12_0_pass_with_their_reasons_listed(tmp_path):
    # The role's defaults (triton attention, pytorch sampling: what the GPU records ran) on the default
    # manifest, which holds no flashinfer-cubin, on a host without nvcc.
    rc, out = run_blackwell(tmp_path)
    assert rc == 0, out[-3000:]
    result = gpu_code_result(out)
    assert result["ok"] is True and result["errors"] == [] and result["not_checked"] == []
    assert [r.split(" (", 1)[0] for r in result["reasons"]] == [
        "12.0: sglang-kernel 0.4.5 common_ops",
        "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120",
        "12.0: triton 3.6.0 compiles at run time",
        "12.0: attention backend triton",
        "12.0: sampling backend pytorch",
    ]
    assert result["reasons"][3].startswith("12.0: attention backend triton (sglang_service_attention_backend) runs on")
    assert result["reasons"][4].startswith("12.0: sampling backend pytorch (sglang_service_sampling_backend) runs on")


def test_sglangs_own_backend_choices_on_12_0_pass_with_flashinfer_cubin(tmp_path):
    rc, out = run_blackwell(tmp_path, CUBIN, *SGLANG_CHOOSES)
    assert rc == 0, out[-3000:]
    result = gpu_code_result(out)
    assert result["ok"] is True and result["errors"] == [] and result["not_checked"] == []
    assert [r.split(" (", 1)[0] for r in result["reasons"]] == [
        "12.0: sglang-kernel 0.4.5 common_ops",
        "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120",
        "12.0: triton 3.6.0 compiles at run time",
        "12.0: flashinfer-python 0.6.15.post1",
    ]
    assert "takes its kernels from flashinfer-cubin in the manifest" in result["reasons"][3]


def test_sglangs_own_choices_without_cubin_and_without_nvcc_are_refused(tmp_path):
    rc, out = run_blackwell(tmp_path, *SGLANG_CHOOSES)
    assert rc == 2, out[-3000:]
    assert "flashinfer-python 0.6.15.post1 (attention backend flashinfer, sglang's default on this GPU" in out
    assert "the manifest holds neither package and the host has no nvcc" in out


def test_explicit_flashinfer_sampling_without_cubin_and_without_nvcc_is_refused(tmp_path):
    rc, out = run_blackwell(tmp_path, "sglang_service_sampling_backend=flashinfer")
    assert rc == 2, out[-3000:]
    assert (
        "flashinfer-python 0.6.15.post1 (sampling backend flashinfer, sglang_service_sampling_backend on compute"
        " capability 12.0) is pure Python" in out
    )
    assert "the manifest holds neither package and the host has no nvcc" in out


def test_a_reference_venv_whose_sgl_kernel_lacks_the_gpus_code_is_refused(tmp_path):
    from support.cuda_elf import SASS, shared_object  # noqa: PLC0415 (tests/support is on sys.path via conftest)

    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "sglang_kernel-0.4.5.dist-info").mkdir(parents=True)
    (site / "sgl_kernel" / "sm100").mkdir(parents=True)
    so = site / "sgl_kernel" / "sm100" / "common_ops.abi3.so"
    so.write_bytes(shared_object([[(SASS, sm, 32) for sm in (80, 90, 100)]]))
    rc, out = run_blackwell(tmp_path, CUBIN, f"reference_venv={tmp_path / 'venv'}")
    assert rc == 2, out[-3000:]
    assert (
        "sglang-kernel 0.4.5 common_ops (sm100/) has no code for compute capability 12.0 (sm_120): it holds"
        f" SASS sm_80, sm_90, sm_100; no PTX (read from {so} on the host)" in out
    )


def test_a_driver_without_compute_cap_leaves_the_code_unchecked_and_says_so(tmp_path):
    rc, out = run_blackwell(tmp_path, CUBIN, transcript="constructed-driver-without-compute-cap")
    assert rc == 0, out[-3000:]
    result = gpu_code_result(out)
    assert result["reasons"] == []
    assert result["not_checked"] == [
        "a selected GPU's compute capability is unknown (nvidia-smi did not report compute_cap):"
        " its compiled code is not checked"
    ]
