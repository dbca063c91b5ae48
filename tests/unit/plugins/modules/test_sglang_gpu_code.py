"""sglang_gpu_code over venvs the test builds: the host's .so files win over the data where their version matches."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.modules import sglang_gpu_code
from support.cuda_elf import SASS, shared_object
from support.module_run import run_main, set_module_args

REPO = pathlib.Path(__file__).resolve().parents[4]
DATA = yaml.safe_load((REPO / "roles" / "sglang_preflight" / "files" / "gpu_code.yml").read_text())
MANIFEST = [
    {"name": "torch", "version": "2.11.0+cu130"},
    {"name": "triton", "version": "3.6.0"},
    {"name": "sglang-kernel", "version": "0.4.5"},
    {"name": "flashinfer-python", "version": "0.6.15.post1"},
    {"name": "flashinfer-cubin", "version": "0.6.15.post1"},
]


def venv(tmp_path, version="0.4.5", sms=(80, 89, 90, 100, 103)):
    """A venv whose sgl_kernel sm100/common_ops holds SASS for ``sms`` (no sm_120 by default)."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / f"sglang_kernel-{version}.dist-info").mkdir(parents=True)
    (site / "sgl_kernel" / "sm100").mkdir(parents=True)
    (site / "sgl_kernel" / "sm100" / "common_ops.abi3.so").write_bytes(
        shared_object([[(SASS, sm, 16) for sm in sms]] * 2)
    )
    return tmp_path / "venv"


def run(monkeypatch, capsys, **params):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    set_module_args(monkeypatch, {"manifest": MANIFEST, "data": DATA, "cuda_roots": [], **params})
    return run_main(sglang_gpu_code.main, capsys)


def test_a_reference_venv_whose_sgl_kernel_lacks_sm_120_is_refused(tmp_path, monkeypatch, capsys):
    path = venv(tmp_path)
    out = run(monkeypatch, capsys, capabilities=["12.0"], venv=str(path))
    assert out["failed"] is True
    so = f"{path}/lib/python3.11/site-packages/sgl_kernel/sm100/common_ops.abi3.so"
    assert out["readings"]["sgl_kernel/sm100/common_ops.abi3.so"] == {
        "file": so,
        "containers": 2,
        "entries": 10,
        "sass": [80, 89, 90, 100, 103],
        "ptx": [],
        "sass_arch_specific": [],
        "ptx_arch_specific": [],
    }
    assert out["msg"] == (
        "no GPU code for the selected GPUs: sglang-kernel 0.4.5 common_ops (sm100/) has no code for compute"
        " capability 12.0 (sm_120): it holds SASS sm_80, sm_89, sm_90, sm_100, sm_103; no PTX"
        f" (read from {so} on the host)"
    )


def test_the_same_venv_passes_on_an_h200_because_the_loader_takes_sm90_there(tmp_path, monkeypatch, capsys):
    out = run(monkeypatch, capsys, capabilities=["9.0"], venv=str(venv(tmp_path)))
    assert out.get("failed") is not True, out
    assert any("common_ops (sm90/) runs as sass sm_90 (data for sglang-kernel 0.4.5" in r for r in out["reasons"])


def test_a_venv_at_another_version_is_not_read(tmp_path, monkeypatch, capsys):
    out = run(monkeypatch, capsys, capabilities=["12.0"], venv=str(venv(tmp_path, version="0.4.10")))
    assert out["ok"] is True and out["readings"] == {}
    assert any(
        "holds sglang-kernel 0.4.10, the manifest 0.4.5: its files are not read" in w for w in out["not_checked"]
    )


def test_an_unreadable_library_falls_back_on_the_data_and_says_why(tmp_path, monkeypatch, capsys):
    path = venv(tmp_path)
    (path / "lib/python3.11/site-packages/sgl_kernel/sm100/common_ops.abi3.so").write_bytes(b"not an elf")
    out = run(monkeypatch, capsys, capabilities=["12.0"], venv=str(path))
    assert out["ok"] is True
    assert "not an ELF file" in out["readings"]["sgl_kernel/sm100/common_ops.abi3.so"]["error"]
    assert any("(the host's file could not be read: not an ELF file" in r for r in out["reasons"])


@pytest.mark.parametrize("where", ["PATH", "CUDA_HOME"])
def test_nvcc_on_the_host_is_found(tmp_path, monkeypatch, where):
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    monkeypatch.setenv("PATH", str(nvcc.parent) if where == "PATH" else "/nonexistent")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda") if where == "CUDA_HOME" else "/nonexistent")
    assert sglang_gpu_code.host_compiler([]) == str(nvcc)


def test_nvcc_under_a_cuda_root_is_found_and_none_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    assert sglang_gpu_code.host_compiler([str(tmp_path)]) is None
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "nvcc").write_text("#!/bin/sh\n")
    (tmp_path / "bin" / "nvcc").chmod(0o755)
    assert sglang_gpu_code.host_compiler([str(tmp_path)]) == str(tmp_path / "bin" / "nvcc")


def test_the_sampling_backend_option_reaches_the_check(monkeypatch, capsys):
    core = [e for e in MANIFEST if e["name"] != "flashinfer-cubin"]
    refused = run(
        monkeypatch, capsys, manifest=core, capabilities=["12.0"], attention_backend="triton",
        sampling_backend="flashinfer",
    )  # fmt: skip
    assert refused["failed"] is True
    assert "(sampling backend flashinfer, sglang_service_sampling_backend on compute capability 12.0)" in refused["msg"]
    passed = run(
        monkeypatch, capsys, manifest=core, capabilities=["12.0"], attention_backend="triton",
        sampling_backend="pytorch",
    )  # fmt: skip
    assert passed.get("failed") is not True, passed
    assert any(
        r.startswith("12.0: sampling backend pytorch (sglang_service_sampling_backend)") for r in passed["reasons"]
    )
