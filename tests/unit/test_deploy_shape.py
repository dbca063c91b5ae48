"""playbooks/deploy.yml enters each role once: preflight, runtime (which enters patches), service."""

import collections
import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLE_KEYS = ("ansible.builtin.include_role", "ansible.builtin.import_role")


def role_entries(tasks):
    """``(role, tasks_from)`` of every include_role / import_role in ``tasks``, blocks and always included."""
    found = []
    for task in tasks or []:
        for key in ROLE_KEYS:
            if key in task:
                spec = task[key]
                role = spec["name"].rsplit(".", 1)[-1].replace("{{ _sglang_deploy_role }}", "*")
                for item in task.get("loop") or [role]:
                    found.append((role if role != "*" else item, spec.get("tasks_from", "main")))
        for nested in ("block", "rescue", "always"):
            found += role_entries(task.get(nested))
    return found


def plays():
    return {play["name"]: play for play in yaml.safe_load((REPO / "playbooks" / "deploy.yml").read_text())}


def test_the_deploy_play_enters_preflight_runtime_and_service_once_each_in_that_order():
    deploy = plays()["Deploy"]
    entries = role_entries(deploy.get("pre_tasks")) + role_entries(deploy["tasks"])
    entries += role_entries(deploy.get("post_tasks"))
    assert entries == [("sglang_preflight", "main"), ("sglang_runtime", "main"), ("sglang_service", "main")]


def test_the_runtime_role_enters_the_patches_role_once_and_only_it_does():
    entered = collections.Counter()
    for path in (REPO / "roles").glob("*/tasks/*.yml"):
        for role, tasks_from in role_entries(yaml.safe_load(path.read_text())):
            if role == "sglang_patches":
                entered[(path.relative_to(REPO).as_posix(), tasks_from)] += 1
    assert entered == {("roles/sglang_runtime/tasks/main.yml", "main"): 1}


def test_the_validation_play_runs_no_role_tasks_only_loads_their_defaults():
    validate = plays()["Validate inputs"]
    entries = role_entries(validate["tasks"])
    assert sorted(entries) == sorted(
        (role, "defaults") for role in ("sglang_service", "sglang_preflight", "sglang_runtime", "sglang_patches")
    )
    for role in {role for role, _ in entries}:
        tasks = yaml.safe_load((REPO / "roles" / role / "tasks" / "defaults.yml").read_text())
        assert [next(k for k in t if k != "name") for t in tasks] == ["ansible.builtin.meta"], role
