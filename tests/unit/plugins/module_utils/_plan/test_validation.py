"""Strict variable checks: a string is never a list, -e scalars are read one way, messages name allowed values."""

import json

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation import (
    SpecError,
    check,
    check_all,
    convert,
    unknown_variables,
)

LIST_STR = {"type": "list", "elements": "str"}


def test_string_for_a_list_is_refused_with_the_json_that_passes_a_list():
    errors = check("sglang_preflight_gpus", "12", LIST_STR)
    assert len(errors) == 1
    assert errors[0].startswith('sglang_preflight_gpus="12": must be a list of str, not a string')
    assert """-e '{"sglang_preflight_gpus": ["12"]}'""" in errors[0]


def test_comma_string_suggests_its_items_as_the_list():
    errors = check("sglang_preflight_gpus", "1,2", LIST_STR)
    assert """-e '{"sglang_preflight_gpus": ["1", "2"]}'""" in errors[0]


def test_string_for_a_dict_is_refused_with_an_example():
    errors = check("sglang_service_environment", "A=1", {"type": "dict"})
    assert "must be a dict" in errors[0]
    assert '-e \'{"sglang_service_environment": {"name": "value"}}\'' in errors[0]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(8000, 8000), ("8000", 8000), (" 42 ", 42), (3.0, 3), ("-1", -1)],
)
def test_ints_from_extra_vars_strings_are_read_as_ints(value, expected):
    assert convert("x", value, "int") == (expected, [])


@pytest.mark.parametrize("value", ["banana", "1.5", 1.5, True, [1], {"a": 1}, ""])
def test_non_integers_are_refused_naming_the_variable(value):
    converted, errors = convert("sglang_service_port", value, "int")
    assert converted is None
    assert errors[0].startswith(f"sglang_service_port={json.dumps(value)}: must be an integer")


@pytest.mark.parametrize(("value", "expected"), [("yes", True), ("False", False), (1, True), (False, False)])
def test_booleans_from_strings(value, expected):
    assert convert("x", value, "bool") == (expected, [])


def test_unknown_boolean_word_lists_the_allowed_words():
    errors = check("sglang_stop_disable", "maybe", {"type": "bool"})
    assert errors == ['sglang_stop_disable="maybe": must be a boolean, one of true, false (also yes/no, on/off, 1/0)']


def test_range_message_names_the_allowed_range():
    assert check("sglang_service_port", "80", {"type": "int"}, {"min": 1024, "max": 65535}) == [
        "sglang_service_port=80: must be in 1024-65535"
    ]
    assert check("sglang_service_port", 65535, {"type": "int"}, {"min": 1024, "max": 65535}) == []
    assert check("t", 0, {"type": "int"}, {"min": 1}) == ["t=0: must be >= 1"]


def test_choices_are_listed():
    spec = {"type": "str", "choices": ["DFLASH", "DDTREE"]}
    assert check("sglang_service_speculative_algorithm", "EAGLE", spec) == [
        'sglang_service_speculative_algorithm="EAGLE": must be one of DFLASH, DDTREE'
    ]
    assert check("sglang_service_speculative_algorithm", "DDTREE", spec) == []


def test_list_elements_are_checked_one_by_one_with_their_index():
    rule = {"pattern": "^[0-9]+$", "means": "a GPU index", "unique": True}
    errors = check("sglang_preflight_gpus", ["1", "x", "1"], LIST_STR, rule)
    assert errors == [
        'sglang_preflight_gpus: "1" listed more than once; allowed: each item once',
        'sglang_preflight_gpus[1]="x": must be a GPU index',
    ]


def test_list_element_of_the_wrong_type():
    errors = check("sglang_service_extra_flags", ["--a", ["--b"]], LIST_STR)
    assert errors == ['sglang_service_extra_flags[1]=["--b"]: must be a string, not a list']


def test_absolute_path_rule_and_empty_values():
    rule = {"abs_path": True}
    assert check("p", "/opt/sglang", {"type": "path"}, rule) == []
    assert "must be an absolute path" in check("p", "opt/sglang", {"type": "path"}, rule)[0]
    assert "must be an absolute path" in check("p", "/opt/my dir", {"type": "path"}, rule)[0]
    assert "must be an absolute path" in check("p", "", {"type": "path"}, rule)[0]
    assert check("p", "", {"type": "path"}, {"abs_path": True, "allow_empty": True}) == []


def test_non_empty_list_rule():
    errors = check("sglang_service_envelope_ladder", [], LIST_STR, {"non_empty": True, "means": "envelope names"})
    assert errors == ["sglang_service_envelope_ladder=[]: must list at least one item; envelope names"]


def test_dict_keys_reserved_keys_and_values():
    rule = {
        "key_pattern": "^[A-Z_][A-Z0-9_]*$",
        "means": "names of [A-Z0-9_]",
        "keys_not_in": ["CUDA_VISIBLE_DEVICES"],
        "value_pattern": "^[^\\n]*$",
        "value_means": "a one-line value",
    }
    errors = check("env", {"lower": "1", "CUDA_VISIBLE_DEVICES": "0", "OK": "a\nb"}, {"type": "dict"}, rule)
    assert errors == [
        "env: key(s) lower must be names of [A-Z0-9_]",
        "env: key(s) CUDA_VISIBLE_DEVICES are set by the role, not here (reserved: CUDA_VISIBLE_DEVICES)",
        'env["OK"]="a\\nb": must be a one-line value',
    ]
    assert check("limits", {"NOFILE": 1, "BAD": 2}, {"type": "dict"}, {"keys": ["NOFILE"]}) == [
        "limits: unknown key(s) BAD; allowed keys: NOFILE"
    ]


@pytest.mark.parametrize("value", [1, "3", "25%", "100%", [1, "50%"], ["1"]])
def test_serial_accepts_counts_percentages_and_lists(value):
    assert check("sglang_deploy_serial", value, {"type": "raw"}, {"batch_size": True}) == []


@pytest.mark.parametrize("value", ["banana", 0, "0", "150%", "0%", [], [1, "x"], True, {"a": 1}])
def test_serial_refuses_anything_else_naming_the_allowed_forms(value):
    errors = check("sglang_deploy_serial", value, {"type": "raw"}, {"batch_size": True})
    assert len(errors) == 1
    assert errors[0].startswith("sglang_deploy_serial")
    assert 'a host count >= 1 (such as 1), a percentage of the hosts (such as "25%")' in errors[0]


def test_secret_values_never_appear_in_messages():
    specs = {"sglang_service_api_key": {"type": "str", "no_log": True}}
    errors = check_all({"sglang_service_api_key": ["s3cret-key"]}, specs)
    assert errors == ['sglang_service_api_key="<hidden>": must be a string, not a list']


def test_check_all_skips_unset_and_reports_required():
    specs = {"a": {"type": "int"}, "b": {"type": "int", "required": True}}
    assert check_all({}, specs) == ["b: is required and not set; see docs/variables.md"]


def test_rule_without_a_spec_or_unknown_rule_key_is_a_role_bug():
    with pytest.raises(SpecError, match="without an argument spec: c"):
        check_all({}, {"a": {"type": "int"}}, {"c": {"min": 1}})
    with pytest.raises(SpecError, match="unknown rule key"):
        check("a", 1, {"type": "int"}, {"minimum": 1})


def test_null_is_refused():
    assert check("x", None, {"type": "str"})[0].startswith("x: must be set (found null)")


def test_unknown_role_variables_name_the_closest_known_one():
    known = {"sglang_service_speculative_algorithm", "sglang_service_port", "sglang_runtime_root"}
    names = ["sglang_service_speculative_algo", "sglang_service_port", "_sglang_service_internal", "ansible_host"]
    assert unknown_variables(names, known, ["sglang_service_", "sglang_runtime_"]) == [
        "sglang_service_speculative_algo: no role reads this variable"
        " (did you mean sglang_service_speculative_algorithm?); remove it or fix its name"
    ]
    far = unknown_variables(["sglang_runtime_unrelated_name"], known, ["sglang_runtime_"])
    assert far == [
        "sglang_runtime_unrelated_name: no role reads this variable"
        " (known sglang_runtime_* variables: sglang_runtime_root); remove it or fix its name"
    ]
