"""Runtime manifest: validation before any host change, expected/actual comparison."""

import copy
import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import (
    check_controller_inputs,
    compare,
    expected_version,
    format_table,
    normalize_name,
    validate_manifest,
    version_matches,
    wheel_filename_info,
)
from support.build_stub_wheels import build_all, check_vars

REPO = pathlib.Path(__file__).resolve().parents[5]
SHA = "a" * 64
MANIFEST = [
    {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch", "source": "index", "sha256": ""},
    {"name": "triton", "version": "3.6.0", "local": "", "import": "triton", "source": "index"},
    {
        "name": "sglang-kernel",
        "version": "0.4.10",
        "local": "",
        "import": "sgl_kernel",
        "source": "wheelhouse",
        "wheel": "/w/sglang_kernel-0.4.10-py3-none-any.whl",
        "sha256": SHA,
    },
]


def probe(**overrides):
    result = {
        "packages": {
            "torch": {"version": "2.11.0+cu130"},
            "triton": {"version": "3.6.0"},
            "sglang-kernel": {"version": "0.4.10"},
        },
        "imports": {
            "torch": {"ok": True, "version": "2.11.0+cu130"},
            "triton": {"ok": True, "version": "3.6.0"},
            "sgl_kernel": {"ok": True, "version": "0.4.10"},
        },
        "torch_cuda": "13.0",
    }
    result.update(overrides)
    return result


def test_valid_manifest_has_no_errors():
    assert validate_manifest(MANIFEST) == []


def test_wheelhouse_entry_without_sha256_is_refused_naming_variable_and_entry():
    manifest = copy.deepcopy(MANIFEST)
    manifest[2]["sha256"] = ""
    (error,) = validate_manifest(manifest)
    assert error.startswith("sglang_runtime_manifest[2] (sglang-kernel)")
    assert "needs 'sha256'" in error


def test_malformed_sha256_and_unknown_source_are_refused():
    manifest = copy.deepcopy(MANIFEST)
    manifest[0]["sha256"] = "abc"
    manifest[1]["source"] = "scp"
    errors = validate_manifest(manifest)
    assert any("not 64 hex digits" in e for e in errors)
    assert any("source 'scp' is not one of wheelhouse, index, reference_venv" in e for e in errors)


def test_wheel_file_name_must_match_the_entry_version():
    manifest = copy.deepcopy(MANIFEST)
    manifest[2]["wheel"] = "/w/sglang_kernel-0.3.21-py3-none-any.whl"
    (error,) = validate_manifest(manifest)
    assert "is sglang_kernel 0.3.21, the entry says sglang-kernel 0.4.10" in error


def test_reference_venv_source_needs_the_reference_venv_path():
    manifest = copy.deepcopy(MANIFEST)
    manifest[0]["source"] = "reference_venv"
    (error,) = validate_manifest(manifest)
    assert "sglang_runtime_reference_venv" in error
    assert validate_manifest(manifest, reference_venv="/root/venv_ref") == []


def test_local_label_inside_version_and_duplicates_are_refused():
    manifest = copy.deepcopy(MANIFEST)
    manifest[0]["version"] = "2.11.0+cu130"
    manifest.append(dict(MANIFEST[1], name="Triton"))
    errors = validate_manifest(manifest)
    assert any("carries a local label" in e for e in errors)
    assert any("listed twice" in e for e in errors)


def test_empty_manifest_is_refused():
    assert "non-empty list" in validate_manifest([])[0]


def test_matching_venv_compares_clean():
    result = compare(MANIFEST, probe(), cuda_version="13.0")
    assert result["ok"] is True
    assert [r["package"] for r in result["rows"]] == [
        "torch",
        "triton",
        "sglang-kernel",
        "torch.version.cuda",
        "import torch",
        "import triton",
        "import sgl_kernel",
    ]


def test_cu128_torch_under_a_cu130_manifest_is_a_local_and_cuda_mismatch():
    result = compare(
        MANIFEST,
        probe(
            packages={
                "torch": {"version": "2.11.0+cu128"},
                "triton": {"version": "3.6.0"},
                "sglang-kernel": {"version": "0.4.10"},
            },
            imports={
                "torch": {"ok": True, "version": "2.11.0+cu128"},
                "triton": {"ok": True},
                "sgl_kernel": {"ok": True},
            },
            torch_cuda="12.8",
        ),
        cuda_version="13.0",
    )
    statuses = {r["package"]: r["status"] for r in result["mismatches"]}
    assert statuses == {"torch": "local_mismatch", "torch.version.cuda": "cuda_mismatch"}


def test_pypi_torch_without_local_dist_tag_passes_on_its_module_version():
    ok, status = version_matches(MANIFEST[0], "2.11.0", "2.11.0+cu130")
    assert (ok, status) == (True, "ok")
    assert version_matches(MANIFEST[0], "2.11.0", "2.11.0") == (False, "local_mismatch")


def test_missing_package_and_wrong_version_are_reported():
    assert version_matches(MANIFEST[1], None) == (False, "missing")
    assert version_matches(MANIFEST[1], "3.5.1") == (False, "version_mismatch")


def test_abi_mismatch_import_shows_the_undefined_symbol_in_the_table():
    imports = probe()["imports"]
    imports["sgl_kernel"] = {"ok": False, "class": "abi_mismatch", "symbol": "_ZN3c10foo", "error": "ImportError: x"}
    result = compare(MANIFEST, probe(imports=imports), cuda_version="13.0")
    (row,) = result["mismatches"]
    assert row == {
        "package": "import sgl_kernel",
        "expected": "imports",
        "actual": "undefined symbol _ZN3c10foo",
        "status": "abi_mismatch",
    }
    table = format_table(result["rows"])
    assert "package" in table.splitlines()[0] and "expected" in table.splitlines()[0]
    assert "undefined symbol _ZN3c10foo  abi_mismatch  <-- MISMATCH" in table


def test_expected_version_joins_the_local_label():
    assert expected_version(MANIFEST[0]) == "2.11.0+cu130"
    assert expected_version(MANIFEST[1]) == "3.6.0"


def test_wheel_filename_info_and_name_normalisation():
    assert wheel_filename_info("/x/torch-2.11.0+cu130-cp312-cp312-linux_x86_64.whl") == ("torch", "2.11.0+cu130")
    assert wheel_filename_info("/x/readme.txt") is None
    assert normalize_name("sglang_kernel") == normalize_name("SGLang-Kernel")


def test_group_vars_manifests_validate():
    """The GPU-host manifest and the lab manifest in inventory/ are valid data."""
    yaml = pytest.importorskip("yaml")
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: PLC0415

    known = yaml.safe_load((REPO / deploy_plan.KNOWN_RUNTIMES_FILE).read_text())
    version = yaml.safe_load((REPO / "roles/sglang_runtime/defaults/main.yml").read_text())[
        "sglang_runtime_sglang_version"
    ]
    for rel in ("inventory/group_vars/all/runtime.yml", "inventory/group_vars/lab/runtime.yml"):
        data = yaml.safe_load((REPO / rel).read_text())
        derived = deploy_plan.derive_manifest(
            version, data.get("sglang_runtime_manifest"), known, data.get("sglang_runtime_core_sources")
        )
        assert derived["errors"] == [], rel
        manifest = derived["manifest"]
        # Jinja paths are not resolved here; only the shape is checked.
        for entry in manifest:
            if "{{" in str(entry.get("wheel", "")):
                entry["wheel"] = "/x/" + str(entry["wheel"]).rsplit("/", 1)[-1]
        assert validate_manifest(manifest, reference_venv=data.get("sglang_runtime_reference_venv")) == [], rel


def test_stub_wheels_are_deterministic_and_match_the_lab_manifest(tmp_path):
    first = build_all(tmp_path / "a")
    second = build_all(tmp_path / "b")
    assert first == second
    assert check_vars(first, REPO / "inventory" / "group_vars" / "lab" / "runtime.yml") == []


def test_missing_patch_set_names_the_sets_beside_it(tmp_path):
    for name in ("ddtree-0.5.17", "ddtree-0.5.23"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "patchset.yml").write_text("name: %s\n" % name)
    (tmp_path / "notes").mkdir()  # not a patch set: not named
    sglang = {"version": "0.5.99", "source": "index"}
    result = check_controller_inputs(
        [], sglang, patch_sets=[str(tmp_path / "ddtree-0.5.17"), str(tmp_path / "ddtree-0.5.99")]
    )
    assert result["errors"] == [
        "sglang_runtime_patch_sets[1]: %s has no patchset.yml; patch sets in %s: ddtree-0.5.17, ddtree-0.5.23"
        % (tmp_path / "ddtree-0.5.99", tmp_path)
    ]
    assert [p["dir"] for p in result["inputs"]["patch_sets"]] == ["ddtree-0.5.17"]
