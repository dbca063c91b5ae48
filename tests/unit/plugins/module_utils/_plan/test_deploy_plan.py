"""deploy_plan: the runtime checked against sglang's requirements, patch sets by capability, one release path."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_coherence import (
    conflicts,
    environment,
    requirer,
)

REPO = pathlib.Path(__file__).resolve().parents[5]
KNOWN = yaml.safe_load((REPO / deploy_plan.KNOWN_RUNTIMES_FILE).read_text())
DEFAULTS = yaml.safe_load((REPO / "inventory" / "group_vars" / "all" / "runtime.yml").read_text())
DEFAULT_VERSION = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())[
    "sglang_runtime_sglang_version"
]
# The GPU hosts' manifest: the core of the default version's known runtime, from the inventory's sources.
DEFAULT_MANIFEST = deploy_plan.derive_manifest(
    DEFAULT_VERSION, DEFAULTS.get("sglang_runtime_manifest"), KNOWN, DEFAULTS["sglang_runtime_core_sources"]
)["manifest"]
OLD_MANIFEST = [  # the manifest the collection shipped with sglang 0.5.23 (issue 18)
    {"name": "torch", "version": "2.11.0", "local": "cu130", "source": "reference_venv"},
    {"name": "triton", "version": "3.6.0", "source": "reference_venv"},
    {"name": "sglang-kernel", "version": "0.4.10", "source": "reference_venv"},
    {"name": "flashinfer-python", "version": "0.6.8.post1", "source": "index"},
]


def no_wheel(path):
    raise OSError(f"no wheel read expected: {path}")


def real_sets():
    return [
        deploy_plan.patch_set_record(str(d), yaml.safe_load((d / "patchset.yml").read_text()))
        for d in sorted((REPO / "patchsets").iterdir())
        if (d / "patchset.yml").is_file()
    ]


def test_the_old_manifest_is_refused_naming_torch_2_14_1_required_by_sglang_0_5_23():
    result = deploy_plan.check_runtime({"version": "0.5.23", "source": "index"}, OLD_MANIFEST, "3.12", KNOWN, no_wheel)
    torch = [e for e in result["errors"] if e.startswith("sglang_runtime_manifest[0] (torch): sglang 0.5.23")]
    assert len(torch) == 1
    assert "requires torch==2.14.1" in torch[0] and "the manifest has torch 2.11.0+cu130" in torch[0]
    assert any("sglang-kernel 0.4.10 requires torch==2.14.1" in e for e in result["errors"])
    assert any("flashinfer-python==0.7.2" in e and "0.6.8.post1" in e for e in result["errors"])


def test_the_default_runtime_is_coherent_with_the_default_sglang():
    manifest = DEFAULT_MANIFEST
    result = deploy_plan.check_runtime(
        {"version": DEFAULT_VERSION, "source": "index"}, manifest, "3.12", KNOWN, no_wheel
    )
    assert result["errors"] == []
    assert result["checked"] >= 4  # torch, sglang-kernel, flashinfer (sglang's pins) and the kernel's torch pin
    assert result["runtime"]["proven"] == "gpu"


def test_a_kernel_built_for_another_torch_is_refused_by_its_own_pin():
    manifest = [dict(e) for e in DEFAULT_MANIFEST]
    for entry in manifest:
        if entry["name"] == "torch":
            entry["version"] = "2.14.1"
    result = deploy_plan.check_runtime(
        {"version": DEFAULT_VERSION, "source": "index"}, manifest, "3.12", KNOWN, no_wheel
    )
    assert any(
        "sglang-kernel 0.4.5 requires torch==2.11.0" in e and "its build's stated pin" in e for e in result["errors"]
    )


def test_an_override_reason_turns_a_conflict_into_an_accepted_one():
    manifest = [{"name": "transformers", "version": "5.17.0", "override_reason": "the GPU record ran with it"}]
    result = deploy_plan.check_runtime({"version": "0.5.17", "source": "index"}, manifest, "3.12", KNOWN, no_wheel)
    assert result["errors"] == []
    assert result["overridden"] and "transformers==5.12.1" in result["overridden"][0]
    assert "accepted: the GPU record ran with it" in result["overridden"][0]


def test_a_wheel_source_reads_the_wheels_own_metadata():
    metadata = "Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\nRequires-Dist: torch==9.0\n"
    result = deploy_plan.check_runtime(
        {"version": "9.9.9", "source": "wheel", "wheel": "/c/sglang-9.9.9-py3-none-any.whl"},
        [{"name": "torch", "version": "2.11.0", "local": "cu130"}],
        "3.12",
        KNOWN,
        lambda path: metadata,
    )
    assert result["errors"] == [
        "sglang_runtime_manifest[0] (torch): sglang 9.9.9 requires torch==9.0"
        " (Requires-Dist of sglang-9.9.9-py3-none-any.whl); the manifest has torch 2.11.0+cu130"
    ]


def test_an_index_source_reads_the_indexs_metadata_before_the_record():
    metadata = "Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.17\nRequires-Dist: torch==2.12.0\n"
    seen = []

    def fetch(index_url, name, version):
        seen.append((index_url, name, version))
        return metadata, "http://index/sglang-0.5.17.whl.metadata"

    result = deploy_plan.check_runtime(
        {"version": "0.5.17", "source": "index"},
        [{"name": "torch", "version": "2.11.0"}],
        "3.12",
        KNOWN,
        no_wheel,
        fetch_index_metadata=fetch,
        index_url="http://index/simple",
    )
    assert seen == [("http://index/simple", "sglang", "0.5.17")]
    assert result["requires_source"] == "Requires-Dist from http://index/sglang-0.5.17.whl.metadata"
    assert "requires torch==2.12.0" in result["errors"][0]


def test_an_unknown_version_without_readable_metadata_is_refused():
    result = deploy_plan.check_runtime({"version": "0.5.99", "source": "index"}, [], "3.12", KNOWN, no_wheel)
    assert "sglang_runtime_sglang.version=0.5.99: not a known runtime" in result["errors"][0]
    assert "0.5.17, 0.5.23" in result["errors"][0]


def test_markers_and_extras_decide_which_requirements_count():
    lines = ['av==16.1.0; platform_machine == "aarch64"', 'torch==9; extra == "diffusion"', "numpy"]
    found = conflicts(
        [{"name": "av", "version": "1.0"}, {"name": "torch", "version": "2.11.0"}],
        [requirer("sglang", "1", lines, "test")],
        environment("3.12"),
    )
    assert found == {"refused": [], "overridden": [], "checked": 0}


# --- patch sets ---------------------------------------------------------------------------------


def record(name, version, serves):
    return {"name": name, "dir": f"/p/{name}", "sglang_version": version, "serves": serves}


DDTREE_17 = record(
    "ddtree-a", "0.5.17", {"algorithms": ["DDTREE"], "architectures": ["dense"], "attention_backends": ["triton"]}
)
DDTREE_23 = record("ddtree-b", "0.5.23", {"algorithms": [], "architectures": ["dense"]})


def test_a_builtin_algorithm_needs_no_patch_set():
    assert deploy_plan.choose_patch_sets("DFLASH", "0.5.17", "", [DDTREE_17])["chosen"] == []


def test_ddtree_takes_the_set_that_serves_it():
    chosen = deploy_plan.choose_patch_sets("DDTREE", "0.5.17", "triton", [DDTREE_17, DDTREE_23])
    assert chosen["errors"] == [] and [r["name"] for r in chosen["chosen"]] == ["ddtree-a"]
    assert deploy_plan.target_checks(chosen["chosen"]) == {"architectures": ["dense"]}


def test_a_set_with_an_empty_list_serves_nothing_and_the_refusal_lists_every_set():
    refused = deploy_plan.choose_patch_sets("DDTREE", "0.5.23", "triton", [DDTREE_17, DDTREE_23])
    assert refused["chosen"] == []
    message = refused["errors"][0]
    assert "ddtree-b does not serve sglang_service_speculative_algorithm=DDTREE (it serves none)" in message
    assert (
        "ddtree-a (sglang 0.5.17; serves algorithms: DDTREE; architectures: dense; attention_backends: triton)"
        in message
    )


def test_a_backend_the_set_does_not_serve_is_refused():
    refused = deploy_plan.choose_patch_sets("DDTREE", "0.5.17", "fa3", [DDTREE_17])
    assert "sglang_service_attention_backend=fa3 (it serves triton)" in refused["errors"][0]


def test_a_missing_dimension_serves_any_value_and_a_new_dimension_needs_no_code():
    any_backend = record("any", "0.5.17", {"algorithms": ["DDTREE"]})
    assert deploy_plan.choose_patch_sets("DDTREE", "0.5.17", "fa3", [any_backend])["chosen"] == [any_backend]
    assert deploy_plan.unserved({"linear_attention_backends": ["triton"]}, {"linear_attention_backends": "fla"}) == [
        "linear_attention_backends=fla"
    ]


def test_no_set_for_the_sglang_version_is_refused_naming_the_sets():
    refused = deploy_plan.choose_patch_sets("DDTREE", "0.5.99", "triton", [DDTREE_17])
    assert "needs a patch set for sglang 0.5.99" in refused["errors"][0] and "ddtree-a" in refused["errors"][0]


def test_explicit_sets_must_be_for_the_version_and_serve_the_request():
    refused = deploy_plan.choose_patch_sets("DDTREE", "0.5.17", "triton", [], explicit=[DDTREE_23])
    assert "sglang_deploy_patch_sets: ddtree-b is for sglang 0.5.23" in refused["errors"][0]
    ok = deploy_plan.choose_patch_sets("DDTREE", "0.5.17", "triton", [], explicit=[DDTREE_17])
    assert ok["errors"] == [] and ok["chosen"] == [DDTREE_17]


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"model_type": "qwen3"}, ""),
        ({"model_type": "qwen3_5", "text_config": {"full_attention_interval": 4}}, "the target is hybrid_gdn"),
    ],
)
def test_the_target_architecture_is_checked_against_the_chosen_sets(config, error):
    plan = {
        "target_checks": {"architectures": ["dense"]},
        "patch_sets": [DDTREE_17],
        "request": {"algorithms": "DDTREE"},
    }
    checked = deploy_plan.check_target(plan, config, "/models/t/config.json")
    assert (error in checked["error"]) if error else checked["error"] == ""
    if error:
        assert "ddtree-a" in checked["error"] and "serve architectures dense" in checked["error"]


def test_a_plan_without_target_checks_accepts_any_architecture():
    assert deploy_plan.check_target({"target_checks": {}}, {"model_type": "qwen3_5"})["error"] == ""


def test_the_repositorys_patch_sets_declare_what_they_serve():
    sets = {r["name"]: r for r in real_sets()}
    assert sets["ddtree-0.5.17"]["serves"]["algorithms"] == ["DDTREE"]
    assert sets["ddtree-0.5.23"]["serves"]["algorithms"] == ["DDTREE"]
    chosen = deploy_plan.choose_patch_sets("DDTREE", DEFAULT_VERSION, "triton", real_sets())
    assert [r["name"] for r in chosen["chosen"]] == [f"ddtree-{DEFAULT_VERSION}"]


# --- paths and the whole plan --------------------------------------------------------------------


def test_the_release_path_is_derived_in_one_function():
    assert deploy_plan.release_dir("/opt/sglang", "abc123") == "/opt/sglang/releases/abc123"


def test_build_plan_returns_every_path_and_the_chosen_sets():
    built = deploy_plan.build_plan(
        {
            "sglang": {"version": DEFAULT_VERSION, "source": "index"},
            "manifest": DEFAULT_MANIFEST,
            "python_version": "3.12",
            "cuda_version": "13.0",
            "algorithm": "DDTREE",
            "attention_backend": "triton",
            "runtime_root": "/opt/sglang",
            "unit_name": "sglang",
            "config_dir": "/etc/sglang",
            "cache_dir": "/var/cache/sglang",
            "disk_path": "/opt/sglang",
            "gpus_wanted": 1,
            "reference_venv": "/root/venv_sglang",
        },
        KNOWN,
        real_sets(),
        no_wheel,
    )
    assert built["errors"] == []
    plan = built["plan"]
    assert plan["paths"]["releases"] == "/opt/sglang/releases"
    assert plan["paths"]["unit"] == "/etc/systemd/system/sglang.service"
    assert plan["paths"]["env"] == "/etc/sglang/sglang.env"
    assert plan["patch_sets"][0]["name"] == f"ddtree-{DEFAULT_VERSION}"
    served = {r["name"]: r for r in real_sets()}[f"ddtree-{DEFAULT_VERSION}"]["serves"]["architectures"]
    assert plan["target_checks"] == {"architectures": served}
    assert plan["cuda_version"] == "13.0" and plan["gpus_wanted"] == 1
    assert len(plan["release"]["inputs_sha256"]) == 64
    assert plan["release"]["inputs"]["patch_sets"][0]["dir"] == f"ddtree-{DEFAULT_VERSION}"
    release = deploy_plan.release_of(plan, {"version": "3.12.3", "interpreter": ""})
    assert release["release_dir"] == "/opt/sglang/releases/" + release["release_id"]
    assert release["venv_dir"] == release["release_dir"] + "/venv"
    other = deploy_plan.release_of(plan, {"version": "3.11.2", "interpreter": ""})
    assert other["release_id"] != release["release_id"]  # the host's Python is part of the id


@pytest.mark.parametrize(
    ("args", "deferred"),
    [
        ({"sglang": "0.5.17", "manifest": []}, "sglang_runtime_sglang"),
        ({"sglang": {"version": "0.5.17"}, "manifest": "torch"}, "sglang_runtime_manifest"),
        ({"sglang": {"version": "0.5.17"}, "manifest": []}, ""),
    ],
)
def test_malformed_inputs_are_left_to_their_roles_validation(args, deferred):
    assert deploy_plan.deferred_inputs(args) == deferred


def test_no_algorithm_requested_needs_no_patch_set():
    """Preflight and runtime run alone: no service variables, nothing to patch."""
    assert deploy_plan.choose_patch_sets("", "0.5.17", "", [DDTREE_17]) == {
        "chosen": [],
        "errors": [],
        "request": {"algorithms": "", "attention_backends": ""},
    }


def test_the_gpu_records_manifest_is_coherent_but_for_two_accepted_reference_venv_versions():
    data = yaml.safe_load((REPO / "inventory" / "manifests" / "sglang-0.5.17-cu130.yml").read_text())
    sglang = {"version": data["sglang_runtime_sglang"]["version"], "source": "index"}  # the recorded requirements
    result = deploy_plan.check_runtime(sglang, data["sglang_runtime_manifest"], "3.12", KNOWN, no_wheel)
    assert result["errors"] == []
    accepted = sorted(line.split(" (")[1].split(")")[0] for line in result["overridden"])
    assert accepted == ["numba", "timm"]  # transformers comes at sglang's pin from the wheelhouse


# --- sets every request takes (serves: every_request) -------------------------------------------

REDACT_17 = deploy_plan.patch_set_record(
    "/p/redact-17", {"name": "aaa-redact", "sglang_version": "0.5.17", "serves": "every_request"}
)


def plan_sets(version, algorithm, available, explicit=None, backend="triton"):
    """The names of the sets build_plan chooses (the controller's files are not read)."""
    built = deploy_plan.build_plan(
        {
            "sglang": {"version": version, "source": "index"},
            "manifest": [],
            "algorithm": algorithm,
            "attention_backend": backend,
            "explicit_patch_sets": explicit,
        },
        KNOWN,
        available,
        no_wheel,
        check_inputs=lambda _m, _s, _w, dirs: {"inputs": {"patch_sets": dirs}, "inputs_sha256": "0" * 64, "errors": []},
    )
    assert not [e for e in built["errors"] if "patch set" in e], built["errors"]
    assert built["plan"]["release"]["inputs"]["patch_sets"] == built["plan"]["patch_set_dirs"]
    return [s["name"] for s in built["plan"]["patch_sets"]]


def test_every_request_is_a_serves_value_of_its_own():
    assert REDACT_17["every_request"] is True and REDACT_17["serves"] == {}
    assert DDTREE_17.get("every_request") is None
    assert deploy_plan.patch_set_record("/p/x", {"serves": {"algorithms": []}})["every_request"] is False
    assert deploy_plan.describe_set(REDACT_17) == "aaa-redact (sglang 0.5.17; serves every request)"


@pytest.mark.parametrize(
    ("algorithm", "expected"),
    [("DFLASH", ["aaa-redact"]), ("DDTREE", ["ddtree-a", "aaa-redact"]), ("", [])],
)
def test_every_request_of_the_version_takes_the_set_besides_the_algorithms_set(algorithm, expected):
    assert plan_sets("0.5.17", algorithm, [DDTREE_17, DDTREE_23, REDACT_17]) == expected
    assert plan_sets("0.5.23", "DFLASH", [DDTREE_17, REDACT_17]) == []  # another version's set is not taken


def test_a_set_for_every_request_never_stands_in_for_an_algorithms_set():
    # it serves no dimension, which would serve any value: it must not be taken as the DDTREE set
    refused = deploy_plan.build_plan(
        {"sglang": {"version": "0.5.17", "source": "index"}, "manifest": [], "algorithm": "DDTREE"},
        KNOWN,
        [REDACT_17],
        no_wheel,
        check_inputs=lambda *_a: {"inputs": {}, "inputs_sha256": "", "errors": []},
    )
    assert any("DDTREE needs a patch set for sglang 0.5.17" in e for e in refused["errors"])


def test_explicit_sets_still_take_the_set_for_every_request_once():
    assert plan_sets("0.5.17", "DDTREE", [REDACT_17], explicit=[DDTREE_17]) == ["ddtree-a", "aaa-redact"]
    assert plan_sets("0.5.17", "DFLASH", [REDACT_17], explicit=[REDACT_17]) == ["aaa-redact"]


def test_the_repositorys_redaction_sets_are_taken_for_every_request_of_their_version():
    sets = {r["name"]: r for r in real_sets()}
    versions = sorted(r["sglang_version"] for r in sets.values() if r["name"].startswith("ddtree-0."))
    assert versions == ["0.5.17", "0.5.23"]
    for version in versions:
        assert sets[f"redact-server-args-{version}"]["every_request"] is True
        assert plan_sets(version, "DFLASH", real_sets()) == [f"redact-server-args-{version}"]
        assert plan_sets(version, "DDTREE", real_sets()) == [f"ddtree-{version}", f"redact-server-args-{version}"]
