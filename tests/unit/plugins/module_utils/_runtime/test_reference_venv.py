"""The reference venv read on the host (preflight) and checked with the manifest's coherence code."""

import pathlib
import zipfile

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_coherence import (
    read_reference_venv,
    reference_venv_conflicts,
)
from support.build_stub_wheels import build_all

MANIFEST = [
    {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch", "source": "wheelhouse"},
    {"name": "triton", "version": "3.6.0", "local": "", "import": "triton", "source": "reference_venv"},
    {"name": "sglang-kernel", "version": "0.4.5", "local": "", "import": "sgl_kernel", "source": "wheelhouse"},
]


def sglang_metadata(version, *requires):
    lines = ["Metadata-Version: 2.1", "Name: sglang", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + "\n\nREADME body: Requires-Dist: not a header\n"


def make_venv(root: pathlib.Path, wheels: dict, wheel_names, sglang=None) -> str:
    """A venv tree as pip leaves it: the stub wheels unpacked into site-packages, plus an sglang dist-info."""
    site = root / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    for name in wheel_names:
        with zipfile.ZipFile(wheels[name]) as archive:
            archive.extractall(site)
    if sglang is not None:
        version, text = sglang
        info = site / f"sglang-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(text)
    return str(root)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("stub-wheels")
    build_all(out)
    found = {}
    for path in out.glob("*.whl"):
        found[path.name.split("-")[0].replace("_", "-")] = path
    return found


def test_the_real_files_of_a_venv_are_read_names_versions_and_requires(tmp_path, wheels):
    venv = make_venv(
        tmp_path / "ref", wheels, ["triton", "torch"], sglang=("0.5.17", sglang_metadata("0.5.17", "torch==2.14.1"))
    )
    report = read_reference_venv(venv, ["triton", "Sglang_Kernel"])
    assert report["found"] is True
    assert report["site_packages"] == [venv + "/lib/python3.11/site-packages"]
    dists = report["distributions"]
    assert sorted(dists) == ["sglang", "triton"]  # torch is there, but nobody asked for it
    assert dists["sglang"]["version"] == "0.5.17"
    assert dists["sglang"]["requires"] == ["torch==2.14.1"]  # headers only, not the body
    assert dists["sglang"]["metadata"].endswith("site-packages/sglang-0.5.17.dist-info/METADATA")
    assert dists["triton"]["version"] == "3.6.0"


def test_a_path_without_site_packages_is_not_found(tmp_path):
    report = read_reference_venv(str(tmp_path / "nothing"), ["triton"])
    assert report == {"venv": str(tmp_path / "nothing"), "site_packages": [], "found": False, "distributions": {}}


def test_a_reference_venv_whose_sglang_wants_another_torch_is_refused(tmp_path, wheels):
    venv = make_venv(
        tmp_path / "ref", wheels, ["triton"], sglang=("0.5.17", sglang_metadata("0.5.17", "torch==2.14.1", "numpy"))
    )
    found = reference_venv_conflicts(MANIFEST, read_reference_venv(venv, ["triton"]), "0.5.17", "3.11")
    assert found["refused"] == [
        "sglang_runtime_manifest[0] (torch): sglang 0.5.17 requires torch==2.14.1 (Requires-Dist of"
        f" {venv}/lib/python3.11/site-packages/sglang-0.5.17.dist-info/METADATA on the host);"
        " the manifest has torch 2.11.0+cu130"
    ]


def test_a_reference_venv_holding_another_version_is_refused_naming_manifest_and_installed(tmp_path, wheels):
    venv = make_venv(tmp_path / "ref", wheels, ["triton"])
    manifest = [dict(MANIFEST[0]), dict(MANIFEST[1], version="3.5.0"), dict(MANIFEST[2])]
    found = reference_venv_conflicts(manifest, read_reference_venv(venv, ["triton"]), "0.5.17", "3.11")
    assert found["refused"] == [
        "sglang_runtime_manifest[1] (triton): the manifest requires triton==3.5.0 from the reference venv;"
        f" {venv} holds triton 3.6.0 (installed, {venv}/lib/python3.11/site-packages/triton-3.6.0.dist-info/METADATA)"
    ]


def test_the_installed_versions_take_the_place_of_the_entries_in_the_requirement_check(tmp_path, wheels):
    """torch from the reference venv: its own Requires-Dist (triton==3.6.0) is checked against the manifest."""
    venv = make_venv(tmp_path / "ref", wheels, ["torch", "triton"])
    manifest = [dict(MANIFEST[0], source="reference_venv"), dict(MANIFEST[1], source="index", version="3.5.0")]
    found = reference_venv_conflicts(manifest, read_reference_venv(venv, ["torch"]), "0.5.17", "3.11")
    assert found["refused"] == [
        "sglang_runtime_manifest[1] (triton): torch 2.11.0+cu130 requires triton==3.6.0 (Requires-Dist of"
        f" {venv}/lib/python3.11/site-packages/torch-2.11.0+cu130.dist-info/METADATA on the host);"
        " the manifest has triton 3.5.0"
    ]


def test_a_coherent_reference_venv_passes_and_counts_what_it_checked(tmp_path, wheels):
    venv = make_venv(
        tmp_path / "ref", wheels, ["triton"], sglang=("0.5.17", sglang_metadata("0.5.17", "torch==2.11.0"))
    )
    found = reference_venv_conflicts(MANIFEST, read_reference_venv(venv, ["triton"]), "0.5.17", "3.11")
    assert found["refused"] == [] and found["checked"] >= 2  # triton's version, sglang's torch pin


def test_an_sglang_of_another_version_in_the_reference_venv_is_noted_not_checked(tmp_path, wheels):
    venv = make_venv(
        tmp_path / "ref", wheels, ["triton"], sglang=("0.5.23", sglang_metadata("0.5.23", "torch==2.14.1"))
    )
    found = reference_venv_conflicts(MANIFEST, read_reference_venv(venv, ["triton"]), "0.5.17", "3.11")
    assert found["refused"] == []
    assert found["notes"] == [
        f"the reference venv {venv} holds sglang 0.5.23, not 0.5.17: its requirements are not those of the"
        " sglang deployed (checked on the controller instead)"
    ]


def test_a_missing_package_and_a_missing_venv_are_refused(tmp_path, wheels):
    venv = make_venv(tmp_path / "ref", wheels, [])
    found = reference_venv_conflicts(MANIFEST, read_reference_venv(venv, ["triton"]), "0.5.17", "3.11")
    assert found["refused"] == [
        "sglang_runtime_manifest[1] (triton): the manifest requires triton==3.6.0 from the reference venv"
        f" {venv}, which does not hold triton (installed: none)"
    ]
    gone = reference_venv_conflicts(MANIFEST, read_reference_venv(str(tmp_path / "gone"), ["triton"]), "0.5.17", "3.11")
    assert gone["refused"] == [
        f"sglang_runtime_reference_venv={tmp_path / 'gone'}: no lib/python*/site-packages on the host;"
        " the manifest copies triton from there (source reference_venv)"
    ]


def test_a_local_label_is_compared_when_the_installed_version_carries_one(tmp_path, wheels):
    venv = make_venv(tmp_path / "ref", wheels, ["torch"])
    manifest = [dict(MANIFEST[0], source="reference_venv", local="cu128")]
    found = reference_venv_conflicts(manifest, read_reference_venv(venv, ["torch"]), "0.5.17", "3.11")
    assert found["refused"][0].startswith(
        "sglang_runtime_manifest[0] (torch): the manifest requires torch==2.11.0+cu128 from the reference venv;"
    )
    assert "holds torch 2.11.0+cu130 (installed" in found["refused"][0]


def test_the_plan_check_reads_the_plans_manifest_version_and_python(tmp_path, wheels):
    venv = make_venv(
        tmp_path / "ref", wheels, ["triton"], sglang=("0.5.17", sglang_metadata("0.5.17", "torch==2.14.1"))
    )
    plan = {"manifest": MANIFEST, "sglang": {"version": "0.5.17"}, "python_version": "3.11", "reference_venv": venv}
    checked = deploy_plan.check_reference_venv(plan, read_reference_venv(venv, ["triton"]))
    assert len(checked["errors"]) == 1 and "sglang 0.5.17 requires torch==2.14.1" in checked["errors"][0]
    derived = dict(MANIFEST[0], source="reference_venv", derived_from="the known runtime of sglang 0.5.17")
    plan = dict(plan, manifest=[derived])
    checked = deploy_plan.check_reference_venv(plan, read_reference_venv(venv, ["torch"]))
    assert checked["errors"][0].startswith(
        "sglang_runtime_manifest[0] (derived from the known runtime of sglang 0.5.17) (torch): the manifest requires"
        " torch==2.11.0+cu130 from the reference venv"
    )
