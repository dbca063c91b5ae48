"""Runtime probe: the real probe scripts run against stub packages; failure classification."""

import json
import sys
import time
import zipfile

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import compare
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_probe import (
    ProbeError,
    classify_cuda_check,
    classify_import_error,
    command_runner,
    cuda_check,
    parse_probe_output,
    probe_venv,
    run_python,
)
from support.build_stub_wheels import build_all
from support.module_run import set_module_args

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


@pytest.fixture
def run_command(monkeypatch):
    """What the module hands over: command_runner over a real AnsibleModule's run_command."""
    set_module_args(monkeypatch, {})
    return command_runner(AnsibleModule(argument_spec={}))


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


def test_probe_reads_versions_torch_cuda_and_imports_from_stub_packages(stub_site, run_command):
    result = probe_venv(sys.executable, MANIFEST, env={"PYTHONPATH": str(stub_site["good"])}, run_command=run_command)
    assert result["packages"]["torch"]["version"] == "2.11.0+cu130"
    assert result["packages"]["sglang-kernel"]["version"] == "0.4.5"
    assert result["torch_cuda"] == "13.0"
    assert all(r["ok"] for r in result["imports"].values())
    assert compare(MANIFEST, result, cuda_version="13.0")["ok"] is True


def test_probe_classifies_undefined_symbol_as_abi_mismatch_naming_the_symbol(stub_site, run_command):
    result = probe_venv(sys.executable, MANIFEST, env={"PYTHONPATH": str(stub_site["abi"])}, run_command=run_command)
    sgl = result["imports"]["sgl_kernel"]
    assert sgl["ok"] is False
    assert sgl["class"] == "abi_mismatch"
    assert sgl["symbol"] == "_ZN3c1017SymbolicShapeMeta18init_is_contiguousEv"
    assert sgl["library"].endswith("common_ops.abi3.so")
    comparison = compare(MANIFEST, result, cuda_version="13.0")
    assert [r["status"] for r in comparison["mismatches"]] == ["abi_mismatch"]


def test_probe_reports_missing_packages_as_not_installed(tmp_path, run_command):
    result = probe_venv(sys.executable, MANIFEST[:1], env={"PYTHONPATH": str(tmp_path)}, run_command=run_command)
    assert result["packages"]["torch"]["version"] is None
    assert result["imports"]["torch"]["class"] == "not_installed"


def test_probe_with_a_missing_interpreter_raises_probe_error(tmp_path, run_command):
    with pytest.raises(ProbeError, match="cannot run"):
        probe_venv(str(tmp_path / "nope" / "python"), MANIFEST, run_command=run_command)


def test_a_hung_program_is_ended_by_the_timeout_around_it(run_command):
    started = time.monotonic()
    done = run_python(sys.executable, "import time; time.sleep(60)", {}, timeout_s=1, run_command=run_command)
    assert done["timed_out"] is True and done["rc"] is None
    assert time.monotonic() - started < 10


def test_the_program_source_reaches_the_interpreter_unexpanded(run_command):
    source = "import sys; print(sys.argv[1], '$HOME ~')"
    done = run_python(sys.executable, source, {"a": "$PATH"}, run_command=run_command)
    assert done["stdout"] == '{"a": "$PATH"} $HOME ~\n'
    argvs = []

    def recording(argv, environ_update):
        argvs.append((argv, environ_update))
        return 0, "", ""

    run_python("/venv/bin/python", "pass", {}, env={"X": "1"}, timeout_s=7, run_command=recording)
    ((argv, update),) = argvs
    assert argv[:5] == ["timeout", "--kill-after=5", "7", "/venv/bin/python", "-c"]
    assert update["X"] == "1"


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


def test_cuda_check_without_gpu_on_stub_torch_is_classified(stub_site, run_command):
    # The stub torch has no torch.cuda: the check fails in init, classified, not crashed.
    (result,) = cuda_check(
        sys.executable, ["GPU-x"], timeout_s=60, run_command=_with_pythonpath(run_command, stub_site["good"])
    )
    assert result["ok"] is False
    assert result["class"] == "cuda_error"
    assert "AttributeError" in result["error"]


def test_cuda_check_timeout_is_a_hang():
    def hanging(argv, environ_update):
        return 124, "", ""  # coreutils timeout: the program ran out of time

    (result,) = cuda_check("/venv/bin/python", ["GPU-a"], timeout_s=5, run_command=hanging)
    assert result["class"] == "cuda_hang"
    assert "within 5 s" in result["error"]


def test_cuda_check_runs_one_process_per_gpu_seeing_only_that_gpu():
    seen = []

    def fake(argv, environ_update):
        seen.append(environ_update["CUDA_VISIBLE_DEVICES"])
        out = {"ok": True, "stage": "compare", "device_name": "NVIDIA H200", "max_abs_diff": 0.0}
        return 0, f"SPECDEC-PROBE-BEGIN\n{json.dumps(out)}\nSPECDEC-PROBE-END\n", ""

    results = cuda_check("/venv/bin/python", ["GPU-a", "GPU-b"], run_command=fake)
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


def test_cuda_check_without_torch_is_an_import_error(tmp_path, run_command):
    """The cuda program, run for real by an interpreter that has no torch, stops at the import stage."""
    empty = tmp_path / "site"
    empty.mkdir()
    (check,) = cuda_check(sys.executable, ["GPU-0"], timeout_s=60, run_command=_with_pythonpath(run_command, empty))
    assert check["class"] == "import_error"
    assert "ModuleNotFoundError" in check["error"] or "No module named" in check["error"]


def _with_pythonpath(run_command, path):
    def runner(argv, environ_update):
        return run_command(argv, dict(environ_update, PYTHONPATH=str(path)))

    return runner
