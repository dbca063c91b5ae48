"""The service role sequences systemd steps; its decisions and the release record are the sglang_release_* modules'."""

import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
TASKS = REPO / "roles" / "sglang_service" / "tasks"
# 786 lines of task YAML before the decisions moved to plugins/module_utils/_release/release.py.
BEFORE = 786
# Added after that refactor, sequencing and checks only (every decision is in module_utils): the generation
# watchdog's installation (watch.yml), the deploy's watchdog pause, the stop result of the drain and the rules
# of their variables (issue 21); the ladder's guard against a skipped envelope plan. Then the transactional
# steps of issue 23 (41 lines): the reap of an interrupted run's readiness job, the start time on the host's
# clock, the first restart decision (drift, crashes since the record) kept for the report, a failed record
# judged and rolled back.
DAY2 = 133
# Several replicas on a host (issue 36, 135 lines): the per-replica loops of the same steps (replicas.yml,
# replica_switch.yml, replica_rollback.yml; the markers, reap and watchdog looped in main.yml, each replica's
# state directory in install.yml). The plan, the host's verdict and report are replica_plan.py's.
REPLICAS = 135
# The ladder ends at the first envelope that serves (issue 35's fault trial follow-up, 25 lines): attempt.yml's
# guard blocks and the outcome it keeps, ladder_outcome.yml restoring it after the loop (an include_tasks loop
# evaluates its condition for every item before the first runs).
LADDER_END = 25
# The model directories' sha256 manifests recorded at a good deploy moved here from sglang_preflight's
# record_models entry point, which the deploy entered a second time after the service (issue 33, 15 lines).
MODEL_RECORD = 15
# Replicas behind gateways (issue 36, 102 lines): the gateway-aware switch and rollback - the gateway role's
# worker_out / worker_in entry points included around the stop in attempt.yml, after the ladder in
# replica_switch.yml, around each replica's rollback in replica_rollback.yml, the host read as a gateway worker in
# replicas.yml - and the `stop` entry point (each replica out of its gateways, drained, stopped). The gateway
# calls themselves (wait for min serving, DELETE, drain, POST, wait healthy) are the gateway role's.
GATEWAY = 102


def test_the_service_tasks_are_at_most_half_their_former_size_plus_the_day2_steps():
    lines = sum(len(path.read_text().splitlines()) for path in TASKS.glob("*.yml"))
    assert lines <= BEFORE // 2 + DAY2 + REPLICAS + LADDER_END + MODEL_RECORD + GATEWAY, f"{lines} lines of task YAML"


def test_no_json_is_parsed_in_jinja_by_the_role_or_the_rollback_playbook():
    files = [*TASKS.glob("*.yml"), REPO / "playbooks" / "rollback.yml"]
    offenders = [str(path.relative_to(REPO)) for path in files if "from_json" in path.read_text()]
    assert offenders == []


def test_the_release_record_is_read_and_written_only_by_the_module():
    files = [*TASKS.glob("*.yml"), REPO / "playbooks" / "rollback.yml", REPO / "playbooks" / "deploy.yml"]
    offenders = [str(path.relative_to(REPO)) for path in files if "deploy.json" in path.read_text()]
    assert offenders == []
