"""Compiled GPU code against the GPUs' compute capabilities, over the committed data (gpu_code.yml)."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_code import (
    check_gpu_code,
    default_attention,
    files_to_read,
    flag_value,
)

REPO = pathlib.Path(__file__).resolve().parents[5]
DATA = yaml.safe_load((REPO / "roles" / "sglang_preflight" / "files" / "gpu_code.yml").read_text())
KNOWN = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "files" / "known_runtimes.yml").read_text())
# The compiled core the known runtime 0.5.17 records (what a default manifest derives).
CORE = [{"name": e["name"], "version": e["version"]} for e in KNOWN["runtimes"]["0.5.17"]["core"]]
CUBIN = [*CORE, {"name": "flashinfer-cubin", "version": "0.6.15.post1"}]
# The service role's defaults (what every GPU record ran): triton attention, pytorch sampling.
SERVICE = yaml.safe_load((REPO / "roles" / "sglang_service" / "defaults" / "main.yml").read_text())
DEFAULTS = {
    "attention_backend": SERVICE["sglang_service_attention_backend"],
    "sampling_backend": SERVICE["sglang_service_sampling_backend"],
}


def test_every_fact_names_where_it_was_read():
    for name, versions in DATA["packages"].items():
        for version, package in versions.items():
            for library in package.get("libraries", []):
                assert library.get("read"), (name, version, library["name"])
            if not package.get("libraries"):
                assert package.get("read"), (name, version)
    for backend, spec in DATA["attention_backends"].items():
        assert spec.get("read"), backend
    for backend, spec in DATA["sampling_backends"].items():
        assert spec.get("read") or spec.get("package") == "flashinfer-python", backend


def test_the_data_covers_the_known_runtime_core_versions():
    for entry in CORE:
        assert entry["version"] in DATA["packages"][entry["name"]], entry


def test_fa3_on_blackwell_is_refused_naming_flash_ops_and_its_capabilities():
    result = check_gpu_code(CUBIN, DATA, ["12.0", "12.0"], attention_backend="fa3")
    assert result["ok"] is False
    [error] = result["errors"]
    assert error.startswith(
        "sglang-kernel 0.4.5 flash_ops for attention backend fa3 (sglang_service_attention_backend)"
    )
    assert "has no code for compute capability 12.0 (sm_120): it holds SASS sm_80, sm_86, sm_90a; no PTX" in error


def test_fa3_on_h200_runs():
    result = check_gpu_code(CUBIN, DATA, ["9.0"], attention_backend="fa3")
    assert result["ok"] is True, result["errors"]
    assert any("flash_ops for attention backend fa3" in r and "sass sm_90" in r for r in result["reasons"])


def test_trtllm_mha_on_blackwell_12_is_refused_and_runs_on_10():
    refused = check_gpu_code(CUBIN, DATA, ["12.0"], attention_backend="trtllm_mha")
    assert refused["ok"] is False
    assert (
        "attention backend trtllm_mha (sglang_service_attention_backend) does not run on compute capability 12.0"
        in (refused["errors"][0])
    )
    assert check_gpu_code(CUBIN, DATA, ["10.0"], attention_backend="trtllm_mha")["ok"] is True


def test_the_roles_defaults_are_the_backends_the_gpu_records_ran():
    assert DEFAULTS == {"attention_backend": "triton", "sampling_backend": "pytorch"}


def test_the_roles_defaults_on_blackwell_pass_without_cubin_or_nvcc_with_the_reasons_listed():
    result = check_gpu_code(CORE, DATA, ["12.0", "12.0"], **DEFAULTS)
    assert result["ok"] is True, result["errors"]
    assert result["not_checked"] == []
    assert [r.split(" (", 1)[0] for r in result["reasons"]] == [
        "12.0: sglang-kernel 0.4.5 common_ops",
        "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120",
        "12.0: triton 3.6.0 compiles at run time",
        "12.0: attention backend triton",
        "12.0: sampling backend pytorch",
    ]
    assert (
        "12.0: attention backend triton (sglang_service_attention_backend) runs on triton (sglang 0.5.17"
        " srt/layers/attention/triton_backend.py" in result["reasons"][3]
    )
    assert (
        "12.0: sampling backend pytorch (sglang_service_sampling_backend) runs on torch (sglang 0.5.17"
        " srt/layers/sampler.py" in result["reasons"][4]
    )
    assert not any("flashinfer" in r for r in result["reasons"])


def test_explicit_flashinfer_sampling_without_cubin_and_without_nvcc_is_refused():
    result = check_gpu_code(CORE, DATA, ["12.0"], attention_backend="triton", sampling_backend="flashinfer")
    assert result["ok"] is False
    [error] = result["errors"]
    assert error.startswith(
        "flashinfer-python 0.6.15.post1 (sampling backend flashinfer, sglang_service_sampling_backend on compute"
        " capability 12.0) is pure Python"
    )
    assert "sglang_service_sampling_backend: pytorch" in error
    passed = check_gpu_code(CUBIN, DATA, ["12.0"], attention_backend="triton", sampling_backend="flashinfer")
    assert passed["ok"] is True, passed["errors"]
    assert any("(sampling backend flashinfer, sglang_service_sampling_backend) takes its kernels from" in r
               for r in passed["reasons"])  # fmt: skip


def test_pytorch_sampling_without_torch_in_the_manifest_is_refused():
    manifest = [e for e in CORE if e["name"] != "torch"]
    result = check_gpu_code(manifest, DATA, ["12.0"], **DEFAULTS)
    assert result["errors"] == [
        "sampling backend pytorch (sglang_service_sampling_backend) needs torch, which the manifest does not hold"
    ]


def test_sglangs_own_choices_on_blackwell_pass_with_the_reasons_when_the_manifest_brings_flashinfer_cubin():
    result = check_gpu_code(CUBIN, DATA, ["12.0"])
    assert result["ok"] is True, result["errors"]
    joined = "\n".join(result["reasons"])
    assert "12.0: sglang-kernel 0.4.5 common_ops (sm100/) runs as sass sm_120a (data for sglang-kernel 0.4.5" in joined
    assert "sm90/" not in joined  # the loader picks sm100/ on every capability but 9.0
    assert "12.0: torch 2.11.0 libtorch_cuda runs as sass sm_120" in joined
    assert "12.0: triton 3.6.0 compiles at run time" in joined
    assert (
        "flashinfer-python 0.6.15.post1 (attention backend flashinfer, sglang's default on this GPU, sampling backend"
        " flashinfer, sglang's default sampling backend) takes its kernels from flashinfer-cubin" in joined
    )


def test_sglangs_own_choices_without_flashinfer_cubin_and_without_nvcc_are_refused():
    result = check_gpu_code(CORE, DATA, ["12.0"])
    assert result["ok"] is False
    [error] = result["errors"]
    assert error.startswith(
        "flashinfer-python 0.6.15.post1 (attention backend flashinfer, sglang's default on this GPU"
    )
    assert "the manifest holds neither package and the host has no nvcc" in error
    assert "Add flashinfer-cubin==0.6.15.post1 to sglang_runtime_manifest" in error


def test_sglangs_own_choices_without_cubin_pass_when_the_host_has_nvcc():
    result = check_gpu_code(CORE, DATA, ["12.0"], host_compiler="/usr/local/cuda/bin/nvcc")
    assert result["ok"] is True
    assert any("compiles its kernels at run time with /usr/local/cuda/bin/nvcc" in r for r in result["reasons"])


def test_triton_attention_and_pytorch_sampling_need_no_flashinfer_kernels():
    result = check_gpu_code(CORE, DATA, ["12.0"], attention_backend="triton", sampling_backend="pytorch")
    assert result["ok"] is True, result["errors"]
    assert not any("flashinfer" in r for r in result["reasons"])


def test_a_host_reading_wins_over_the_data():
    readings = {
        "sgl_kernel/sm100/common_ops.abi3.so": {
            "file": "/v/sgl_kernel/sm100/common_ops.abi3.so",
            "sass": [80, 90, 100],
            "ptx": [],
        }
    }
    result = check_gpu_code(CUBIN, DATA, ["12.0"], readings=readings)
    assert result["ok"] is False
    assert result["errors"] == [
        "sglang-kernel 0.4.5 common_ops (sm100/) has no code for compute capability 12.0 (sm_120): it holds"
        " SASS sm_80, sm_90, sm_100; no PTX (read from /v/sgl_kernel/sm100/common_ops.abi3.so on the host)"
    ]


def test_a_host_reading_of_arch_specific_sm_120a_runs_on_12_0_and_is_refused_on_12_1():
    # What the reader gives for sglang-kernel 0.4.5's sm100/common_ops (test_cuda_fatbin.py, the real bytes).
    readings = {
        "sgl_kernel/sm100/common_ops.abi3.so": {
            "file": "/v/sgl_kernel/sm100/common_ops.abi3.so",
            "sass": [80, 89, 90, 100, 103, 120],
            "ptx": [],
            "sass_arch_specific": [100, 103, 120],
            "ptx_arch_specific": [],
        }
    }
    result = check_gpu_code(CUBIN, DATA, ["12.0"], readings=readings)
    assert result["ok"] is True, result["errors"]
    assert any("common_ops (sm100/) runs as sass sm_120a (read from /v/" in r for r in result["reasons"])
    result = check_gpu_code(CUBIN, DATA, ["12.1"], readings=readings)
    assert any(
        "common_ops (sm100/) has no code for compute capability 12.1 (sm_121): it holds"
        " SASS sm_80, sm_89, sm_90, sm_100a, sm_103a, sm_120a; no PTX" in e
        for e in result["errors"]
    ), result["errors"]


def test_unknown_capability_and_unknown_versions_are_warnings_not_silent_passes():
    other = [{"name": "sglang-kernel", "version": "0.4.10"}]
    result = check_gpu_code(other, DATA, [None])
    assert result["ok"] is True
    assert any("compute capability is unknown" in w for w in result["not_checked"])
    result = check_gpu_code(other, DATA, ["12.0"], attention_backend="triton")
    assert any("sglang-kernel 0.4.10 is not in the GPU code data" in w for w in result["not_checked"])


@pytest.mark.parametrize(
    ("capability", "tree", "expected"),
    [("9.0", False, "fa3"), ("9.0", True, "flashinfer"), ("10.0", False, "trtllm_mha"), ("12.0", False, "flashinfer")],
)
def test_default_attention(capability, tree, expected):
    assert default_attention(DATA, capability, tree) == expected


def test_flag_value_reads_both_spellings():
    assert flag_value(["--x", "--sampling-backend pytorch"], "--sampling-backend") == "pytorch"
    assert flag_value(["--sampling-backend=flashinfer"], "--sampling-backend") == "flashinfer"
    assert flag_value(["--sampling-backend", "pytorch"], "--sampling-backend") == "pytorch"
    assert flag_value(["--sampling-backends=x"], "--sampling-backend") is None


def test_files_to_read_are_the_pinned_libraries():
    paths = [f["path"] for f in files_to_read(CORE, DATA)]
    assert "sgl_kernel/flash_ops.abi3.so" in paths and "torch/lib/libtorch_cuda.so" in paths
    assert len(paths) == len(set(paths))


def test_sources_name_the_sglang_version_the_data_was_read_from():
    result = check_gpu_code(CUBIN, DATA, ["12.0"], attention_backend="trtllm_mha")
    [version] = list(DATA["sglang_source"])
    assert f"(sglang {version} srt/server_args.py:5801-5804" in result["errors"][0]
    assert "{sglang}" not in " ".join(result["errors"] + result["reasons"])


@pytest.mark.parametrize("host", ["ct200", "ct129"])
def test_the_committed_ct_deploy_passes_on_12_0_with_the_roles_defaults(host):
    """ct200 / ct129 with the offline manifest (no flashinfer-cubin) and the role's default backends."""
    inventory = REPO / "inventory"
    manifest = yaml.safe_load((inventory / "manifests" / "sglang-0.5.17-cu130.yml").read_text())
    host_vars = yaml.safe_load((inventory / "host_vars" / host / "main.yml").read_text())
    assert "flashinfer-cubin" not in [e["name"] for e in manifest["sglang_runtime_manifest"]]
    backends = {
        key: host_vars.get(f"sglang_service_{key}", value) for key, value in DEFAULTS.items()
    }  # fmt: skip
    result = check_gpu_code(manifest["sglang_runtime_manifest"], DATA, ["12.0"], **backends)
    assert result["ok"] is True, result["errors"]
    assert result["not_checked"] == []
    assert any(r.startswith("12.0: attention backend triton") for r in result["reasons"])
    assert any(r.startswith("12.0: sampling backend pytorch") for r in result["reasons"])
    own_choice = check_gpu_code(manifest["sglang_runtime_manifest"], DATA, ["12.0"])
    assert own_choice["ok"] is False  # sglang's own choices there: flashinfer without its kernels


# -- a hybrid target runs flashinfer's RMSNorm whatever the backends (the H200 record of 2026-12-05) --------


def test_a_hybrid_target_with_the_roles_defaults_needs_flashinfer_kernels_from_the_host_or_the_manifest():
    refused = check_gpu_code(CORE, DATA, ["12.0"], **DEFAULTS, target_architecture="hybrid_gdn")
    assert refused["ok"] is False
    [error] = refused["errors"]
    assert "the hybrid target's RMSNorm" in error and "Add flashinfer-jit-cache==0.6.15.post1" in error
    assert "choose backends without flashinfer" not in error  # the backends do not keep a hybrid off it
    with_nvcc = check_gpu_code(
        CORE, DATA, ["12.0"], **DEFAULTS, target_architecture="hybrid_gdn", host_compiler="/usr/local/cuda/bin/nvcc"
    )
    assert with_nvcc["ok"] is True
    assert any("RMSNorm" in r and "compiles its kernels at run time with /usr/local/cuda/bin/nvcc" in r
               for r in with_nvcc["reasons"])  # fmt: skip
    jit_cache = [*CORE, {"name": "flashinfer-jit-cache", "version": "0.6.15.post1"}]
    assert check_gpu_code(jit_cache, DATA, ["12.0"], **DEFAULTS, target_architecture="hybrid_gdn")["ok"] is True


def test_a_dense_target_with_the_roles_defaults_needs_no_flashinfer_kernels():
    for architecture in ("dense", ""):
        result = check_gpu_code(CORE, DATA, ["12.0"], **DEFAULTS, target_architecture=architecture)
        assert result["ok"] is True, result["errors"]
        assert not any("flashinfer" in r for r in result["reasons"])
