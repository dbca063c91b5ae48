"""Each default has one source: role defaults, argument specs, module specs and module docs cannot drift.

A role variable's default lives in ``defaults/main.yml``; its argument spec (``meta/argument_specs.yml``,
what ansible-doc and docs/variables.md show) must say the same. Where a role variable is handed to a
module option, the module's default must equal the role's, so a task that omits the option behaves as
one that passes it. Module docs and ``ARGUMENT_SPEC`` must agree, and so must the Python defaults that
``module_utils`` code falls back on. Validation tasks must not carry their own fallback defaults.
"""

import ast
import inspect
import pathlib
import re
import subprocess
import tempfile

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import readiness
from ansible_collections.specdec.sglang.plugins.modules import (
    nvidia_gpu_facts,
    sglang_host_facts,
    sglang_host_lock,
    sglang_readiness,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())

# role variable -> (module, option): the role passes the variable to the option (host_plan.yml: the host read).
HANDED_TO_MODULES = {
    "sglang_preflight_nvidia_smi": (sglang_host_facts, "nvidia_smi"),
    "sglang_preflight_allow_busy_gpus": (sglang_host_facts, "allow_busy"),
    "sglang_preflight_busy_memory_mb": (sglang_host_facts, "busy_memory_mb"),
    "sglang_preflight_min_free_memory_mb": (sglang_host_facts, "min_free_memory_mb"),
    "sglang_preflight_nvidia_smi_timeout_s": (sglang_host_facts, "nvidia_smi_timeout_s"),
    "sglang_service_startup_timeout_s": (sglang_readiness, "startup_timeout"),
    "sglang_service_readiness_poll_interval_s": (sglang_readiness, "poll_interval"),
    "sglang_service_lock_timeout_s": (sglang_host_lock, "timeout_s"),
    "sglang_service_lock_max_age_s": (sglang_host_lock, "max_age_s"),
    "sglang_service_lock_break": (sglang_host_lock, "break_lock"),
}
# Role variables the plan reads from the play (deploy_plan.INPUT_VARIABLES) whose value when no role sets them (the
# plan's absent value) is the role's default: a plan without the role loaded decides as one with its defaults.
READ_BY_THE_PLAN = ("sglang_preflight_expected_gpu_count", "sglang_preflight_expected_gpu_name")
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


@pytest.mark.parametrize("variable", READ_BY_THE_PLAN)
def test_the_plans_absent_value_equals_the_role_default(variable):
    absent = {var: value for var, value in deploy_plan.INPUT_VARIABLES.values()}
    assert absent[variable] == all_defaults()[variable]


def test_probe_defaults_of_the_role_equal_the_readiness_module_defaults():
    role_probe = all_defaults()["sglang_service_probe"]
    module_probe = {k: sglang_readiness.PROBE_SPEC[k]["default"] for k in PROBE_KEYS}
    assert {k: role_probe.get(k) for k in PROBE_KEYS} == module_probe


@pytest.mark.parametrize(
    "module", [nvidia_gpu_facts, sglang_host_facts, sglang_readiness], ids=lambda m: m.__name__.rsplit(".", 1)[1]
)
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


# The defaults the issue named: each is written in its owner (and mirrored in that role's argument spec,
# which the first test holds equal), nowhere else. Docs, tests (molecule too) and the data that names
# versions on purpose (known runtimes, patch sets, pinned manifests, the GPU bundle lock, the engine
# simulator's imitation of a version) aside; inventory/host_vars are a site's own choices.
SINGLE_OWNERS = {
    "sglang_runtime_sglang_version": "sglang_runtime",
    "sglang_service_port": "sglang_service",
    "sglang_service_speculative_algorithm": "sglang_service",
    "sglang_runtime_root": "sglang_runtime",
}
NOT_SCANNED = (
    "docs/",
    "tests/",
    "molecule/",
    "changelogs/",
    "patchsets/",
    "requirements/",
    "inventory/manifests/",
    "inventory/host_vars/",
    "lab/engine-simulator/",
    "roles/sglang_runtime/files/known_runtimes.yml",
    # generated from tests/device/records by scripts/make-speculation-cost: it names what a record ran
    "roles/sglang_service/files/speculation-cost.json",
)


def _tracked_files():
    names = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return [
        n for n in names if not n.startswith(NOT_SCANNED) and not n.endswith((".md", ".rst")) and (REPO / n).is_file()
    ]


class _Loader(yaml.SafeLoader):
    """Safe loading that reads Ansible's !unsafe / !vault tags as plain strings."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
_Loader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def _yaml_scalars(node, keys=()):
    if isinstance(node, dict):
        for key, value in node.items():
            yield from _yaml_scalars(value, (*keys, str(key)))
    elif isinstance(node, list):
        for value in node:
            yield from _yaml_scalars(value, (*keys, "[]"))
    elif node is not None:
        yield keys, node


CONTAINED = ("sglang_runtime_sglang_version", "sglang_runtime_root")  # also found inside a longer value


def _contains(text: str, literal: str) -> bool:
    """``literal`` inside ``text``; a path only as a whole path component (/opt/sglang-gateway is not /opt/sglang)."""
    if not literal.startswith("/"):
        return literal in text
    return re.search(re.escape(literal) + r"(?![\w.-])", text) is not None


def _yaml_offences(name, text, variable, literal):
    found = []
    owner = f"roles/{SINGLE_OWNERS[variable]}/defaults/main.yml"
    for document in yaml.load_all(text, Loader=_Loader):  # a SafeLoader subclass
        for keys, scalar in _yaml_scalars(document):
            if (keys and keys[-1] == variable and name == owner) or "choices" in keys:
                continue  # the owner; the values allowed are not the default
            as_text = str(scalar)
            copied = as_text == literal or f"default('{literal}')" in as_text or f'default("{literal}")' in as_text
            if copied or (variable in CONTAINED and _contains(as_text, literal)):
                found.append(f"{name}: {'.'.join(keys)}={as_text[:80]}")
    return found


def _python_offences(name, text, variable, literal):
    tree = ast.parse(text)
    for node in ast.walk(tree):  # module docs are docs
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") in ("DOCUMENTATION", "EXAMPLES", "RETURN") for t in node.targets
        ):
            node.value = ast.Constant(value="")
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "default" and isinstance(node.value, ast.Constant):
            if str(node.value.value) == literal:
                found.append(f"{name}:{node.value.lineno}: default={literal}")
        elif (
            variable in CONTAINED
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and literal in node.value
            and not re.search(r"\s", node.value)  # prose (a docstring, a message) describes, it does not set
        ):
            found.append(f"{name}:{node.lineno}: {node.value[:80]!r}")
    return found


def _offences(name: str, variable: str, value) -> list[str]:
    """Where ``value`` (the default of ``variable``) is written in ``name`` as a value of its own."""
    text = (REPO / name).read_text(errors="replace")
    literal = str(value)
    if literal not in text or name.endswith("argument_specs.yml"):  # specs: held equal to the defaults above
        return []
    if name.endswith((".yml", ".yaml")):
        return _yaml_offences(name, text, variable, literal)
    if name.endswith(".py"):
        return _python_offences(name, text, variable, literal)
    if variable not in CONTAINED:
        return []
    return [  # scripts: non-comment lines
        f"{name}:{number}: {line.strip()[:80]}"
        for number, line in enumerate(text.splitlines(), 1)
        if literal in line and not line.lstrip().startswith("#")
    ]


@pytest.mark.parametrize("variable", sorted(SINGLE_OWNERS))
def test_each_named_default_is_written_only_in_its_owner(variable):
    value = role_defaults(SINGLE_OWNERS[variable])[variable]
    offences = [o for name in _tracked_files() for o in _offences(name, variable, value)]
    assert offences == [], f"{variable}={value!r} is written outside roles/{SINGLE_OWNERS[variable]}/defaults/main.yml"


def test_the_single_owner_check_finds_a_copy():
    """The check above can fail: a second copy of the version in a YAML value or a Python default is found."""
    version = role_defaults("sglang_runtime")["sglang_runtime_sglang_version"]
    with tempfile.TemporaryDirectory(dir=REPO) as scratch:
        relative = pathlib.Path(scratch).relative_to(REPO)
        (REPO / relative / "copy.yml").write_text(f"sglang_runtime_sglang:\n  version: '{version}'\n")
        (REPO / relative / "copy.py").write_text(f"SPEC = dict(version=dict(default={version!r}))\n")
        assert _offences(f"{relative}/copy.yml", "sglang_runtime_sglang_version", version)
        assert _offences(f"{relative}/copy.py", "sglang_runtime_sglang_version", version)


def test_the_release_path_is_derived_in_one_function():
    """`<root>/releases/<id>` is built by deploy_plan.release_dir only (the service role reads it from the runtime)."""
    pattern = re.compile(r"""releases/['"]?\s*(~|\+|\{\{)|["']releases["']\s*,""")
    offenders = []
    for name in _tracked_files():
        if not name.startswith(("roles/", "plugins/", "playbooks/")) or name.endswith("deploy_plan.py"):
            continue
        for number, line in enumerate((REPO / name).read_text().splitlines(), 1):
            if pattern.search(line) and not line.lstrip().startswith(("#", "-", "description")):
                offenders.append(f"{name}:{number}: {line.strip()}")
    assert offenders == []


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


# Derived values with one owner (issue 33): each is computed by its owner and handed on (the plan's `paths`,
# validation_rules' release-id pattern and GPU count); a second derivation in roles/, plugins/ or playbooks/
# fails here. The patterns match code (a path joined from its parts, a Jinja concatenation, a regex), not prose.
DERIVED = {
    "state/last_good": (
        re.compile(r"""["']state["']\s*,\s*["']last_good|(\}\}|~\s*["']|\})/state/last_good"""),
        {"plugins/module_utils/_release/release.py"},
    ),
    "current": (
        re.compile(r"""["']current["']\s*\)|\}\}/current\b|~\s*["']/current\b"""),
        {"plugins/module_utils/_release/release.py"},
    ),
    "uv paths": (
        re.compile(
            r"""["']tools["']\s*,\s*f?["']uv-|/tools/uv-(\{\{|["']\s*~)|["']/?cache/uv["']|["']cache["']\s*,\s*["']uv["']"""
        ),
        {"plugins/module_utils/_plan/deploy_plan.py"},
    ),
    "release-id pattern": (
        re.compile(r"""(\^\(?|\br["'])\[A-Za-z0-9(_-\]\[A-Za-z0-9)?\._-\]"""),
        {"plugins/module_utils/_release/release.py"},
    ),
    "GPU count": (
        re.compile(
            r"sglang_preflight_gpus\s*\|\s*length[^}]{0,200}?sglang_preflight_gpu_count|len\(gpus\)\s*or\s*gpu_count"
        ),
        {"plugins/module_utils/_plan/validation_rules.py"},
    ),
}
# The gateway's uv lives under its own root (sglang_gateway_root): its own owner.
DERIVED_SCOPE = ("roles/", "plugins/", "playbooks/")
DERIVED_OWN_TREES = {"uv paths": ("roles/sglang_gateway/",)}


def _code_text(name: str, text: str) -> str:
    """``text`` without comment lines, and for Python without the module docs (DOCUMENTATION, EXAMPLES, RETURN)."""
    if name.endswith(".py"):
        text = re.sub(r'^(DOCUMENTATION|EXAMPLES|RETURN) = r?"""(.|\n)*?"""', "", text, flags=re.M)
    return "\n".join("" if line.lstrip().startswith("#") else line for line in text.splitlines())


def derivations(name: str, text: str) -> list[tuple[str, str]]:
    """(value, "name:line: code") of every derivation in ``text`` outside the value's owner."""
    found = []
    code = _code_text(name, text)
    for value, (pattern, owners) in DERIVED.items():
        if name in owners or name.startswith(DERIVED_OWN_TREES.get(value, ())):
            continue
        for match in pattern.finditer(code):
            line = code.count("\n", 0, match.start()) + 1
            found.append((value, f"{name}:{line}: {code.splitlines()[line - 1].strip()[:100]}"))
    return found


def test_paths_the_release_id_pattern_and_the_gpu_count_are_derived_only_by_their_owners():
    offenders = []
    for name in _tracked_files():
        if not name.startswith(DERIVED_SCOPE) or name.endswith((".md", ".rst")) or "/files/" in name:
            continue
        for value, where in derivations(name, (REPO / name).read_text(errors="replace")):
            offenders.append(f"{value}: {where}")
    assert offenders == [], "derived outside its owner (take it from sglang_deploy_plan or the owner's function)"


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("state/last_good", 'state = os.path.join(root, "state", "last_good")'),
        ("state/last_good", '_dir: "{{ sglang_runtime_root }}/state/last_good"'),
        ("current", 'dest: "{{ sglang_runtime_root }}/current"'),
        ("current", '"current_link": sglang_service_runtime_root ~ "/current",'),
        ("current", 'link = posixpath.join(root, "current")'),
        ("uv paths", 'uv: "{{ sglang_runtime_root }}/tools/uv-{{ sglang_runtime_uv_version }}/bin/uv"'),
        ("uv paths", "cache: \"{{ sglang_runtime_root ~ '/cache/uv' }}\""),
        ("uv paths", 'tool = posixpath.join(root, "tools", f"uv-{version}")'),
        ("release-id pattern", 'RELEASE = re.compile(r"^[A-Za-z0-9._-]+$")'),
        ("release-id pattern", "when: sglang_service_release_id is regex_search('^[A-Za-z0-9._-]+$')"),
        ("GPU count", 'count: "{{ sglang_preflight_gpus | length or sglang_preflight_gpu_count | int }}"'),
        ("GPU count", "wanted = len(gpus) or gpu_count or tp_size"),
    ],
)
def test_the_owner_check_finds_a_second_derivation(value, code):
    assert [v for v, _where in derivations("roles/sglang_other/tasks/x.yml", code + "\n")] == [value]
    assert derivations("roles/sglang_other/tasks/x.yml", "# " + code + "\n") == []  # a comment describes


# A fallback that restates a role's default (``sglang_service_port | default(30000)``) is a second copy of it: the
# owner's value changes and the copy does not. An empty fallback (``[]``, ``{}``, ``''``) says "not set", not a value.
FALLBACK_SCOPE = ("roles/", "playbooks/", "deploy.yml", "plugins/", "extensions/")


def _default_literals(value) -> list[str]:
    if isinstance(value, bool):
        return [str(value).lower(), str(value)]
    if isinstance(value, (int, float)):
        return [str(value)]
    if isinstance(value, str) and value and "{{" not in value:
        return [f"'{value}'", f'"{value}"']
    return []


def fallback_restatements(name: str, text: str, defaults: dict) -> list[str]:
    """``name:line: var | default(literal)`` wherever ``literal`` is ``var``'s role default (outside its defaults)."""
    found = []
    for variable, value in defaults.items():
        if variable not in text:
            continue
        for literal in _default_literals(value):
            pattern = re.compile(r"\b%s\s*\|\s*default\(\s*%s\s*[,)]" % (re.escape(variable), re.escape(literal)))
            for match in pattern.finditer(text):
                found.append(f"{name}:{text[: match.start()].count(chr(10)) + 1}: {match.group(0)}")
    return found


def test_no_fallback_restates_another_roles_default():
    defaults = all_defaults()
    offenders = []
    for name in _tracked_files():
        if not name.startswith(FALLBACK_SCOPE) or not name.endswith((".yml", ".yaml", ".j2")):
            continue
        if name.endswith(("/defaults/main.yml", "argument_specs.yml")):
            continue
        offenders += fallback_restatements(name, (REPO / name).read_text(errors="replace"), defaults)
    assert offenders == [], "a fallback restates the owner's default (read the variable; its role is loaded)"


@pytest.mark.parametrize(
    "code",
    [
        "port=sglang_service_port | default(30000),",
        "unit_name=sglang_service_unit_name | default('sglang'))",
        'tp: "{{ sglang_service_tp_size | default(1) | int }}"',
    ],
)
def test_the_fallback_check_finds_a_restated_default(code):
    defaults = all_defaults()
    assert fallback_restatements("roles/x/tasks/y.yml", code, defaults)
    assert not fallback_restatements("roles/x/tasks/y.yml", code.replace("default(", "default(omit) or ("), defaults)
