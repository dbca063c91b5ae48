"""The GPU decisions of a deploy, without a playbook, through the code the deploy runs (issue 33: one decision point).

Each test goes the deploy's way (roles/sglang_preflight/tasks/main.yml): the host read once by the module
``sglang_host_facts`` (its ``main``, so ``host_facts.read_gpus`` runs the fake nvidia-smi of
tests/unit/fixtures/nvidia-smi through ``AnsibleModule.run_command`` and coreutils ``timeout``; FAKE_SMI_DIR picks
the transcript), then the plan of the host (``deploy_plan.plan`` with those facts: GPU health, choice, driver CUDA),
then what main.yml runs on the plan's GPUs: the GPU code check (module ``sglang_gpu_code``, as gpu_code.yml calls
it) and the envelope plan (``envelope_gpus`` and the action ``sglang_envelope_plan``, as envelopes.yml calls them).
The inputs are the play's variables as the action ``deploy_plan`` reads them (``INPUT_VARIABLES``): the roles'
defaults, ct129's committed settings (inventory/host_vars/ct129/main.yml) where a test says so, and the test's own.

These replace tests/integration/test_gpu_preflight_role.py, which drove the former GPU check alone
(roles/sglang_preflight/tasks/gpus.yml, a second decision path no deploy entered) through ansible-playbook.
"""

import os
import pathlib
import re
import sys
import time

import pytest
import yaml
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.specdec.sglang.plugins.action.deploy_plan import load_known_runtimes
from ansible_collections.specdec.sglang.plugins.action.sglang_envelope_plan import run_on_controller
from ansible_collections.specdec.sglang.plugins.filter.service_replicas import envelope_gpus
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.modules import sglang_gpu_code, sglang_host_facts
from support.cuda_elf import SASS, shared_object
from support.module_run import run_main, set_module_args

REPO = pathlib.Path(__file__).resolve().parents[5]
SMI = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"
FAKE_SMI = SMI / "fake-nvidia-smi.sh"
MODELS = REPO / "tests" / "unit" / "fixtures" / "models"
CT129 = yaml.safe_load((REPO / "inventory" / "host_vars" / "ct129" / "main.yml").read_text())
GPU_CODE_DATA = yaml.safe_load((REPO / "roles" / "sglang_preflight" / "files" / "gpu_code.yml").read_text())
KNOWN = load_known_runtimes()
CT129_GPU0 = "GPU-b7e1c0de-0000-5f13-42d0-82f42c64e600"
CT129_GPU2 = "GPU-b7e1c0de-0002-5f13-42d0-82f42c64e602"
# The mission's model configs (no weights) where ct129's settings name its models.
CT129_MODELS = {
    "sglang_service_model_path": str(MODELS / "qwen3.6-27b"),
    "sglang_service_draft_model_path": str(MODELS / "qwen3.6-27b-dflash"),
}
CUBIN = {"name": "flashinfer-cubin", "version": "0.6.15.post1", "source": "index"}
# sglang picks the attention and sampling backends itself.
SGLANG_CHOOSES = {"sglang_service_attention_backend": "", "sglang_service_sampling_backend": ""}
BLACKWELL = {
    "sglang_preflight_expected_gpu_name": "NVIDIA RTX PRO 6000 Blackwell",
    "sglang_preflight_expected_gpu_count": 8,
    "sglang_preflight_gpu_count": 2,
    "sglang_preflight_required_cuda_version": "13.0",
    "sglang_service_speculative_algorithm": "DFLASH",
    # no model directory: no target architecture for the GPU code check
    "sglang_service_model_path": "",
    "sglang_service_draft_model_path": "",
}


def role_defaults() -> dict:
    merged = {}
    for role in ("sglang_runtime", "sglang_service", "sglang_preflight"):
        merged.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()))
    return merged


class PlayVars(dict):
    """The play's variables; a value that is one variable (``"{{ name }}"``) reads as that variable's value, as
    Ansible templates it when a task reads it."""

    def __getitem__(self, name):
        return self._resolve(super().__getitem__(name))

    def get(self, name, default=None):
        return self[name] if name in self else default

    def _resolve(self, value):
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(v) for v in value]
        if isinstance(value, str) and "{{" in value:
            name = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", value)
            assert name, f"a template this test does not resolve: {value}"
            return self[name.group(1)]
        return value


def play(tmp_path, *settings) -> PlayVars:
    """The play's variables: the roles' defaults, then each of ``settings``. This machine's Python, a release root
    under ``tmp_path``, no port or free-disk check: nothing of this machine decides the GPU questions."""
    variables = role_defaults()
    variables.update(
        sglang_runtime_root=str(tmp_path / "sglang"),
        sglang_runtime_python_interpreter=sys.executable,
        sglang_runtime_python_version="%d.%d" % sys.version_info[:2],
        sglang_preflight_port_check=False,
        sglang_preflight_min_free_disk_gb=0,
        sglang_preflight_nvidia_smi=str(FAKE_SMI),
    )
    for more in settings:
        variables.update(more)
    return PlayVars(variables)


def plan_inputs(variables: dict) -> dict:
    """What the action deploy_plan reads from the play (its ``_inputs``): each input's variable, else its absent
    value."""
    inputs = {}
    for name, (variable, absent) in deploy_plan.INPUT_VARIABLES.items():
        value = variables.get(variable, absent)
        inputs[name] = boolean(value, strict=False) if name in deploy_plan.BOOLEAN_INPUTS else value
    return inputs


def plan(variables: dict, facts=None) -> dict:
    """``deploy_plan.plan`` as the action calls it; the controller's files (wheels, patch set directories) and the
    patch sets decide nothing about GPUs here: none, and their check stubbed (as tests/unit/.../test_host_plan.py)."""
    return deploy_plan.plan(
        plan_inputs(variables),
        KNOWN,
        [],
        lambda path: "",
        facts=facts,
        check_inputs=lambda *_a: {"inputs": {"manifest": "m"}, "inputs_sha256": "a" * 64, "errors": []},
    )


def host_facts_params(variables: dict, controller: dict) -> dict:
    """The parameters host_plan.yml passes sglang_host_facts."""
    return {
        "python": controller["python_argv0"],
        "gpu_checks": variables["sglang_preflight_gpu_checks"],
        "nvidia_smi": variables["sglang_preflight_nvidia_smi"],
        "nvidia_smi_timeout_s": variables["sglang_preflight_nvidia_smi_timeout_s"],
        "allow_busy": variables["sglang_preflight_allow_busy_gpus"],
        "busy_memory_mb": variables["sglang_preflight_busy_memory_mb"],
        "min_free_memory_mb": variables["sglang_preflight_min_free_memory_mb"],
        "models": {
            "sglang_service_model_path": variables["sglang_service_model_path"],
            "sglang_service_draft_model_path": variables["sglang_service_draft_model_path"],
        },
        "reference_venv": controller["reference_venv"] if controller["manifest_by_source"]["reference_venv"] else "",
        "reference_venv_names": [e["name"] for e in controller["manifest_by_source"]["reference_venv"]],
        "ports": controller["service_ports"] if variables["sglang_preflight_port_check"] else [],
        "unit": controller["service_unit"],
        "paths": controller["paths"],
        "files": [controller["host_files"]["ca_bundle"]] if controller["host_files"]["ca_bundle"] else [],
    }


def host_facts(monkeypatch, capsys, variables: dict, controller: dict) -> dict:
    """The module sglang_host_facts as host_plan.yml runs it."""
    set_module_args(monkeypatch, host_facts_params(variables, controller))
    result = run_main(sglang_host_facts.main, capsys)
    assert not result.get("failed"), result
    assert not result.get("deprecations"), result["deprecations"]
    return result["facts"]


def deploy_plan_of_host(monkeypatch, capsys, variables, transcript) -> dict:
    """host_plan.yml: the controller's plan, the host read once with the fake nvidia-smi, the plan of the host."""
    monkeypatch.setenv("FAKE_SMI_DIR", str(SMI / transcript))
    controller = plan(variables)
    assert controller["errors"] == [], controller["errors"]
    facts = host_facts(monkeypatch, capsys, variables, controller["plan"])
    return plan(variables, facts)


def gpu_code_params(variables: dict, built: dict) -> dict:
    """The parameters gpu_code.yml passes sglang_gpu_code (no CUDA root, as ``_sglang_preflight_cuda_roots: []``)."""
    the_plan = built["plan"]
    return {
        "manifest": the_plan["manifest"],
        "data": GPU_CODE_DATA,
        "capabilities": the_plan["host"]["gpus"]["capabilities"],
        "attention_backend": variables["sglang_service_attention_backend"],
        "sampling_backend": variables["sglang_service_sampling_backend"],
        "extra_flags": variables["sglang_service_extra_flags"],
        "tree": variables["sglang_service_speculative_algorithm"].upper() == "DDTREE",
        "target_architecture": the_plan["host"]["models"].get("target_architecture") or "",
        "venv": the_plan["reference_venv"],
        "cuda_roots": [],
    }


def gpu_code(monkeypatch, capsys, variables: dict, built: dict) -> dict:
    """The module sglang_gpu_code as gpu_code.yml runs it, on a host without nvcc (PATH without it, no CUDA_HOME or
    CUDA_PATH, no CUDA root)."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert sglang_gpu_code.host_compiler([]) is None, "nvcc in /usr/bin or /bin: this test needs a host without it"
    set_module_args(monkeypatch, gpu_code_params(variables, built))
    return run_main(sglang_gpu_code.main, capsys)


def envelope_params(variables: dict, built: dict) -> dict:
    """The parameters envelopes.yml passes the action sglang_envelope_plan for the host's single replica, on its own
    GPUs (the filter envelope_gpus)."""
    gpus = built["plan"]["host"]["gpus"]
    configs = built["plan"]["host"]["models"]["configs"]
    [replica] = envelope_gpus(
        variables["sglang_service_replicas"],
        variables["sglang_preflight_gpus"],
        gpus["uuids"],
        tp_size=variables["sglang_service_tp_size"],
        count=variables["sglang_service_replica_count"],
        unit_name=variables["sglang_service_unit_name"],
        port=variables["sglang_service_port"],
        gpu_facts=gpus["gpus"],
        assumed_mb=variables["sglang_preflight_assumed_gpu_memory_mb"],
    )
    return {
        "model_path": variables["sglang_service_model_path"],
        "draft_model_path": variables["sglang_service_draft_model_path"],
        "target_config": configs["sglang_service_model_path"],
        "draft_config": configs["sglang_service_draft_model_path"],
        "gpus": replica["gpus"],
        "tp_size": variables["sglang_service_tp_size"],
        "envelopes": variables["sglang_service_envelopes"],
        "ladder": variables["sglang_service_envelope_ladder"],
        "speculative_algorithm": variables["sglang_service_speculative_algorithm"],
        "num_draft_tokens": int(variables["sglang_service_speculative_num_draft_tokens"]),
        "ddtree_budget": variables["sglang_service_ddtree_budget"],
        "extra_flags": variables["sglang_service_extra_flags"],
        "cuda_context_mb": variables["sglang_preflight_cuda_context_mb"],
        "fail_when_none": True,
    }


def envelope_plan(variables: dict, built: dict) -> dict:
    """envelopes.yml on the plan's GPUs: the action sglang_envelope_plan with both config.json as the host facts read
    them (planned on the controller)."""
    result = run_on_controller(envelope_params(variables, built))
    assert result is not None, "the action would have read config.json on the host again"
    return result


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent counts as gone)."""
    try:
        return "\nState:\tZ" not in pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


# --- ct129: GPU 1 lost and excluded, two of the other seven chosen --------------------------------


def test_ct129_with_gpu1_lost_selects_gpus_0_and_2_and_warns(tmp_path, monkeypatch, capsys):
    variables = play(tmp_path, CT129, CT129_MODELS)
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-device-handle-unknown-error")
    assert built["errors"] == []
    gpus = built["plan"]["host"]["gpus"]
    assert gpus["uuids"] == [CT129_GPU0, CT129_GPU2]
    assert gpus["indices"] == [0, 2]
    assert built["plan"]["gpus_wanted"] == CT129["sglang_service_tp_size"] == 2
    # The action returns the plan's warnings (Ansible shows them as [WARNING]); the one about GPU 1:
    [warning] = [w for w in built["warnings"] if w.startswith("GPU 1 (00000000:2A:00.0)")]
    assert warning.startswith("GPU 1 (00000000:2A:00.0) is lost and excluded")
    assert "a lost GPU can still disturb the others" in warning


def test_ct129_without_the_exclusion_is_refused_for_the_lost_gpu(tmp_path, monkeypatch, capsys):
    variables = play(tmp_path, CT129, CT129_MODELS, {"sglang_preflight_excluded_gpus": []})
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-device-handle-unknown-error")
    [error] = built["errors"]
    assert error.startswith(
        "GPU preflight failed: [gpu_count] expected 8 GPUs, nvidia-smi shows 8 of which 7 reachable"
        " (sglang_preflight_expected_gpu_count=8,"
    )
    assert "GPU health: GPU 0: ok; GPU 1: lost: Unable to determine the device handle for GPU 0000:2A:00.0" in error
    assert not any(w.startswith("GPU 1 (") for w in built["warnings"])


def test_a_hanging_nvidia_smi_fails_the_plan_within_timeout_plus_5_s_and_leaves_no_process(
    tmp_path, monkeypatch, capsys
):
    pids_file = tmp_path / "pids"
    monkeypatch.setenv("FAKE_SMI_HANG", str(pids_file))
    variables = play(tmp_path, CT129, CT129_MODELS, {"sglang_preflight_nvidia_smi_timeout_s": 3})
    started = time.monotonic()
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-device-handle-unknown-error")
    elapsed = time.monotonic() - started
    assert elapsed < 3 + 5
    [error] = built["errors"]  # the plan refuses the host: the deploy stops there
    assert error.startswith("GPU preflight failed: [nvidia_smi_hang] ")
    assert "no answer within the 3 s budget of the whole GPU check" in error
    assert "[no_devices]" not in error and "[gpu_count]" not in error
    assert built["plan"]["host"]["gpus"]["uuids"] == []
    pids = [int(p) for p in pids_file.read_text().split()]
    assert len(pids) == 2  # the fake nvidia-smi and the child it started
    deadline = time.monotonic() + 3
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in pids if alive(pid)] == []


# --- ct129: the envelopes on the memory of the chosen GPUs ----------------------------------------

CT129_ENVELOPES = {
    # As a deploy to ct129 plans them, with the mission's model configs (no weights) and the whole ladder.
    "sglang_service_envelope_ladder": ["full", "small", "small-nograph"],
    "sglang_preflight_cuda_context_mb": 768,
    "sglang_preflight_assumed_gpu_memory_mb": 0,
}


def test_ct129_envelopes_are_planned_on_the_nvidia_smi_memory_of_the_selected_gpus(tmp_path, monkeypatch, capsys):
    variables = play(tmp_path, CT129, CT129_MODELS, CT129_ENVELOPES)
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-device-handle-unknown-error")
    assert built["errors"] == []
    result = envelope_plan(variables, built)
    assert not result.get("failed"), result.get("msg")
    assert result["fitting"] == ["full", "small", "small-nograph"] and result["skipped"] == []
    # the table: 97247 MiB free less the 768 MiB context = 94.22 GiB per GPU
    assert any("| 94.22 " in line for line in result["table"]), result["table"]


def test_ct129_ladder_with_an_envelope_no_gpu_pair_can_hold_refuses_with_the_numbers(tmp_path, monkeypatch, capsys):
    # 262144 tokens (the model's own maximum; more is refused before planning) at mem 0.30: the
    # weights leave too little for the hybrid state cache on either GPU of the pair.
    too_big = {
        "sglang_service_envelope_ladder": ["full"],
        "sglang_service_envelopes": {
            "full": {"context_length": 262144, "mem_fraction_static": 0.30, "max_running_requests": 16,
                     "cuda_graph": True}
        },
    }  # fmt: skip
    variables = play(tmp_path, CT129, CT129_MODELS, CT129_ENVELOPES, too_big)
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-device-handle-unknown-error")
    assert built["errors"] == []
    result = envelope_plan(variables, built)
    assert result["failed"] is True
    assert "no envelope of sglang_service_envelope_ladder=['full'] fits the selected GPUs (tp_size=2)" in result["msg"]
    assert "Not enough GPU memory for hybrid (mamba/linear-attention) state cache" in result["msg"]


# --- compiled GPU code against the 12.0 GPUs the plan chose (issue 34) ----------------------------


def blackwell(tmp_path, monkeypatch, capsys, *settings, transcript="constructed-rtx-pro-6000-blackwell-8gpu"):
    """The plan of an 8x RTX PRO 6000 Blackwell host (compute capability 12.0) choosing two GPUs, then the GPU code
    check on them, with the roles' defaults and ``settings``; no model directory (no target architecture)."""
    variables = play(tmp_path, BLACKWELL, *settings)
    built = deploy_plan_of_host(monkeypatch, capsys, variables, transcript)
    assert built["errors"] == [], built["errors"]
    assert built["plan"]["host"]["gpus"]["indices"] == [0, 1]
    return gpu_code(monkeypatch, capsys, variables, built)


@pytest.mark.parametrize(
    ("backend", "refusal"),
    [
        (
            "fa3",
            "no GPU code for the selected GPUs: sglang-kernel 0.4.5 flash_ops for attention backend fa3"
            " (sglang_service_attention_backend) has no code for compute capability 12.0 (sm_120): it holds"
            " SASS sm_80, sm_86, sm_90a; no PTX",
        ),
        (
            "trtllm_mha",
            "attention backend trtllm_mha (sglang_service_attention_backend) does not run on compute capability 12.0",
        ),
    ],
)
def test_an_attention_backend_without_code_for_12_0_is_refused_naming_why(
    backend, refusal, tmp_path, monkeypatch, capsys
):
    out = blackwell(
        tmp_path, monkeypatch, capsys,
        {"sglang_service_attention_backend": backend, "sglang_runtime_manifest": [CUBIN]},
    )  # fmt: skip
    assert out["failed"] is True
    assert refusal in out["msg"]


def test_the_defaults_on_12_0_pass_with_their_reasons_listed(tmp_path, monkeypatch, capsys):
    # The roles' defaults (triton attention, pytorch sampling: what the GPU records ran) on the default manifest,
    # which holds no flashinfer-cubin, on a host without nvcc.
    out = blackwell(tmp_path, monkeypatch, capsys)
    assert out.get("failed") is not True, out.get("msg")
    assert out["ok"] is True and out["errors"] == [] and out["not_checked"] == []
    assert [r.split(" (", 1)[0] for r in out["reasons"]] == [
        "12.0: sglang-kernel 0.4.5 common_ops",
        "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120",
        "12.0: triton 3.6.0 compiles at run time",
        "12.0: attention backend triton",
        "12.0: sampling backend pytorch",
    ]
    assert out["reasons"][3].startswith("12.0: attention backend triton (sglang_service_attention_backend) runs on")
    assert out["reasons"][4].startswith("12.0: sampling backend pytorch (sglang_service_sampling_backend) runs on")


def test_sglangs_own_backend_choices_on_12_0_pass_with_flashinfer_cubin(tmp_path, monkeypatch, capsys):
    out = blackwell(tmp_path, monkeypatch, capsys, {"sglang_runtime_manifest": [CUBIN]}, SGLANG_CHOOSES)
    assert out.get("failed") is not True, out.get("msg")
    assert out["ok"] is True and out["errors"] == [] and out["not_checked"] == []
    assert [r.split(" (", 1)[0] for r in out["reasons"]] == [
        "12.0: sglang-kernel 0.4.5 common_ops",
        "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120",
        "12.0: triton 3.6.0 compiles at run time",
        "12.0: flashinfer-python 0.6.15.post1",
    ]
    assert "takes its kernels from flashinfer-cubin in the manifest" in out["reasons"][3]


def test_sglangs_own_choices_without_cubin_and_without_nvcc_are_refused(tmp_path, monkeypatch, capsys):
    out = blackwell(tmp_path, monkeypatch, capsys, SGLANG_CHOOSES)
    assert out["failed"] is True
    assert "flashinfer-python 0.6.15.post1 (attention backend flashinfer, sglang's default on this GPU" in out["msg"]
    assert "the manifest holds neither package and the host has no nvcc" in out["msg"]


def test_explicit_flashinfer_sampling_without_cubin_and_without_nvcc_is_refused(tmp_path, monkeypatch, capsys):
    out = blackwell(tmp_path, monkeypatch, capsys, {"sglang_service_sampling_backend": "flashinfer"})
    assert out["failed"] is True
    assert (
        "flashinfer-python 0.6.15.post1 (sampling backend flashinfer, sglang_service_sampling_backend on compute"
        " capability 12.0) is pure Python" in out["msg"]
    )
    assert "the manifest holds neither package and the host has no nvcc" in out["msg"]


def test_a_reference_venv_whose_sgl_kernel_lacks_the_gpus_code_is_refused(tmp_path, monkeypatch, capsys):
    site = tmp_path / "venv" / "lib" / "python3.12" / "site-packages"
    (site / "sglang_kernel-0.4.5.dist-info").mkdir(parents=True)
    (site / "sgl_kernel" / "sm100").mkdir(parents=True)
    so = site / "sgl_kernel" / "sm100" / "common_ops.abi3.so"
    so.write_bytes(shared_object([[(SASS, sm, 32) for sm in (80, 90, 100)]]))
    out = blackwell(
        tmp_path, monkeypatch, capsys,
        {"sglang_runtime_manifest": [CUBIN], "sglang_runtime_reference_venv": str(tmp_path / "venv")},
    )  # fmt: skip
    assert out["failed"] is True
    assert (
        "sglang-kernel 0.4.5 common_ops (sm100/) has no code for compute capability 12.0 (sm_120): it holds"
        f" SASS sm_80, sm_90, sm_100; no PTX (read from {so} on the host)" in out["msg"]
    )


def test_a_driver_without_compute_cap_leaves_the_code_unchecked_and_says_so(tmp_path, monkeypatch, capsys):
    out = blackwell(
        tmp_path, monkeypatch, capsys, {"sglang_runtime_manifest": [CUBIN]},
        transcript="constructed-driver-without-compute-cap",
    )  # fmt: skip
    assert out.get("failed") is not True, out.get("msg")
    assert out["reasons"] == []
    assert out["not_checked"] == [
        "a selected GPU's compute capability is unknown (nvidia-smi did not report compute_cap):"
        " its compiled code is not checked"
    ]


def test_the_plan_names_the_capabilities_of_the_chosen_gpus_in_the_order_gpu_code_reads_them(
    tmp_path, monkeypatch, capsys
):
    variables = play(tmp_path, BLACKWELL, {"sglang_preflight_gpus": ["3", "1"]})
    built = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-rtx-pro-6000-blackwell-8gpu")
    gpus = built["plan"]["host"]["gpus"]
    assert gpus["capabilities"] == ["12.0", "12.0"] == [g["compute_capability"] for g in gpus["selected"]]
    unknown = deploy_plan_of_host(monkeypatch, capsys, variables, "constructed-driver-without-compute-cap")
    assert unknown["plan"]["host"]["gpus"]["capabilities"] == ["", ""]  # unknown: gpu_code says it is not checked
    assert any("does not know the query field compute_cap" in w for w in unknown["warnings"])
    off = plan(play(tmp_path, {"sglang_preflight_gpu_checks": False}), facts={"gpus": {"read": False}})
    assert off["plan"]["host"]["gpus"]["capabilities"] == []


def test_the_fake_nvidia_smi_is_executable():
    assert os.access(FAKE_SMI, os.X_OK)


# --- the tasks pass what these tests pass ---------------------------------------------------------


def task_args(tasks_file: str, module: str) -> dict:
    """The arguments of the one task of ``roles/sglang_preflight/tasks/<tasks_file>`` that calls ``module``."""
    found = []

    def walk(tasks):
        for task in tasks or []:
            if module in task:
                found.append(task[module])
            walk(task.get("block"))

    walk(yaml.safe_load((REPO / "roles" / "sglang_preflight" / "tasks" / tasks_file).read_text()))
    assert found, f"{tasks_file} calls no {module}"
    return found[0]


def test_the_tasks_pass_the_modules_the_parameters_these_tests_pass(tmp_path, monkeypatch, capsys):
    variables = play(tmp_path, CT129, CT129_MODELS)
    monkeypatch.setenv("FAKE_SMI_DIR", str(SMI / "constructed-device-handle-unknown-error"))
    controller = plan(variables)["plan"]
    built = plan(variables, host_facts(monkeypatch, capsys, variables, controller))
    host_args = task_args("host_plan.yml", "specdec.sglang.sglang_host_facts")
    assert sorted(host_args) == sorted(host_facts_params(variables, controller))
    code_args = task_args("gpu_code.yml", "specdec.sglang.sglang_gpu_code")
    assert sorted(code_args) == sorted(gpu_code_params(variables, built))
    assert code_args["capabilities"] == "{{ sglang_deploy_plan.host.gpus.capabilities }}"
    envelope_args = task_args("envelopes.yml", "specdec.sglang.sglang_envelope_plan")
    assert sorted(envelope_args) == sorted(envelope_params(variables, built))
