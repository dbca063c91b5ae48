"""Runtime probe: the real probe scripts run against stub packages; failure classification."""

import json
import subprocess
import sys
import zipfile

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_manifest import compare
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_probe import (
    ProbeError,
    classify_cuda_check,
    classify_import_error,
    cuda_check,
    parse_probe_output,
    probe_venv,
)
from support.build_stub_wheels import build_all

MANIFEST = [
    {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch"},
    {"name": "triton", "version": "3.6.0", "import": "triton"},
    {"name": "sglang-kernel", "version": "0.4.5", "import": "sgl_kernel"},
    {"name": "flashinfer-python", "version": "0.6.15.post1", "import": "flashinfer"},
]
SGL_KERNEL_ERROR = (
    "ImportError: /root/venv_sglang/lib/python3.12/site-packages/sgl_kernel/sm100/common_ops.abi3.so: "
    "undefined symbol: _ZN3c104cuda9SetDeviceEa"
)


@pytest.fixture(scope="module")
def stub_site(tmp_path_factory):
    """A site dir holding the stub wheels, unpacked (what an install of purelib wheels produces)."""
    wheels = tmp_path_factory.mktemp("wheels")
    build_all(wheels)
    good = tmp_path_factory.mktemp("good-site")
    bad = tmp_path_factory.mktemp("abi-site")
    for whl in wheels.glob("*.whl"):
        zipfile.ZipFile(whl).extractall(good)
        if not whl.name.startswith("sglang_kernel"):
            zipfile.ZipFile(whl).extractall(bad)
    zipfile.ZipFile(next((wheels / "abi-mismatch").glob("*.whl"))).extractall(bad)
    return {"good": good, "abi": bad}


def test_probe_reads_versions_torch_cuda_and_imports_from_stub_packages(stub_site):
    result = probe_venv(sys.executable, MANIFEST, env={"PYTHONPATH": str(stub_site["good"])})
    assert result["packages"]["torch"]["version"] == "2.11.0+cu130"
    assert result["packages"]["sglang-kernel"]["version"] == "0.4.5"
    assert result["torch_cuda"] == "13.0"
    assert all(r["ok"] for r in result["imports"].values())
    assert compare(MANIFEST, result, cuda_version="13.0")["ok"] is True


def test_probe_classifies_undefined_symbol_as_abi_mismatch_naming_the_symbol(stub_site):
    result = probe_venv(sys.executable, MANIFEST, env={"PYTHONPATH": str(stub_site["abi"])})
    sgl = result["imports"]["sgl_kernel"]
    assert sgl["ok"] is False
    assert sgl["class"] == "abi_mismatch"
    assert sgl["symbol"] == "_ZN3c1017SymbolicShapeMeta18init_is_contiguousEv"
    assert sgl["library"].endswith("common_ops.abi3.so")
    comparison = compare(MANIFEST, result, cuda_version="13.0")
    assert [r["status"] for r in comparison["mismatches"]] == ["abi_mismatch"]


def test_probe_reports_missing_packages_as_not_installed(tmp_path):
    result = probe_venv(sys.executable, MANIFEST[:1], env={"PYTHONPATH": str(tmp_path)})
    assert result["packages"]["torch"]["version"] is None
    assert result["imports"]["torch"]["class"] == "not_installed"


def test_probe_with_a_missing_interpreter_raises_probe_error(tmp_path):
    with pytest.raises(ProbeError, match="cannot run"):
        probe_venv(str(tmp_path / "nope" / "python"), MANIFEST)


def test_field_sgl_kernel_error_is_abi_mismatch():
    result = classify_import_error(SGL_KERNEL_ERROR, "ImportError")
    assert result["class"] == "abi_mismatch"
    assert result["symbol"] == "_ZN3c104cuda9SetDeviceEa"
    assert result["library"].endswith("sgl_kernel/sm100/common_ops.abi3.so")


def test_other_import_errors_are_not_abi_mismatch():
    assert (
        classify_import_error("ModuleNotFoundError: No module named 'sgl_kernel'", "ModuleNotFoundError")["class"]
        == "not_installed"
    )
    assert (
        classify_import_error("ImportError: libcuda.so.1: cannot open shared object file", "ImportError")["class"]
        == "import_error"
    )


def test_parse_probe_output_ignores_noise_around_the_markers():
    text = 'Warning: something\nSPECDEC-PROBE-BEGIN\n{"a": 1}\nSPECDEC-PROBE-END\ntrailing\n'
    assert parse_probe_output(text) == {"a": 1}
    with pytest.raises(ProbeError):
        parse_probe_output("Segmentation fault")


def test_cuda_check_without_gpu_on_stub_torch_is_classified(stub_site):
    # The stub torch has no torch.cuda: the check fails in init, classified, not crashed.
    (result,) = cuda_check(sys.executable, ["GPU-x"], timeout_s=60, runner=_with_pythonpath(stub_site["good"]))
    assert result["ok"] is False
    assert result["class"] == "cuda_error"
    assert "AttributeError" in result["error"]


def test_cuda_check_timeout_is_a_hang():
    def hanging(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs.get("timeout"))

    (result,) = cuda_check("/venv/bin/python", ["GPU-a"], timeout_s=5, runner=hanging)
    assert result["class"] == "cuda_hang"
    assert "within 5 s" in result["error"]


def test_cuda_check_runs_one_process_per_gpu_seeing_only_that_gpu():
    seen = []

    def fake(cmd, **kwargs):
        seen.append(kwargs["env"]["CUDA_VISIBLE_DEVICES"])
        out = {"ok": True, "stage": "compare", "device_name": "NVIDIA H200", "max_abs_diff": 0.0}
        return subprocess.CompletedProcess(cmd, 0, f"SPECDEC-PROBE-BEGIN\n{json.dumps(out)}\nSPECDEC-PROBE-END\n", "")

    results = cuda_check("/venv/bin/python", ["GPU-a", "GPU-b"], runner=fake)
    assert seen == ["GPU-a", "GPU-b"]
    assert [r["class"] for r in results] == ["ok", "ok"]


@pytest.mark.parametrize(
    ("result", "stderr", "timed_out", "klass"),
    [
        ({"ok": True}, "", False, "ok"),
        (None, "", True, "cuda_hang"),
        (
            {"ok": False, "stage": "init", "error": "torch.cuda.is_available() is False (no usable)"},
            "",
            False,
            "cuda_unavailable",
        ),
        (
            {"ok": False, "stage": "matmul", "error": "RuntimeError: CUDA error: an illegal memory access"},
            "",
            False,
            "cuda_error",
        ),
        ({"ok": False, "stage": "matmul", "error": "OutOfMemoryError: CUDA out of memory."}, "", False, "cuda_oom"),
        ({"ok": False, "stage": "compare", "error": "GPU result differs"}, "", False, "wrong_result"),
        (
            {"ok": False, "stage": "import", "error": "ImportError: x.so: undefined symbol: _Z1"},
            "",
            False,
            "abi_mismatch",
        ),
        (None, "Segmentation fault", False, "probe_crashed"),
    ],
)
def test_cuda_failure_classes(result, stderr, timed_out, klass):
    assert classify_cuda_check(result, 1, stderr, timed_out) == klass


def test_cuda_check_without_torch_is_an_import_error(tmp_path):
    """The cuda program, run for real by an interpreter that has no torch, stops at the import stage."""
    empty = tmp_path / "site"
    empty.mkdir()
    (check,) = cuda_check(sys.executable, ["GPU-0"], timeout_s=60, runner=_with_pythonpath(empty))
    assert check["class"] == "import_error"
    assert "ModuleNotFoundError" in check["error"] or "No module named" in check["error"]


def _with_pythonpath(path):
    def runner(cmd, **kwargs):
        kwargs["env"] = dict(kwargs["env"], PYTHONPATH=str(path))
        return subprocess.run(cmd, **kwargs)  # noqa: PLW1510

    return runner
