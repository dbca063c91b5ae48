"""Envelope validation: each error names the envelope, the field and the one rule that failed (issue 23.5)."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation import (
    ENVELOPE_FIELDS,
    check,
    check_all,
    check_envelope,
    check_envelopes,
)

NAME = "sglang_service_envelopes"
GOOD = {"context_length": 131072, "mem_fraction_static": 0.88, "max_running_requests": 3, "cuda_graph": True}
DICT = {"type": "dict"}


def errors_of(**changes):
    envelope = {k: v for k, v in {**GOOD, **changes}.items() if v is not ...}
    return check_envelope(f"{NAME}.full", envelope)


def test_the_defaults_and_an_environment_are_valid():
    assert errors_of() == []
    assert errors_of(environment={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "N": 1}) == []
    assert errors_of(context_length="32768", mem_fraction_static="0.9", cuda_graph=False) == []
    assert errors_of(context_length=0) == []


def test_fraction_above_one_names_envelope_field_and_rule():
    assert errors_of(mem_fraction_static=1.2) == [
        f"{NAME}.full.mem_fraction_static=1.2 is outside (0, 1); use a number strictly between 0 and 1, such as 0.88"
    ]


@pytest.mark.parametrize("value", [0, 1, -0.5, 1.0, "1.5"])
def test_fraction_outside_zero_one_is_refused(value):
    (error,) = errors_of(mem_fraction_static=value)
    assert error.startswith(f"{NAME}.full.mem_fraction_static=") and " is outside (0, 1); " in error


@pytest.mark.parametrize(("value", "rule"), [("lots", "is a string, not a number"), (True, "is a bool, not a number"),
                                             ([0.5], "is a list, not a number")])  # fmt: skip
def test_fraction_not_a_number_is_refused(value, rule):
    (error,) = errors_of(mem_fraction_static=value)
    assert "mem_fraction_static=" in error and rule in error


def test_missing_fraction_is_refused_as_required():
    assert errors_of(mem_fraction_static=...) == [
        f"{NAME}.full.mem_fraction_static is missing (required); use a number strictly between 0 and 1, such as 0.88"
    ]


@pytest.mark.parametrize(
    ("value", "rule"),
    [(-1, "is below 0"), ("big", "is a string, not a whole number"), (1.5, "is a number, not a whole number"),
     (True, "is a bool, not")],
)  # fmt: skip
def test_context_length_rule(value, rule):
    (error,) = errors_of(context_length=value)
    assert error.startswith(f"{NAME}.full.context_length=") and rule in error and "whole number >= 0" in error


@pytest.mark.parametrize(("value", "rule"), [(0, "is below 1"), ("four", "not a whole number"), (None, "is null")])
def test_max_running_requests_rule(value, rule):
    (error,) = errors_of(max_running_requests=value)
    assert error.startswith(f"{NAME}.full.max_running_requests=") and rule in error and "whole number >= 1" in error


@pytest.mark.parametrize("value", ["false", "yes", 0, None])
def test_cuda_graph_must_be_a_real_boolean(value):
    """The planner reads cuda_graph with Python's bool(): the string "false" would be true there."""
    (error,) = errors_of(cuda_graph=value)
    assert error.startswith(f"{NAME}.full.cuda_graph=") and "not a boolean; use true or false" in error


def test_unknown_field_names_the_closest_field():
    envelope = {k: v for k, v in GOOD.items() if k != "mem_fraction_static"} | {"mem_fraction": 0.9}
    assert check_envelope(f"{NAME}.full", envelope) == [
        f"{NAME}.full.mem_fraction is not an envelope field (did you mean mem_fraction_static? allowed: "
        + ", ".join(ENVELOPE_FIELDS)
        + ")",
        f"{NAME}.full.mem_fraction_static is missing (required); use a number strictly between 0 and 1, such as 0.88",
    ]


def test_environment_rules():
    assert errors_of(environment="A=1") == [
        f'{NAME}.full.environment="A=1" is a string, not a dict; use a dict of environment variable names'
        " ([A-Z0-9_]) to one-line values"
    ]
    errors = errors_of(environment={"lower": "1", "CUDA_VISIBLE_DEVICES": "0", "MULTI": "a\nB=2", "TRAIL": "x\n"})
    assert errors == [
        f"{NAME}.full.environment.lower: the name is not [A-Z_][A-Z0-9_]*; use a dict of environment variable"
        " names ([A-Z0-9_]) to one-line values",
        f"{NAME}.full.environment.CUDA_VISIBLE_DEVICES: the name is set by the role, not here (reserved:"
        " CUDA_VISIBLE_DEVICES, SGLANG_API_KEY, SGLANG_DDTREE_BUDGET, SGLANG_DDTREE_TREE_BUILDER,"
        " SGLANG_DDTREE_STEP_GRAPH)",
        f'{NAME}.full.environment.MULTI="a\\nB=2" is not a one-line string, number or boolean; use a dict of'
        " environment variable names ([A-Z0-9_]) to one-line values",
        f'{NAME}.full.environment.TRAIL="x\\n" is not a one-line string, number or boolean; use a dict of'
        " environment variable names ([A-Z0-9_]) to one-line values",
    ]


def test_an_envelope_that_is_not_a_dict():
    assert check_envelope(f"{NAME}.full", 0.9) == [
        f"{NAME}.full=0.9 is a number, not a dict; an envelope is a dict of " + ", ".join(ENVELOPE_FIELDS)
        + " (mem_fraction_static required)"
    ]  # fmt: skip


def test_only_the_failing_rule_is_reported_not_every_rule():
    """Before, one assert listed every rule of every field for any mistake."""
    (error,) = errors_of(max_running_requests=0)
    for other in ("context_length", "mem_fraction_static", "cuda_graph", "environment"):
        assert other not in error


def test_each_envelope_is_named_and_every_broken_field_reported():
    envelopes = {"full": dict(GOOD), "small": dict(GOOD, mem_fraction_static=1.2, max_running_requests=0)}
    errors = check_envelopes(NAME, envelopes)
    assert [e.split(" ", 1)[0] for e in errors] == [
        f"{NAME}.small.mem_fraction_static=1.2",
        f"{NAME}.small.max_running_requests=0",
    ]


def test_the_envelopes_rule_through_check_and_check_all():
    value = {"full": dict(GOOD, mem_fraction_static=1.2)}
    assert check(NAME, value, DICT, {"envelopes": True}) == [
        f"{NAME}.full.mem_fraction_static=1.2 is outside (0, 1); use a number strictly between 0 and 1, such as 0.88"
    ]
    assert check(NAME, value, DICT) == []  # without the rule a dict is a dict
    assert check_all({NAME: "full"}, {NAME: DICT}, {NAME: {"envelopes": True}})[0].startswith(
        f'{NAME}="full": must be a dict'
    )
