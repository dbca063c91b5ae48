"""The gateway role's inputs (roles/sglang_gateway): rules in validation_rules, every error at once, no Ansible."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import validation_rules
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation_rules import GATEWAY, check_inputs

REPO = pathlib.Path(__file__).resolve().parents[5]
SPECS = {
    role: yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    for role in validation_rules.ALL_ROLES
}
DEFAULTS = yaml.safe_load((REPO / "roles" / GATEWAY / "defaults" / "main.yml").read_text())
SERVICE_DEFAULTS = yaml.safe_load((REPO / "roles" / "sglang_service" / "defaults" / "main.yml").read_text())
GOOD = {
    **{k: v for k, v in DEFAULTS.items() if "{{" not in str(v)},
    "sglang_gateway_workers": ["http://192.0.2.5:30000", "http://192.0.2.5:30001", "http://[2001:db8::7]:30000"],
}


def errors(**changes):
    return check_inputs({**GOOD, **changes}, SPECS, roles=(GATEWAY,))


def test_the_lab_and_default_inputs_are_valid():
    assert errors() == []
    assert errors(sglang_gateway_wheels=["/w/smg-1.13.0-cp38-abi3-manylinux_2_28_x86_64.whl", "/w/x.whl"]) == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"sglang_gateway_workers": []}, "sglang_gateway_workers"),
        ({"sglang_gateway_workers": ["192.0.2.5:30000"]}, "sglang_gateway_workers"),
        ({"sglang_gateway_workers": ["http://192.0.2.5:30000/v1"]}, "sglang_gateway_workers"),
        ({"sglang_gateway_workers": ["http://a:1", "http://a:1"]}, "sglang_gateway_workers"),
        ({"sglang_gateway_port": 80}, "sglang_gateway_port=80"),
        ({"sglang_gateway_prometheus_port": 70000}, "sglang_gateway_prometheus_port=70000"),
        ({"sglang_gateway_root": "opt/gw"}, "sglang_gateway_root"),
        ({"sglang_gateway_unit_name": "smg.service"}, "sglang_gateway_unit_name"),
        ({"sglang_gateway_smg_version": "latest"}, "sglang_gateway_smg_version"),
        ({"sglang_gateway_drain_timeout_s": 0}, "sglang_gateway_drain_timeout_s=0"),
        ({"sglang_gateway_health_failure_threshold": 0}, "sglang_gateway_health_failure_threshold=0"),
    ],
)
def test_each_bad_input_is_refused_naming_its_variable_and_what_is_allowed(changes, expected):
    found = errors(**changes)
    assert len(found) == 1 and found[0].startswith(expected), found
    assert "must" in found[0] or "allowed" in found[0], found  # what is allowed, said


def test_the_checks_across_variables_and_every_error_at_once():
    found = errors(
        sglang_gateway_port=31000,
        sglang_gateway_prometheus_port=31000,
        sglang_gateway_wheels=["/w/smg-1.12.0-cp38-abi3-manylinux_2_28_x86_64.whl"],
        sglang_gateway_workers=[],
    )
    assert len(found) == 3, found
    assert any(e.startswith("sglang_gateway_workers") for e in found)
    assert any("sglang_gateway_port and sglang_gateway_prometheus_port are both 31000" in e for e in found)
    assert any("has no smg-1.13.0 wheel" in e and "sglang_gateway_smg_version=1.13.0" in e for e in found)


def test_the_gateway_is_no_role_of_the_deploy_and_its_play_variables_are_not_unknown_names_there():
    assert GATEWAY not in validation_rules.ROLES and GATEWAY not in validation_rules.PLAYS["deploy"]["roles"]
    assert not any(p.startswith(f"{GATEWAY}_") for p in validation_rules.ROLE_PREFIXES)


def test_the_service_names_its_gateways_each_once():
    service = {k: v for k, v in SERVICE_DEFAULTS.items() if "{{" not in str(v)}
    ok = check_inputs({**service, "sglang_service_gateways": ["gw1", "gw-2.lab"]}, SPECS, roles=("sglang_service",))
    assert ok == []
    twice = check_inputs({**service, "sglang_service_gateways": ["gw1", "gw1"]}, SPECS, roles=("sglang_service",))
    assert len(twice) == 1 and twice[0].startswith("sglang_service_gateways") and "allowed" in twice[0], twice
    url = check_inputs({**service, "sglang_service_gateways": ["http://gw1:30080"]}, SPECS, roles=("sglang_service",))
    assert len(url) == 1 and "inventory host names" in url[0], url
