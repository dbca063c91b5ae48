"""The gateway role: its checks are the rule table's, and the worker API calls have one home."""

import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "sglang_gateway" / "tasks"


def test_the_gateway_checks_its_inputs_with_the_rule_table_not_a_jinja_assert():
    tasks = yaml.safe_load((TASKS / "validate.yml").read_text())
    assert [list(t)[1] for t in tasks] == ["specdec.sglang.validate_inputs"]
    assert "ansible.builtin.assert" not in (TASKS / "validate.yml").read_text()


def test_the_worker_api_calls_live_only_in_worker_out_and_worker_in():
    """DELETE /workers and POST /workers are written once (tasks/worker_out.yml, worker_in.yml): the roll and the
    service role's gateway-aware switch, rollback and stop include them."""

    def changes_workers(task):
        uri = task.get("ansible.builtin.uri") or {}
        return uri.get("method") in ("DELETE", "POST") and "/workers" in str(uri.get("url"))

    writers = sorted(
        p.name for p in TASKS.glob("*.yml") if any(changes_workers(t) for t in yaml.safe_load(p.read_text()) or ())
    )
    assert writers == ["worker_in.yml", "worker_out.yml"]
    service = REPO / "roles" / "sglang_service" / "tasks"
    for name, entry in (("attempt.yml", "worker_out"), ("replica_switch.yml", "worker_in"), ("stop.yml", "worker_out")):
        assert f"tasks_from: {entry}" in (service / name).read_text(), name
    rollback = (service / "replica_rollback.yml").read_text()
    assert "tasks_from: worker_out" in rollback and "tasks_from: worker_in" in rollback
    roll = (TASKS / "roll_replica.yml").read_text()
    assert "include_tasks: worker_out.yml" in roll and "include_tasks: worker_in.yml" in roll
