"""The workflow template (deploy, on failure diagnose, then rollback) and how its rollback node picks
each host's release from the deploy's artifacts, rendered by Ansible's templar as the job will."""

import awx_job
import pytest
import survey_checks

DATA = awx_job.load_templates()
ROLLBACK = awx_job.job_template("sglang rollback", DATA)
EXPRESSION = ROLLBACK["extra_vars"]["sglang_rollback_release"]


def target(host, **variables):
    return survey_checks.render(EXPRESSION, {"inventory_hostname": host, **variables})


def failed(previous):
    return {"ok": False, "release_id": "new1", "previous_release_id": previous, "failure_class": "crashed_on_start"}


def test_workflow_is_deploy_then_diagnose_on_failure_then_rollback():
    (workflow,) = DATA["specdec_awx_workflow_templates"]
    nodes = {n["identifier"]: n for n in workflow["workflow_nodes"]}
    assert nodes["deploy"]["unified_job_template"]["name"] == "sglang deploy"
    assert nodes["deploy"]["related"] == {"failure_nodes": [{"identifier": "diagnose"}]}
    assert nodes["diagnose"]["unified_job_template"]["name"] == "sglang diagnose"
    assert nodes["diagnose"]["related"] == {"always_nodes": [{"identifier": "rollback"}]}
    assert nodes["rollback"]["unified_job_template"]["name"] == "sglang rollback"
    assert "related" not in nodes["rollback"]


def test_rollback_by_hand_keeps_the_previous_good_release_meaning():
    assert target("ct200") == ""  # rollback.yml: empty = the release before the last good one


@pytest.mark.parametrize(
    ("artifacts", "expected"),
    [
        ({"ct200": failed("good7")}, "good7"),  # restored by the deploy: re-verified, never one step further
        ({"ct200": {**failed("good7"), "ok": True}}, "good7"),  # reached and switched: undo this deploy
        ({"ct200": failed("")}, "not-deployed-by-this-workflow"),  # first deploy: nothing to return to
        ({"ct129": failed("good7")}, "not-deployed-by-this-workflow"),  # never reached: refused, unchanged
        ({}, "not-deployed-by-this-workflow"),  # the deploy stopped before any host
    ],
)
def test_rollback_in_the_workflow_returns_each_host_to_its_last_good_release(artifacts, expected):
    variables = {"awx_workflow_job_id": 42, "awx_workflow_job_name": "sglang deploy with diagnosis"}
    if artifacts:
        variables["sglang_deploy"] = artifacts
    assert target("ct200", **variables) == expected


def test_an_answer_in_the_survey_wins_over_the_workflow_default():
    trusted, answers, errors = awx_job.launch_extra_vars(ROLLBACK, {"sglang_rollback_release": "abc123"})
    assert errors == []
    assert {**trusted, **answers}["sglang_rollback_release"] == "abc123"  # launch-time vars come last
    trusted, answers, errors = awx_job.launch_extra_vars(ROLLBACK, {})
    assert errors == [] and "sglang_rollback_release" not in answers  # no default: the expression applies
