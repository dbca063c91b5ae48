"""The host read once (host_facts.read_host) and planned once (deploy_plan.plan): no Ansible, a fake host.

The facts come from ``read_host`` over a fake host (files, commands, statvfs, nvidia-smi transcripts of
tests/unit/fixtures/nvidia-smi); the plan turns the inputs and those facts into every decision of the host
or every error at once.
"""

import fnmatch
import json
import os
import pathlib
import posixpath

import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_facts
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils._release import release

REPO = pathlib.Path(__file__).resolve().parents[5]
SMI = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"
KNOWN = yaml.safe_load((REPO / deploy_plan.KNOWN_RUNTIMES_FILE).read_text())
VERSION = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())[
    "sglang_runtime_sglang_version"
]
TARGET = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}
HYBRID = {"architectures": ["Qwen3_5ForConditionalGeneration"], "layer_types": ["linear_attention"]}


class FakeStat:
    def __init__(self, free_kib):
        self.f_bavail, self.f_frsize = free_kib, 1024


class FakeHost:
    """Files (path -> text), links, programs (argv0 -> (rc, out, err)), free KiB, an nvidia-smi transcript."""

    def __init__(
        self, files=None, links=None, programs=None, *, free_kib=100 * 1024 * 1024, transcript=None, port=None
    ):
        self.files = dict(files or {})
        self.links = dict(links or {})
        self.programs = dict(programs or {})
        self.free_kib = free_kib
        self.transcript = transcript
        self.held = port or {"state": "free"}  # every port's holder, or {port: holder}
        self.calls = []

    def run_command(self, argv):
        self.calls.append(argv)
        if argv[0] not in self.programs:
            raise OSError(f"{argv[0]}: not found")
        return self.programs[argv[0]]

    def read(self, path):
        return self.files.get(path)

    def exists(self, path):
        return path in self.files or any(p.startswith(path.rstrip("/") + "/") for p in self.files)

    def readlink(self, path):
        return self.links.get(path, "")

    def listdir(self, path):
        prefix = path.rstrip("/") + "/"
        return sorted({p[len(prefix) :].split("/")[0] for p in self.files if p.startswith(prefix)})

    def statvfs(self, path):
        return FakeStat(self.free_kib)

    def nvidia_smi(self, binary, timeout_s):
        folder = SMI / self.transcript
        xml = folder / "nvidia-smi-q.xml"
        return {
            "query": (folder / "query.csv").read_text(),
            "xml": xml.read_text() if xml.is_file() else None,
            "apps": (folder / "compute_apps.csv").read_text() if (folder / "compute_apps.csv").is_file() else None,
            "stderr": "",
            "commands": {"query_gpu": 0, "xml": 0, "compute_apps": 0},
            "host_errors": [],
            "unsupported_fields": [],
        }

    def reference_venv(self, venv, names):
        return host_facts.read_reference_venv(venv, names, listdir=self._glob, read_text=lambda p: self.files[p])

    def _glob(self, pattern):
        depth = pattern.count("/")
        candidates = {"/".join(p.split("/")[: depth + 1]) for p in self.files if p.count("/") >= depth}
        return sorted(c for c in candidates if fnmatch.fnmatch(c, pattern))

    def port(self, port, main_pid):
        held = self.held.get(port, {"state": "free"}) if "state" not in self.held else self.held
        return dict(held, port=port, main_pid=main_pid)


PYTHON = {"/usr/bin/python3": (0, "3.11.2\n", "")}
SYSTEMCTL = {"systemctl": (0, "ActiveState=inactive\nMainPID=0\nInvocationID=\nNRestarts=0\n", "")}


def inputs(**overrides):
    base = {
        "sglang": {"version": VERSION, "source": "index"},
        "manifest": [],
        "python_version": "3.11",
        "python_interpreter": "/usr/bin/python3",
        "cuda_version": "13.0",
        "uv_version": "0.13.9",
        "ca_bundle": "/etc/ssl/certs/ca-certificates.crt",
        "algorithm": "DFLASH",
        "attention_backend": "",
        "runtime_root": "/opt/sglang",
        "unit_name": "sglang",
        "config_dir": "/etc/sglang",
        "cache_dir": "/var/cache/sglang",
        "tp_size": 1,
        "port_check": True,
        "port": 30000,
        "min_free_disk_gb": 20,
    }
    base.update(overrides)
    return base


def controller(args):
    return deploy_plan.build_plan(
        args,
        KNOWN,
        [],
        lambda path: "",
        check_inputs=lambda *_a: {"inputs": {"manifest": "m"}, "inputs_sha256": "a" * 64, "errors": []},
    )["plan"]


def read(host, args, **params):
    """What sglang_host_facts reads for the controller plan of ``args`` (the task's parameters, as host_plan.yml)."""
    plan = controller(args)
    p = {
        "python": plan["python_argv0"],
        "gpu_checks": args.get("gpu_checks", False),
        "models": {"sglang_service_model_path": "/models/t", "sglang_service_draft_model_path": "/models/d"},
        "reference_venv": plan["reference_venv"] if plan["manifest_by_source"]["reference_venv"] else "",
        "reference_venv_names": [e["name"] for e in plan["manifest_by_source"]["reference_venv"]],
        "ports": plan["service_ports"],
        "unit": plan["service_unit"],
        "paths": plan["paths"],
        "files": [args["ca_bundle"]],
    }
    p.update(params)
    return host_facts.read_host(p, host)


def plan_of(host, args, **params):
    facts = read(host, args, **params)
    return deploy_plan.plan(
        args,
        KNOWN,
        [],
        lambda path: "",
        facts=facts,
        check_inputs=lambda *_a: {"inputs": {"manifest": "m"}, "inputs_sha256": "a" * 64, "errors": []},
    )


def good_host(**overrides):
    files = {
        "/models/t/config.json": json.dumps(TARGET),
        "/models/d/config.json": json.dumps({"architectures": ["DFlashDraftModel"]}),
        "/etc/ssl/certs/ca-certificates.crt": "certs",
    }
    files.update(overrides.pop("files", {}))
    programs = overrides.pop("programs", {**PYTHON, **SYSTEMCTL})
    return FakeHost(files=files, programs=programs, **overrides)


def test_a_first_deploy_on_a_good_host_plans_a_release_to_build_and_reads_the_host_once():
    host = good_host()
    built = plan_of(host, inputs())
    assert built["errors"] == []
    release_plan = built["plan"]["host"]["release"]
    assert release_plan["build"] is True and release_plan["complete"] is False
    assert release_plan["release_dir"] == release.release_dir("/opt/sglang", release_plan["release_id"])
    assert release_plan["python"] == "3.11.2"
    assert release_plan["env"]["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    assert release_plan["env"]["UV_CACHE_DIR"] == built["plan"]["paths"]["uv_cache"]
    assert built["plan"]["paths"]["uv"] == "/opt/sglang/tools/uv-0.13.9/bin/uv"
    assert built["plan"]["host"]["models"]["dirs"] == {
        "sglang_service_draft_model_path": "/models/d",
        "sglang_service_model_path": "/models/t",
    }
    # One Python call and one systemctl call: everything else is files.
    assert [argv[0] for argv in host.calls] == ["systemctl", "/usr/bin/python3"]


def test_an_unchanged_deploy_finds_its_release_complete_and_builds_nothing():
    first = plan_of(good_host(), inputs())["plan"]["host"]["release"]
    marker = release.complete_marker("/opt/sglang", first["release_id"])
    again = plan_of(good_host(files={marker: "x"}), inputs())
    assert again["errors"] == []
    assert again["plan"]["host"]["release"]["build"] is False
    assert again["plan"]["host"]["release"]["release_id"] == first["release_id"]


def test_an_incomplete_release_that_current_names_is_refused_never_rebuilt_in_place():
    first = plan_of(good_host(), inputs())["plan"]["host"]["release"]
    host = good_host(files={first["release_dir"] + "/venv/bin/python": ""})
    host.links["/opt/sglang/current"] = first["release_dir"]
    errors = plan_of(host, inputs())["errors"]
    assert len(errors) == 1 and "it is never rebuilt in place" in errors[0]


def test_every_problem_of_the_host_comes_back_at_once():
    host = FakeHost(
        files={"/models/d/config.json": "{not json"},
        programs={"/usr/bin/python3": (0, "3.12.1\n", ""), **SYSTEMCTL},
        free_kib=1024,
        port={
            "state": "foreign",
            "pid": 4242,
            "command": "python train.py",
            "reason": "port 30000 is held by pid 4242",
        },
    )
    errors = plan_of(host, inputs())["errors"]
    assert len(errors) == 5, errors
    assert errors[0].startswith("/usr/bin/python3: is Python 3.12.1, sglang_runtime_python_version=3.11 expected")
    assert "sglang_service_draft_model_path=/models/d: /models/d/config.json is not JSON" in errors[1]
    assert "sglang_service_model_path=/models/t: /models/t/config.json not found" in errors[2]
    assert errors[3].startswith("port_in_use: port 30000 is held by pid 4242; sglang.service was not started on it")
    assert "sglang_preflight_min_free_disk_gb=20 needs" in errors[4]


def test_a_missing_python_is_refused_unless_uv_may_download_one():
    host = good_host(programs=SYSTEMCTL)
    errors = plan_of(host, inputs(python_interpreter=""))["errors"]
    assert errors == [
        "python3.11: not found; sglang_runtime_python_version=3.11 expected; set sglang_runtime_python_interpreter to"
        " a Python 3.11 or allow downloads (sglang_runtime_python_downloads=true)"
    ]
    allowed = plan_of(good_host(programs=SYSTEMCTL), inputs(python_interpreter="", python_downloads=True))
    assert allowed["errors"] == []
    assert allowed["plan"]["host"]["release"]["python"] == "3.11"  # the configured version names the release


def test_the_gpus_are_judged_and_chosen_in_the_plan_from_the_nvidia_smi_facts():
    args = inputs(gpu_checks=True, gpu_count=2, required_cuda_version="13.0")
    built = plan_of(good_host(transcript="constructed-busy-8gpu"), args, gpu_checks=True)
    assert built["errors"] == []
    gpus = built["plan"]["host"]["gpus"]
    assert gpus["indices"] == [1, 4]  # 0, 2, 3 run a training job, 5 has memory in use
    assert [g["compute_capability"] for g in gpus["selected"]] == ["12.0", "12.0"]
    assert gpus["driver"]["driver_version"] == "580.159.04"


def test_busy_gpus_named_explicitly_are_refused_with_the_variable_and_what_to_do():
    args = inputs(gpu_checks=True, gpus=["0", "1"])
    errors = plan_of(good_host(transcript="constructed-busy-8gpu"), args, gpu_checks=True)["errors"]
    assert len(errors) == 1
    assert errors[0].startswith('sglang_preflight_gpus=["0", "1"] cannot be used: ')
    assert errors[0].endswith("or set sglang_preflight_allow_busy_gpus=true for busy ones")


def test_a_driver_too_old_for_the_runtime_fails_the_host_naming_the_variables():
    args = inputs(gpu_checks=True, required_cuda_version="13.0")
    errors = plan_of(good_host(transcript="constructed-driver-cuda-12-8"), args, gpu_checks=True)["errors"]
    assert any(e.startswith("GPU preflight failed: [driver_cuda]") for e in errors), errors
    assert any("sglang_preflight_required_cuda_version=13.0" in e for e in errors)


def test_a_hybrid_target_is_refused_when_the_chosen_sets_serve_only_dense_targets():
    plan = controller(inputs())
    plan["target_checks"] = {"architectures": ["dense"]}
    plan["patch_sets"] = [{"name": "ddtree"}]
    host = good_host(files={"/models/t/config.json": json.dumps(HYBRID)})
    facts = read(host, inputs())
    decided = deploy_plan.plan_host(plan, inputs(), facts)
    assert len(decided["errors"]) == 1
    assert decided["errors"][0].startswith("/models/t/config.json: the target is hybrid_gdn")


def test_the_reference_venv_is_read_once_and_checked_against_the_manifest():
    venv = "/opt/ref"
    site = f"{venv}/lib/python3.11/site-packages"
    args = inputs(reference_venv=venv, core_sources={"triton": "reference_venv"})
    triton = next(p for p in KNOWN["runtimes"][VERSION]["core"] if p["name"] == "triton")
    files = {
        f"{venv}/bin/python": "",
        f"{site}/triton-9.9.9.dist-info/METADATA": "Metadata-Version: 2.1\nName: triton\nVersion: 9.9.9\n",
    }
    errors = plan_of(good_host(files=files), args)["errors"]
    assert len(errors) == 1 and "triton" in errors[0] and "9.9.9" in errors[0] and triton["version"] in errors[0]
    files[f"{site}/triton-9.9.9.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: triton\nVersion: {triton['version']}\n"
    )
    assert plan_of(good_host(files=files), args)["errors"] == []


def test_a_missing_reference_venv_is_refused_naming_what_it_should_hold():
    args = inputs(reference_venv="/opt/ref", core_sources={"triton": "reference_venv"})
    errors = plan_of(good_host(), args)["errors"]
    assert errors == [
        "sglang_runtime_reference_venv=/opt/ref: no lib/python*/site-packages on the host; the manifest copies triton"
        " from there (source reference_venv)",
        "sglang_runtime_reference_venv=/opt/ref has no bin/python; manifest entries with source reference_venv are"
        " copied from there",
    ]


def test_without_facts_the_plan_is_the_controllers_and_touches_no_host():
    built = deploy_plan.plan(
        inputs(),
        KNOWN,
        [],
        lambda path: "",
        check_inputs=lambda *_a: {"inputs": {}, "inputs_sha256": "a" * 64, "errors": []},
    )
    assert built["errors"] == [] and "host" not in built["plan"]


def test_the_gpu_count_has_one_formula():
    assert deploy_plan.gpus_wanted(["0", "3"], 4, 8) == 2
    assert deploy_plan.gpus_wanted([], 4, 8) == 4
    assert deploy_plan.gpus_wanted([], 0, 8) == 8
    assert deploy_plan.gpus_wanted([], 0, 0) == 1


def test_the_disk_is_measured_at_the_nearest_existing_parent():
    host = FakeHost(files={"/opt/x": ""}, free_kib=5)
    assert host_facts.read_disk("/opt/sglang/releases", host) == {
        "path": "/opt/sglang/releases",
        "measured_at": "/opt",
        "free_kib": 5,
    }


def test_the_record_and_current_are_read_with_the_release_modules_own_readers():
    paths = deploy_plan.paths("/opt/sglang", "sglang", "/etc/sglang", "", "")
    record = {"release_id": "r1", "schema": 2}
    host = FakeHost(
        files={
            posixpath.join(paths["state"], release.RECORD_NAME): json.dumps(record),
            release.complete_marker("/opt/sglang", "r1"): "r1",
            release.release_dir("/opt/sglang", "r0") + "/venv/bin/python": "",
        },
        links={paths["current"]: release.release_dir("/opt/sglang", "r1")},
    )
    read_back = host_facts.read_releases(paths, host)
    assert read_back["current"] == "r1"
    assert read_back["releases"] == {"r0": False, "r1": True}
    assert read_back["record"]["release_id"] == "r1" and read_back["record_error"] == ""


def test_without_systemd_the_unit_is_a_fact_with_its_error_not_a_failure():
    host = FakeHost(programs={})
    unit = host_facts.read_unit("sglang.service", host)
    assert unit["main_pid"] == 0 and "not found" in unit["error"]


def test_the_host_io_reads_the_real_filesystem(tmp_path):
    io = host_facts.HostIO(lambda argv: (0, "", ""))
    (tmp_path / "config.json").write_text(json.dumps(TARGET))
    assert host_facts.read_model(str(tmp_path), io)["config"] == TARGET
    assert host_facts.read_model(str(tmp_path / "none"), io)["exists"] is False
    assert host_facts.read_disk(str(tmp_path / "a" / "b"), io)["measured_at"] == str(tmp_path)
    assert io.listdir(str(tmp_path)) == ["config.json"] and io.readlink(str(tmp_path)) == ""
    assert os.path.isabs(host_facts.read_disk("", io)["measured_at"])


def test_every_input_of_the_plan_is_read_from_a_role_variable_that_exists():
    defaults = {}
    for role in ("sglang_runtime", "sglang_service", "sglang_preflight"):
        defaults.update(yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()))
    variables = {variable for variable, _absent in deploy_plan.INPUT_VARIABLES.values()}
    assert sorted(variables - set(defaults)) == ["sglang_deploy_patch_sets"]  # a play variable, unset by default
    assert set(deploy_plan.BOOLEAN_INPUTS) <= set(deploy_plan.INPUT_VARIABLES)


def test_each_replica_port_is_checked_against_its_own_unit_and_a_stranger_on_one_is_named():
    args = inputs(replicas=[{"name": "a"}, {"name": "b"}])
    assert controller(args)["service_ports"] == [
        {"port": 30000, "unit": "sglang-a.service"},
        {"port": 30001, "unit": "sglang-b.service"},
    ]
    host = good_host(port={30001: {"state": "foreign", "pid": 77, "reason": "port 30001 is held by pid 77"}})
    built = plan_of(host, args)
    assert built["errors"] == [
        "port_in_use: port 30001 is held by pid 77; sglang-b.service was not started on it. hint: "
        + deploy_plan.failure_classifier.hint_for("port_in_use")
    ]
    assert [p["unit"] for p in built["plan"]["host"]["port"]["ports"]] == ["sglang-a.service", "sglang-b.service"]
    # each replica's unit is asked for its main process (the one that may hold its port)
    assert sum(argv[0] == "systemctl" for argv in host.calls) == 3  # the plan's unit, then a and b
    assert plan_of(good_host(), args)["errors"] == []


def test_the_replica_count_sizes_the_gpus_wanted_and_derives_its_ports():
    args = inputs(replica_count=4, tp_size=2)
    plan = controller(args)
    assert plan["gpus_wanted"] == 8
    assert [p["port"] for p in plan["service_ports"]] == [30000, 30001, 30002, 30003]
    assert controller(inputs(replica_count=4, tp_size=2, gpu_count=4))["gpus_wanted"] == 4  # the count asked wins
    assert controller(inputs(port=0))["service_ports"] == []  # the service role not loaded: no port to read
    assert (
        controller(inputs(replicas=[{"name": "a", "port": 30000}, {"name": "b", "port": 30000}]))["service_ports"] == []
    )  # refused by the replica rules (validation names it); the plan reads no port then


def test_the_model_manifests_are_recorded_after_a_good_deploy_where_the_plan_says_so():
    built = plan_of(good_host(), inputs(model_integrity_checks=True, model_integrity_sha256=True))
    models = built["plan"]["host"]["models"]
    assert models["record_manifests"] is True
    assert models["manifest_dir"] == "/opt/sglang/state/model-manifests" == built["plan"]["paths"]["model_manifests"]
    own = plan_of(good_host(), inputs(model_integrity_checks=True, model_manifest_dir="/srv/manifests"))
    assert own["plan"]["host"]["models"] | {"dirs": None, "configs": None} == {
        "dirs": None,
        "configs": None,
        "target_architecture": own["plan"]["host"]["models"]["target_architecture"],
        "record_manifests": False,  # no sha256: nothing to record
        "manifest_dir": "/srv/manifests",
    }


def test_the_plan_hands_on_each_config_json_the_host_facts_read_so_none_is_read_again():
    models = plan_of(good_host(), inputs())["plan"]["host"]["models"]
    assert models["configs"] == {
        "sglang_service_draft_model_path": {"architectures": ["DFlashDraftModel"]},
        "sglang_service_model_path": TARGET,
    }
    broken = good_host(files={"/models/d/config.json": "{not json"})
    assert "sglang_service_draft_model_path" not in plan_of(broken, inputs())["plan"]["host"]["models"]["configs"]
