"""Each default has one source: role defaults, argument specs, module specs and module docs cannot drift.

A role variable's default lives in ``defaults/main.yml``; its argument spec (``meta/argument_specs.yml``,
what ansible-doc and docs/variables.md show) must say the same. Where a role variable is handed to a
module option, the module's default must equal the role's, so a task that omits the option behaves as
one that passes it. Module docs and ``ARGUMENT_SPEC`` must agree, and so must the Python defaults that
``module_utils`` code falls back on. Validation tasks must not carry their own fallback defaults.
"""

import inspect
import pathlib
import re

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils import readiness
from ansible_collections.specdec.sglang.plugins.modules import nvidia_gpu_facts, sglang_readiness

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())

# role variable -> (module, option): the role passes the variable to the option.
HANDED_TO_MODULES = {
    "sglang_preflight_nvidia_smi": (nvidia_gpu_facts, "nvidia_smi"),
    "sglang_preflight_allow_busy_gpus": (nvidia_gpu_facts, "allow_busy"),
    "sglang_preflight_busy_memory_mb": (nvidia_gpu_facts, "busy_memory_mb"),
    "sglang_preflight_min_free_memory_mb": (nvidia_gpu_facts, "min_free_memory_mb"),
    "sglang_preflight_expected_gpu_count": (nvidia_gpu_facts, "expected_count"),
    "sglang_preflight_expected_gpu_name": (nvidia_gpu_facts, "expected_name"),
    "sglang_preflight_nvidia_smi_timeout_s": (nvidia_gpu_facts, "timeout_s"),
    "sglang_service_startup_timeout_s": (sglang_readiness, "startup_timeout"),
    "sglang_service_readiness_poll_interval_s": (sglang_readiness, "poll_interval"),
}
PROBE_KEYS = ("prompt", "max_new_tokens", "temperature", "timeout", "api")


def role_defaults(role):
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def role_spec(role):
    return yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def module_spec(module):
    return module.ARGUMENT_SPEC


def all_defaults():
    merged = {}
    for role in ROLES:
        merged.update(role_defaults(role))
    return merged


@pytest.mark.parametrize("role", ROLES)
def test_every_role_default_is_documented_with_the_same_value(role):
    defaults = role_defaults(role)
    options = role_spec(role)["main"]["options"]
    assert sorted(set(defaults) - set(options)) == [], "defaults without an argument spec"
    assert sorted(set(options) - set(defaults)) == [], "argument specs without a default in defaults/main.yml"
    drift = {n: (defaults[n], options[n].get("default")) for n in defaults if defaults[n] != options[n].get("default")}
    assert drift == {}


@pytest.mark.parametrize("role", ROLES)
def test_entry_points_other_than_main_do_not_repeat_options(role):
    for name, entry in role_spec(role).items():
        if name != "main":
            assert (entry.get("options") or {}) == {}, f"entry point {name} repeats options of main"


@pytest.mark.parametrize("variable", sorted(HANDED_TO_MODULES))
def test_module_option_default_equals_the_role_default(variable):
    module, option = HANDED_TO_MODULES[variable]
    assert module_spec(module)[option]["default"] == all_defaults()[variable]


def test_probe_defaults_of_the_role_equal_the_readiness_module_defaults():
    role_probe = all_defaults()["sglang_service_probe"]
    module_probe = {k: sglang_readiness.PROBE_SPEC[k]["default"] for k in PROBE_KEYS}
    assert {k: role_probe.get(k) for k in PROBE_KEYS} == module_probe


@pytest.mark.parametrize("module", [nvidia_gpu_facts, sglang_readiness], ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_module_docs_state_the_argument_spec_defaults(module):
    documented = yaml.safe_load(module.DOCUMENTATION)["options"]
    for option, spec in module_spec(module).items():
        if "default" in spec:
            assert documented[option].get("default") == spec["default"], option


def test_readiness_params_fall_back_on_the_module_defaults():
    signature = inspect.signature(readiness.Params.__init__).parameters
    spec = module_spec(sglang_readiness)
    for option in ("startup_timeout", "poll_interval", "journal_max_bytes"):
        assert signature[option].default == spec[option]["default"], option


@pytest.mark.parametrize("role", ROLES)
def test_validation_tasks_carry_no_fallback_defaults_of_their_role_variables(role):
    """A `| default(<literal>)` on the role's own variable (or a key of it) would be a second source for its default.

    A role reading another role's variable may fall back (that role's defaults may not be loaded).
    """
    names = "|".join(re.escape(n) for n in role_defaults(role))
    pattern = re.compile(r"\b(" + names + r")(\.[a-z_]+)?\s*\|\s*default\((?!none\)|omit\))[^)]")
    offenders = []
    for validate in [REPO / "roles" / role / "tasks" / "validate.yml"]:
        for number, line in enumerate(validate.read_text().splitlines(), 1):
            if pattern.search(line):
                offenders.append(f"{validate.relative_to(REPO)}:{number}: {line.strip()}")
    assert offenders == []
