"""The manifest follows the chosen sglang version: known_runtimes.yml decides the core, explicit pins win."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan

REPO = pathlib.Path(__file__).resolve().parents[5]
KNOWN = yaml.safe_load((REPO / deploy_plan.KNOWN_RUNTIMES_FILE).read_text())
GPU_VARS = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "runtime.yml").read_text())
DEFAULT_VERSION = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())[
    "sglang_runtime_sglang_version"
]


def no_wheel(path):
    raise OSError(f"no wheel read expected: {path}")


def core_of(version):
    return {p["name"]: p for p in KNOWN["runtimes"][version]["core"]}


def plan_for(version, manifest=(), sources=None, reference_venv="/root/venv_sglang"):
    return deploy_plan.build_plan(
        {
            "sglang": {"version": version, "source": "index"},
            "manifest": list(manifest),
            "core_sources": sources or {},
            "python_version": "3.12",
            "cuda_version": "13.0",
            "runtime_root": "/opt/sglang",
            "reference_venv": reference_venv,
        },
        KNOWN,
        [],
        no_wheel,
    )


@pytest.mark.parametrize("version", sorted(KNOWN["runtimes"]))
def test_setting_only_the_sglang_version_gives_its_known_core_and_a_coherent_plan(version):
    """An operator sets only the version: every known runtime's core becomes the manifest, and it passes the check."""
    built = plan_for(version, sources=GPU_VARS["sglang_runtime_core_sources"])
    assert built["errors"] == []
    manifest = {e["name"]: e for e in built["plan"]["manifest"]}
    assert sorted(manifest) == sorted(core_of(version))
    for name, package in core_of(version).items():
        assert manifest[name]["version"] == package["version"]
        assert manifest[name]["local"] == package.get("local", "")
        assert manifest[name]["derived_from"] == f"the known runtime of sglang {version}"
    assert built["plan"]["manifest_derived"] == [p["name"] for p in KNOWN["runtimes"][version]["core"]]
    assert built["plan"]["coherence"]["checked"] >= 3  # sglang's torch, sglang-kernel and flashinfer pins


def test_the_gpu_inventory_sources_apply_and_unnamed_packages_come_from_the_index():
    built = plan_for(DEFAULT_VERSION, sources={"torch": "reference_venv"})
    sources = {e["name"]: e["source"] for e in built["plan"]["manifest"]}
    assert sources["torch"] == "reference_venv"
    assert {s for n, s in sources.items() if n != "torch"} == {"index"}
    # The install tasks take each source's entries from the plan, in manifest order, every source named.
    by_source = built["plan"]["manifest_by_source"]
    assert [e["name"] for e in by_source["reference_venv"]] == ["torch"]
    assert by_source["index"] == [e for e in built["plan"]["manifest"] if e["name"] != "torch"]
    assert by_source["wheelhouse"] == []


def test_the_default_release_inputs_equal_those_of_the_former_explicit_gpu_manifest():
    """Deriving the GPU hosts' manifest does not change their release id: the inputs are the same."""
    former = [
        {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch", "source": "reference_venv"},
        {"name": "triton", "version": "3.6.0", "local": "", "import": "triton", "source": "reference_venv"},
        {"name": "sglang-kernel", "version": "0.4.5", "local": "", "import": "sgl_kernel", "source": "reference_venv"},
        {
            "name": "flashinfer-python",
            "version": "0.6.15.post1",
            "local": "",
            "import": "flashinfer",
            "source": "index",
        },
    ]
    derived = plan_for(DEFAULT_VERSION, sources=GPU_VARS["sglang_runtime_core_sources"])["plan"]
    explicit = plan_for(DEFAULT_VERSION, manifest=former)["plan"]
    assert derived["release"]["inputs_sha256"] == explicit["release"]["inputs_sha256"]


def test_an_explicit_pin_wins_by_name_and_is_still_checked():
    torch = {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch", "source": "index"}
    built = plan_for("0.5.23", manifest=[torch])
    manifest = built["plan"]["manifest"]
    assert manifest[0] == torch  # first, as given
    assert [e["name"] for e in manifest[1:]] == ["sglang-kernel", "flashinfer-python"]  # the rest of 0.5.23's core
    refusal = [e for e in built["errors"] if e.startswith("sglang_runtime_manifest[0] (torch): sglang 0.5.23")]
    assert refusal and "requires torch==2.14.1" in refusal[0] and "the manifest has torch 2.11.0+cu130" in refusal[0]
    # the derived kernel pins torch too, and its entry says where it came from
    assert any(
        e.startswith("sglang_runtime_manifest[0] (torch): sglang-kernel 0.4.10 requires torch==2.14.1")
        for e in built["errors"]
    )


def test_a_full_explicit_manifest_keeps_its_order_and_adds_nothing():
    full = [
        {"name": n, "version": p["version"], "local": p.get("local", ""), "source": "index"}
        for n, p in reversed(list(core_of(DEFAULT_VERSION).items()))
    ]
    built = plan_for(DEFAULT_VERSION, manifest=full)
    assert built["plan"]["manifest"] == full
    assert built["plan"]["manifest_derived"] == []


def test_a_version_without_a_known_runtime_and_without_pins_is_refused_naming_the_known_versions():
    built = plan_for("0.5.99")
    assert built["errors"][0] == (
        "sglang_runtime_sglang.version=0.5.99: no known runtime to derive the manifest from"
        f" ({deploy_plan.KNOWN_RUNTIMES_FILE} knows {', '.join(sorted(KNOWN['runtimes']))})"
        " and sglang_runtime_manifest is empty; choose a known version or pin the runtime in sglang_runtime_manifest"
    )
    assert not any("must be a non-empty list" in e for e in built["errors"])  # one refusal, not a second about []


def test_a_version_without_a_known_runtime_takes_explicit_pins_as_they_are():
    pins = [{"name": "torch", "version": "9.0", "source": "index"}]
    derived = deploy_plan.derive_manifest("0.5.99", pins, KNOWN)
    assert derived == {"manifest": pins, "derived": [], "errors": []}


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ({"torhc": "index"}, "sglang_runtime_core_sources.torhc: not a core package of a known runtime; allowed:"),
        ({"torch": "pypi"}, "sglang_runtime_core_sources.torch=pypi: allowed: index, reference_venv (a wheelhouse"),
        ({"torch": "wheelhouse"}, "sglang_runtime_core_sources.torch=wheelhouse: allowed: index, reference_venv"),
    ],
)
def test_a_core_source_must_name_a_core_package_and_a_source(sources, message):
    errors = deploy_plan.derive_manifest(DEFAULT_VERSION, [], KNOWN, sources)["errors"]
    assert len(errors) == 1 and errors[0].startswith(message)
    if "torhc" in sources:
        assert errors[0].endswith("allowed: flashinfer-python, sglang-kernel, torch, triton")


def test_a_derived_reference_venv_entry_needs_the_reference_venv():
    built = plan_for(DEFAULT_VERSION, sources={"torch": "reference_venv"}, reference_venv="")
    assert any("source reference_venv needs sglang_runtime_reference_venv" in e for e in built["errors"])


def test_a_malformed_core_sources_is_left_to_the_roles_validation():
    args = {"sglang": {"version": "0.5.17"}, "manifest": [], "core_sources": "torch"}
    assert deploy_plan.deferred_inputs(args) == "sglang_runtime_core_sources"


def test_a_manifest_derived_by_an_earlier_plan_is_derived_again_for_the_new_version():
    """The release tasks are handed the plan's manifest; planning again for another version does not keep it."""
    first = deploy_plan.derive_manifest(DEFAULT_VERSION, [], KNOWN)["manifest"]
    other = next(v for v in sorted(KNOWN["runtimes"]) if v != DEFAULT_VERSION)
    again = deploy_plan.derive_manifest(other, first, KNOWN)
    assert [(e["name"], e["version"]) for e in again["manifest"]] == [
        (p["name"], p["version"]) for p in KNOWN["runtimes"][other]["core"]
    ]


def test_docs_runtime_states_where_each_known_runtime_was_proven():
    """docs/runtime.md has a row per known runtime, with its core and the place known_runtimes.yml records."""
    text = (REPO / "docs" / "runtime.md").read_text()
    rows = {
        line.split("|")[1].strip().split(" ")[0]: line
        for line in text.splitlines()
        if line.startswith("| ") and line.split("|")[1].strip()[:1].isdigit()
    }
    word = {"gpu": "**GPU**", "lab": "**lab**", "none": "**none**"}
    for version, runtime in KNOWN["runtimes"].items():
        assert version in rows, f"docs/runtime.md has no row for sglang {version}"
        assert word[runtime["proven"]] in rows[version]
        if runtime["proven"] == "gpu":
            assert runtime["record"].split(" ")[0] in rows[version]
        for package in runtime["core"]:
            if package["name"] != "triton":  # the table shows torch, sglang-kernel and flashinfer-python
                assert package["version"] in rows[version], (version, package["name"])
