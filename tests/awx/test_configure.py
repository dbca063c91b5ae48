"""awx/configure.yml without an AWX server: the arguments it sends, checked against awx.awx.

ansible-playbook runs configure.yml for real (Ansible templates every argument, loops, omits) with a
capture collection named awx.awx first on the collections path: each of its action plugins records
the arguments it was called with instead of calling a server. Each call is then checked against the
argument spec of the real awx.awx module (the one the `ansible` package bundles, read by running the
module's own main() up to the point where it builds its spec). A second run sends the same
arguments, and none of them asks the modules for a change on every run (copy, rename, node
recreation, a survey AWX would store differently), so with a server the second run changes nothing.
"""

import json
import os
import pathlib
import subprocess
import sys

import awx_job
import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

REPO = pathlib.Path(__file__).resolve().parents[2]
MODULES = ("execution_environment", "project", "inventory", "inventory_source", "job_template", "workflow_job_template")
CAPTURE_ACTION = """
import json, os
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    def run(self, tmp=None, task_vars=None):
        with open(os.environ["SPECDEC_AWX_CAPTURE"], "a") as out:
            out.write(json.dumps({"module": "%s", "args": self._task.args}, default=str) + "\\n")
        return {"changed": False}
"""
# Options that make an awx.awx module change something on every run.
NOT_IDEMPOTENT = {"copy_from", "new_name", "destroy_current_nodes", "update_project", "force"}


class _Spec(Exception):
    pass


def module_argument_spec(name):
    """The full argument spec of the real awx.awx module: its own spec plus the controller auth spec."""
    collections = str(REPO / "collections")
    if collections not in sys.path:
        sys.path.insert(0, collections)
    import importlib  # noqa: PLC0415

    module = importlib.import_module(f"ansible_collections.awx.awx.plugins.modules.{name}")
    api = importlib.import_module("ansible_collections.awx.awx.plugins.module_utils.controller_api")

    def capture(argument_spec, **_kwargs):
        raise _Spec(argument_spec)

    original = module.ControllerAPIModule
    module.ControllerAPIModule = capture
    try:
        module.main()
    except _Spec as spec:
        return {**api.ControllerModule.AUTH_ARGSPEC, **spec.args[0]}, yaml.safe_load(module.DOCUMENTATION)
    finally:
        module.ControllerAPIModule = original
    raise AssertionError(f"awx.awx.{name} main() did not build a module")


def run_configure(tmp, extra=()):
    stub = tmp / "capture" / "ansible_collections" / "awx" / "awx"
    (stub / "plugins" / "action").mkdir(parents=True, exist_ok=True)
    for name in MODULES:
        (stub / "plugins" / "action" / f"{name}.py").write_text(CAPTURE_ACTION % name)
    capture = tmp / "calls.jsonl"
    capture.unlink(missing_ok=True)
    env = dict(
        os.environ,
        SPECDEC_AWX_CAPTURE=str(capture),
        ANSIBLE_COLLECTIONS_PATH=f"{tmp / 'capture'}:{REPO / 'collections'}",
        ANSIBLE_NOCOLOR="1",
    )
    proc = subprocess.run(
        [
            "ansible-playbook",
            "-i",
            "localhost,",
            "awx/configure.yml",
            "-e",
            "specdec_awx_scm_url=https://git.example/specdec-sglang.git",
            *extra,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    calls = [json.loads(line) for line in capture.read_text().splitlines()] if capture.exists() else []
    return proc, calls


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("configure")
    first = run_configure(tmp)
    second = run_configure(tmp)
    return first, second


def test_configure_runs_and_calls_every_module(runs):
    (proc, calls), _ = runs
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = awx_job.load_templates()
    names = [c["module"] for c in calls]
    assert names.count("job_template") == len(data["specdec_awx_job_templates"])
    assert names.count("workflow_job_template") == len(data["specdec_awx_workflow_templates"])
    assert set(names) == set(MODULES)


def test_every_call_is_valid_for_the_real_module(runs):
    (_, calls), _ = runs
    problems = []
    for call in calls:
        spec, _doc = module_argument_spec(call["module"])
        result = ArgumentSpecValidator(spec).validate(call["args"])
        problems += [f"awx.awx.{call['module']} {call['args'].get('name')}: {m}" for m in result.error_messages]
    assert problems == []


def test_workflow_nodes_follow_the_module_schema_and_name_real_templates(runs):
    (_, calls), _ = runs
    _, doc = module_argument_spec("workflow_job_template")
    node_options = set(doc["options"]["workflow_nodes"]["suboptions"])
    job_templates = {c["args"]["name"] for c in calls if c["module"] == "job_template"}
    for call in (c for c in calls if c["module"] == "workflow_job_template"):
        nodes = call["args"]["workflow_nodes"]
        identifiers = {n["identifier"] for n in nodes}
        for node in nodes:
            assert set(node) <= node_options, set(node) - node_options
            assert node["unified_job_template"]["type"] == "job_template"
            assert node["unified_job_template"]["name"] in job_templates
            assert node["unified_job_template"]["organization"]["name"] == "Default"
            for kind, targets in node.get("related", {}).items():
                assert kind in ("success_nodes", "failure_nodes", "always_nodes")
                assert {t["identifier"] for t in targets} <= identifiers
        by_id = {n["identifier"]: n for n in nodes}
        assert by_id["deploy"]["related"] == {"failure_nodes": [{"identifier": "diagnose"}]}
        assert by_id["diagnose"]["related"] == {"always_nodes": [{"identifier": "rollback"}]}
        assert by_id["rollback"]["unified_job_template"]["name"] == "sglang rollback"


def test_second_run_sends_the_same_arguments_and_forces_no_change(runs):
    (_, first), (proc, second) = runs
    assert proc.returncode == 0
    assert second == first
    for call in first:
        forced = {k for k in NOT_IDEMPOTENT if call["args"].get(k)}
        assert not forced, f"awx.awx.{call['module']} {call['args']['name']}: {forced} change it on every run"
        assert call["args"].get("state", "present") == "present"


def test_surveys_are_sent_in_the_form_awx_stores(runs):
    """AWX stores a survey as sent when choices are lists and defaults carry no stray newlines;
    the module compares the stored survey with the one sent, so that form is what makes it idempotent."""
    (_, calls), _ = runs
    surveys = [c["args"]["survey_spec"] for c in calls if c["module"] == "job_template" and "survey_spec" in c["args"]]
    assert len(surveys) == len(awx_job.load_templates()["specdec_awx_job_templates"])
    for survey in surveys:
        assert awx_job.survey_spec_errors(survey) == []
        for q in survey["spec"]:
            assert isinstance(q["question_description"], str) and q["question_description"]
            if q["type"] in ("multiplechoice", "multiselect"):
                assert isinstance(q["choices"], list)
            if isinstance(q.get("default"), str):
                assert q["default"] == "\n".join(x for x in q["default"].splitlines() if x.strip())


def test_a_call_the_module_refuses_is_caught(tmp_path):
    """The check fails when configure.yml sends something the module does not take (mutation)."""
    spec, _ = module_argument_spec("job_template")
    result = ArgumentSpecValidator(spec).validate({"name": "x", "verbosity": 7, "survey_enabled": "maybe"})
    assert len(result.error_messages) == 2
    result = ArgumentSpecValidator(spec).validate({"name": "x", "ask_survey_on_launch": True})
    assert any("ask_survey_on_launch" in m for m in result.error_messages)


def test_configure_refuses_to_run_without_the_scm_url(tmp_path):
    proc, calls = run_configure(tmp_path, extra=("-e", "specdec_awx_scm_url="))
    assert proc.returncode == 2
    assert "specdec_awx_scm_url is empty" in proc.stdout
    assert calls == []
