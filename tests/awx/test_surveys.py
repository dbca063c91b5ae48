"""Surveys of awx/templates.yml: AWX's survey rules, and each answer valid for the variable it reaches.

Each check is shown to fail on a mutated survey (wrong type, unknown variable, default outside the
choices, a renamed role variable, an ordered list as a multiselect).
"""

import copy

import awx_job
import pytest
import survey_checks
import yaml

DATA = awx_job.load_templates()
TEMPLATES = DATA["specdec_awx_job_templates"]
QUESTIONS = [(t, q) for t in TEMPLATES for q in t["survey"]]
SPECS = survey_checks.role_specs()


def survey_of(template):
    """The survey spec configure.yml sends to AWX for a template."""
    return {"name": template["name"], "description": template["description"], "spec": template["survey"]}


def question(template_name, variable, data=DATA):
    template = awx_job.job_template(template_name, data)
    return template, next(q for q in template["survey"] if q["variable"] == variable)


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t["name"])
def test_survey_passes_awx_survey_rules(template):
    assert template["survey"], "every template has a survey (AWX refuses an empty one)"
    assert awx_job.survey_spec_errors(survey_of(template)) == []


@pytest.mark.parametrize(("template", "q"), QUESTIONS, ids=lambda x: x["variable"] if "variable" in x else x["name"])
def test_question_reaches_a_variable_that_accepts_every_value_it_can_send(template, q):
    assert survey_checks.question_errors(q, template, SPECS) == []


@pytest.mark.parametrize(("template", "q"), QUESTIONS, ids=lambda x: x["variable"] if "variable" in x else x["name"])
def test_default_is_sent_at_launch(template, q):
    """AWX silently drops a default that fails its own question: every default here must be sent."""
    _, values, errors = awx_job.launch_extra_vars(template, {})
    assert errors == []
    if "default" in q:
        assert values[q["variable"]] == q["default"]
    else:
        assert q["variable"] not in values, "a question without a default leaves the inventory's value"
        assert not q["required"]


def test_hosts_per_batch_is_a_bounded_integer_not_free_text():
    template, q = question("sglang deploy", "sglang_deploy_serial")
    assert q["type"] == "integer"
    assert q["min"] >= 1
    _, _, errors = awx_job.launch_extra_vars(template, {"sglang_deploy_serial": "banana"})
    assert errors == ["value 'banana' for 'sglang_deploy_serial' expected to be an integer"]
    _, _, errors = awx_job.launch_extra_vars(template, {"sglang_deploy_serial": 0})
    assert errors and "too small" in errors[0]
    _, values, errors = awx_job.launch_extra_vars(template, {"sglang_deploy_serial": 2})
    assert errors == [] and values["sglang_deploy_serial"] == 2


def test_envelope_ladder_keeps_its_order_and_names_known_envelopes():
    """One choice per whole ladder (a multiselect keeps no order), rendered into the role's list."""
    template, q = question("sglang deploy", "specdec_awx_envelope_ladder")
    assert q["type"] == "multiplechoice"
    (target, expression), *_ = survey_checks.mapped_targets(template, q["variable"]).items()
    assert target == "sglang_service_envelope_ladder"
    envelopes = SPECS["sglang_service_envelopes"]["default"]
    for choice in q["choices"]:
        ladder = survey_checks.render(expression, {q["variable"]: choice})
        assert ladder == choice.split(","), "the order of the choice is the order of the ladder"
        assert set(ladder) <= set(envelopes), f"{choice}: names an envelope the role does not define"
        assert len(set(ladder)) == len(ladder)


def test_deploy_survey_offers_gpus_algorithm_and_rollback_release():
    variables = {q["variable"] for t in TEMPLATES for q in t["survey"]}
    assert {"sglang_preflight_gpus", "sglang_service_speculative_algorithm", "sglang_rollback_release"} <= variables
    _, q = question("sglang deploy", "sglang_service_speculative_algorithm")
    assert sorted(q["choices"]) == sorted(SPECS["sglang_service_speculative_algorithm"]["choices"])


# --- the checks fail on mutated surveys ----------------------------------------------------------


def mutated(template_name, variable, **changes):
    data = copy.deepcopy(DATA)
    template, q = question(template_name, variable, data)
    for key, value in changes.items():
        if value is None:
            q.pop(key, None)
        else:
            q[key] = value
    return template, q


def test_mutation_free_text_hosts_per_batch_is_refused():
    template, q = mutated("sglang deploy", "sglang_deploy_serial", type="text", default="1", min=None, max=None)
    assert awx_job.survey_spec_errors(survey_of(template)) == []  # AWX itself would accept it...
    errors = survey_checks.question_errors(q, template, SPECS)  # ...but the play keyword wants an int
    assert errors == ["sglang_deploy_serial: a text answer cannot be a int (spec play keyword serial)"]


def test_mutation_wrong_default_type_is_refused():
    template, _ = mutated("sglang deploy", "sglang_deploy_max_fail_percentage", default="0")
    assert awx_job.survey_spec_errors(survey_of(template)) == [
        "question 1 (sglang_deploy_max_fail_percentage): default '0' expected to be integer"
    ]


def test_mutation_wrong_type_for_a_role_list_is_refused():
    template, q = mutated("sglang deploy", "sglang_preflight_gpus", type="text", choices=None, default="1")
    assert survey_checks.question_errors(q, template, SPECS) == [
        "sglang_preflight_gpus: a text answer cannot be a list (spec sglang_preflight)"
    ]


def test_mutation_unknown_variable_is_refused():
    template, q = mutated("sglang deploy", "sglang_service_speculative_algorithm")
    q["variable"] = "sglang_service_speculative_algo"
    errors = survey_checks.question_errors(q, template, SPECS)
    assert len(errors) == 1 and errors[0].startswith("sglang_service_speculative_algo: not a role variable")


def test_mutation_renamed_role_variable_is_refused():
    """A role renames a variable a survey exposes: the survey check fails until the survey follows."""
    template, q = question("sglang deploy", "sglang_preflight_gpus")
    specs = dict(SPECS)
    specs["sglang_preflight_gpu_ids"] = specs.pop("sglang_preflight_gpus")
    errors = survey_checks.question_errors(q, template, specs)
    assert len(errors) == 1 and errors[0].startswith("sglang_preflight_gpus: not a role variable")


def test_mutation_default_outside_the_choices_is_refused():
    template, _ = mutated("sglang deploy", "sglang_service_speculative_algorithm", default="EAGLE")
    assert awx_job.survey_spec_errors(survey_of(template)) == [
        "question 4 (sglang_service_speculative_algorithm): default ['EAGLE'] not among the choices"
        " ['DFLASH', 'DDTREE']"
    ]


def test_mutation_choice_the_role_refuses_is_refused():
    template, q = mutated(
        "sglang deploy", "sglang_service_speculative_algorithm", choices=["DFLASH", "DDTREE", "EAGLE"]
    )
    assert awx_job.survey_spec_errors(survey_of(template)) == []
    errors = survey_checks.question_errors(q, template, SPECS)
    assert len(errors) == 1 and "sglang_service_speculative_algorithm='EAGLE'" in errors[0]
    assert "DFLASH, DDTREE" in errors[0]


def test_mutation_ladder_as_a_multiselect_is_refused():
    template, q = mutated(
        "sglang deploy",
        "specdec_awx_envelope_ladder",
        type="multiselect",
        choices=["full", "small", "small-nograph"],
        default=None,
    )
    q["variable"] = "sglang_service_envelope_ladder"
    errors = survey_checks.question_errors(q, template, SPECS)
    assert errors == ["sglang_service_envelope_ladder: a multiselect keeps no order, and this list is tried in order"]


def test_mutation_survey_range_wider_than_the_keyword_is_refused():
    template, q = mutated("sglang deploy", "sglang_deploy_max_fail_percentage", max=150)
    errors = survey_checks.question_errors(q, template, SPECS)
    assert "sglang_deploy_max_fail_percentage=150: above 100 (play keyword max_fail_percentage)" in errors
    assert (
        "sglang_deploy_max_fail_percentage: survey max 150 outside the play keyword max_fail_percentage range"
    ) in errors


def test_mutation_duplicate_variable_and_missing_required_are_refused():
    data = copy.deepcopy(DATA)
    template = awx_job.job_template("sglang deploy", data)
    template["survey"].append(dict(template["survey"][0]))
    del template["survey"][1]["required"]
    errors = awx_job.survey_spec_errors(survey_of(template))
    assert errors == [
        "question 1: required missing or of the wrong type",
        "question 6: variable 'sglang_deploy_serial' duplicated",
    ]


# --- AWX's launch-time rules, as the runner helper applies them ----------------------------------


@pytest.mark.parametrize(
    ("q", "answer", "expected"),
    [
        ({"variable": "v", "type": "integer", "required": True}, {"v": True}, ["expected to be an integer"]),
        ({"variable": "v", "type": "integer", "required": True, "min": 1, "max": 4}, {"v": 5}, ["too large"]),
        ({"variable": "v", "type": "integer", "required": True}, {"v": 1.5}, ["expected to be an integer"]),
        ({"variable": "v", "type": "integer", "required": True}, {}, ["value missing"]),
        ({"variable": "v", "type": "integer", "required": False}, {}, []),
        ({"variable": "v", "type": "text", "required": True, "max": 3}, {"v": "abcd"}, ["too large"]),
        ({"variable": "v", "type": "text", "required": True}, {"v": 3}, ["expected to be a string"]),
        ({"variable": "v", "type": "multiselect", "required": True, "choices": ["a"]}, {"v": "a"}, ["a list"]),
        ({"variable": "v", "type": "multiselect", "required": True, "choices": ["a"]}, {"v": ["b"]}, ["one of"]),
        ({"variable": "v", "type": "multiplechoice", "required": True, "choices": "a\nb"}, {"v": "b"}, []),
        ({"variable": "v", "type": "float", "required": True, "min": 0}, {"v": -1}, ["too small"]),
    ],
)
def test_awx_launch_rules(q, answer, expected):
    errors = awx_job.answer_errors(q, answer)  # AWX compares type() exactly: True is no integer
    assert len(errors) == len(expected)
    for error, part in zip(errors, expected):
        assert part in error


def test_mutation_values_the_projects_own_validation_refuses_are_refused():
    """Beyond the argument spec: the rule the role or the playbook applies in its first play."""
    template, q = mutated("sglang deploy", "specdec_awx_envelope_ladder", choices=["full", "full,full"])
    errors = survey_checks.question_errors(q, template, SPECS)
    assert len(errors) == 1
    assert errors == [
        "specdec_awx_envelope_ladder='full,full' -> sglang_service_envelope_ladder: \"full\" listed more than once;"
        " allowed: each item once"
    ]
    template, q = mutated("sglang rollback", "sglang_rollback_release", default="release 7")
    errors = survey_checks.question_errors(q, template, SPECS)
    assert len(errors) == 1 and errors[0].startswith('sglang_rollback_release="release 7": must be a release id')


def test_every_algorithm_the_survey_offers_is_served_by_the_default_runtime():
    _template, q = question("sglang deploy", "sglang_service_speculative_algorithm")
    assert survey_checks.runtime_serves_errors(q["choices"]) == []


def test_mutation_a_runtime_no_set_serves_ddtree_on_is_refused(tmp_path):
    """With a runtime whose only patch set serves no algorithm, the survey may not offer DDTREE."""
    source = survey_checks.REPO / "patchsets" / "ddtree-0.5.23" / "patchset.yml"
    manifest = yaml.safe_load(source.read_text())
    manifest["serves"]["algorithms"] = []
    (tmp_path / "patchsets" / "ddtree-0.5.23").mkdir(parents=True)
    (tmp_path / "patchsets" / "ddtree-0.5.23" / "patchset.yml").write_text(yaml.safe_dump(manifest))
    errors = survey_checks.runtime_serves_errors(["DFLASH", "DDTREE"], tmp_path, sglang_version="0.5.23")
    assert len(errors) == 1
    assert errors[0].startswith("sglang_service_speculative_algorithm=DDTREE: no patch set serves it")
    assert "ddtree-0.5.23 (sglang 0.5.23; serves algorithms: none" in errors[0]


# --- the sglang version: the manifest follows it, so a survey may offer only known runtimes --------------

VERSION_QUESTION = {
    "variable": "sglang_runtime_sglang_version",
    "question_name": "sglang version",
    "type": "multiplechoice",
    "required": False,
}


def with_version_question(choices):
    template = copy.deepcopy(awx_job.job_template("sglang deploy", DATA))
    template["survey"].append(dict(VERSION_QUESTION, choices=list(choices)))
    return template


def test_a_version_question_offering_known_runtimes_passes_without_ddtree():
    template = with_version_question(survey_checks.known_runtime_versions())
    algorithm = next(q for q in template["survey"] if q["variable"] == "sglang_service_speculative_algorithm")
    algorithm["choices"] = ["DFLASH"]
    assert [e for q in template["survey"] for e in survey_checks.question_errors(q, template, SPECS)] == []


def test_mutation_a_version_with_no_known_runtime_is_refused_naming_the_known_ones():
    template = with_version_question(["0.5.99"])
    errors = survey_checks.question_errors(template["survey"][-1], template, SPECS)
    assert len(errors) == 1
    assert errors[0].startswith("sglang_runtime_sglang.version=0.5.99: no known runtime to derive the manifest from")
    assert ", ".join(survey_checks.known_runtime_versions()) in errors[0]


def test_mutation_ddtree_offered_with_a_version_no_set_serves_it_on_is_refused():
    """The survey cannot tie one answer to another: DDTREE may be offered only if every offered version serves it."""
    template = with_version_question([*survey_checks.known_runtime_versions(), "0.5.99"])
    _t, algorithm = question("sglang deploy", "sglang_service_speculative_algorithm")
    errors = survey_checks.question_errors(algorithm, template, SPECS)
    assert len(errors) == 1
    assert errors[0].startswith(
        "sglang_service_speculative_algorithm=DDTREE: no patch set serves it on a runtime the survey offers"
        " (sglang 0.5.99)"
    )
    assert survey_checks.question_errors(algorithm, with_version_question(["0.5.17"]), SPECS) == []
