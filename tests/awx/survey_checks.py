# Copyright: (c) 2026, specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks a survey question against what its answer reaches: a role variable, a playbook variable,
or an AWX-side variable that the template's extra_vars map onto a role variable.

Role variables are read from roles/*/meta/argument_specs.yml; playbook variables from the playbook
the template runs (the play keyword the variable feeds, or the play's own default). Every value the
survey can send (the default, each choice) is checked with Ansible's own argument spec validator,
and the survey type must hand the variable the type its spec names: Ansible's validator would turn
"1,2" into a list, but the role would then receive the string.
"""

from __future__ import annotations

import pathlib
import re

import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

REPO = pathlib.Path(__file__).resolve().parents[2]

# The argument spec types a survey answer of each type arrives as (AWX sends JSON values).
SURVEY_TO_SPEC_TYPES = {
    "text": {"str", "path", "raw"},
    "textarea": {"str", "raw"},
    "password": {"str", "raw"},
    "integer": {"int", "float", "raw"},
    "float": {"float", "raw"},
    "multiplechoice": {"str", "raw"},
    "multiselect": {"list"},
}
# Play keywords a variable may feed, with what Ansible accepts for them.
KEYWORD_SPECS = {
    "serial": {"type": "int", "min": 1},
    "max_fail_percentage": {"type": "int", "min": 0, "max": 100},
}
BOOL_STRINGS = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def project_rule(
    variable: str, spec: dict, playbook: pathlib.Path, repo: pathlib.Path = REPO
) -> tuple[dict, dict] | None:
    """(spec, rule) the project's own validation applies to a variable, or None when it applies none.

    A role variable: its argument spec and its role's rule (validation_rules.ROLE_RULES). A playbook
    variable: the spec and rule of the playbook's entry in validation_rules.PLAYS.
    """
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import validation_rules  # noqa: PLC0415

    if spec.get("_role"):
        return spec, validation_rules.ROLE_RULES.get(spec["_role"], {}).get(variable) or {}
    books = {playbook.resolve(), *((playbook.parent / p).resolve() for p in _imports(playbook))}
    for play in validation_rules.PLAYS.values():
        if (repo / play["playbook"]).resolve() in books and variable in play["variables"]:
            return play["variables"][variable]
    return None


def _imports(playbook: pathlib.Path) -> list[str]:
    plays = yaml.safe_load(playbook.read_text(encoding="utf-8")) or []
    keys = ("ansible.builtin.import_playbook", "import_playbook")
    return [play[key] for play in plays for key in keys if key in play]


def project_check_errors(variable: str, spec: dict, values: list, playbook: pathlib.Path, repo: pathlib.Path = REPO):
    """Each value through the project's strict validation (module_utils/_plan/validation.py), as the play would."""
    found = project_rule(variable, spec, playbook, repo)
    if found is None:
        return []
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import validation  # noqa: PLC0415

    pspec, rule = found
    clean = {k: v for k, v in pspec.items() if k in ("type", "elements", "choices", "required")}
    return [e for v in values for e in validation.check(variable, v, clean, rule)]


def role_specs(repo: pathlib.Path = REPO) -> dict[str, dict]:
    """Every role variable with its argument spec (first entry point that declares it)."""
    found: dict[str, dict] = {}
    for path in sorted(repo.glob("roles/*/meta/argument_specs.yml")):
        for entry in yaml.safe_load(path.read_text(encoding="utf-8"))["argument_specs"].values():
            for name, spec in (entry.get("options") or {}).items():
                found.setdefault(name, dict(spec, _role=path.parts[-3]))
    return found


def _plays(playbook: pathlib.Path) -> list[dict]:
    plays = []
    for play in yaml.safe_load(playbook.read_text(encoding="utf-8")) or []:
        if "ansible.builtin.import_playbook" in play or "import_playbook" in play:
            target = play.get("ansible.builtin.import_playbook") or play["import_playbook"]
            plays.extend(_plays(playbook.parent / target))
        else:
            plays.append(play)
    return plays


def playbook_spec(playbook: pathlib.Path, variable: str) -> dict | None:
    """The spec of a playbook-level variable: from the keyword it feeds, else from the play's default."""
    pattern = re.compile(r"\b%s\b" % re.escape(variable))
    for play in _plays(playbook):
        for keyword, spec in KEYWORD_SPECS.items():
            if pattern.search(str(play.get(keyword, ""))):
                return dict(spec, _source=f"play keyword {keyword}")
    for play in _plays(playbook):
        play_vars = play.get("vars") or {}
        if variable in play_vars:
            default = play_vars[variable]
            kind = {bool: "bool", int: "int", float: "float", str: "str", list: "list", dict: "dict"}[type(default)]
            return {"type": kind, "default": default, "_source": "play vars"}
    return None


def mapped_targets(template: dict, variable: str) -> dict[str, str]:
    """Template extra_vars whose value is an expression of this survey variable: {role variable: expression}."""
    pattern = re.compile(r"\{\{[^}]*\b%s\b" % re.escape(variable))
    return {k: v for k, v in (template.get("extra_vars") or {}).items() if isinstance(v, str) and pattern.search(v)}


def render(expression: str, variables: dict):
    """Render a template extra_var the way the job will (Ansible's templar, the expression trusted)."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.template import Templar, trust_as_template  # noqa: PLC0415

    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def sendable_values(question: dict) -> list:
    """Every value the survey can send for a question: its default and each choice (AWX's shapes)."""
    values = []
    if question.get("default") not in (None,) and "default" in question:
        default = question["default"]
        if question["type"] == "multiselect":
            default = [d for d in default.splitlines() if d] if isinstance(default, str) else list(default)
            if default:
                values.append(default)
        elif not (default == "" and question["type"] not in ("text", "textarea", "password")):
            values.append(default)
    choices = question.get("choices") or []
    if question["type"] == "multiplechoice":
        values.extend(choices)
    elif question["type"] == "multiselect":
        values.extend([c] for c in choices)
        if choices:
            values.append(list(choices))
    for bound in ("min", "max"):
        if question["type"] == "integer" and question.get(bound) is not None:
            values.append(question[bound])
    return values


def _validate(name: str, spec: dict, value) -> list[str]:
    clean = {k: v for k, v in spec.items() if not k.startswith("_") and k not in ("description", "min", "max")}
    if isinstance(clean.get("default"), str) and "{{" in clean["default"]:
        clean.pop("default")  # a template default (resolved at run time) is no value to check against
    result = ArgumentSpecValidator({name: clean}).validate({name: value})
    errors = [f"{name}={value!r}: {m}" for m in result.error_messages]
    number = result.validated_parameters.get(name) if not errors else None
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        if spec.get("min") is not None and number < spec["min"]:
            errors.append(f"{name}={value!r}: below {spec['min']} ({spec.get('_source', 'spec')})")
        if spec.get("max") is not None and number > spec["max"]:
            errors.append(f"{name}={value!r}: above {spec['max']} ({spec.get('_source', 'spec')})")
    return errors


def _type_errors(question: dict, name: str, spec: dict) -> list[str]:
    kind = spec.get("type", "str")
    description = " ".join(spec.get("description") or []) if isinstance(spec.get("description"), list) else ""
    description = description or str(spec.get("description") or "")
    if question["type"] == "multiselect" and "in order" in description:
        return [f"{name}: a multiselect keeps no order, and this list is tried in order"]
    if kind in SURVEY_TO_SPEC_TYPES[question["type"]]:
        return []
    if kind == "bool" and question["type"] == "multiplechoice":
        bad = [c for c in question.get("choices") or [] if str(c).lower() not in BOOL_STRINGS]
        return [f"{name}: choices {bad} are not booleans"] if bad else []
    return [f"{name}: a {question['type']} answer cannot be a {kind} (spec {spec.get('_source', spec.get('_role'))})"]


def runtime_serves_errors(algorithms: list, repo: pathlib.Path = REPO, sglang_version: str | None = None) -> list[str]:
    """Each algorithm the survey offers must be served by the default runtime: sglang itself or a patch set.

    The same data the deploy plan reads (module_utils/_plan/deploy_plan.py): the sglang version's owner
    (roles/sglang_runtime/defaults/main.yml) and each patchsets/*/patchset.yml's sglang_version and serves.
    """
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: PLC0415

    where = "the default runtime" if sglang_version is None else "a runtime the survey offers"
    if sglang_version is None:
        defaults = yaml.safe_load((repo / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())
        sglang_version = defaults["sglang_runtime_sglang_version"]
    sets = [
        deploy_plan.patch_set_record(str(d), yaml.safe_load((d / "patchset.yml").read_text()))
        for d in sorted((repo / "patchsets").iterdir())
        if (d / "patchset.yml").is_file()
    ]
    errors = []
    for algorithm in [a for a in algorithms if a]:
        if algorithm in deploy_plan.BUILTIN_ALGORITHMS:
            continue
        serving = [
            r["name"]
            for r in sets
            if r["sglang_version"] == sglang_version
            and not deploy_plan.unserved(r["serves"], {"algorithms": algorithm})
        ]
        if not serving:
            listing = "; ".join(deploy_plan.describe_set(r) for r in sets)
            errors.append(
                f"sglang_service_speculative_algorithm={algorithm}: no patch set serves it on {where}"
                f" (sglang {sglang_version}); patch sets: {listing}"
            )
    return errors


def known_runtime_errors(versions: list, repo: pathlib.Path = REPO) -> list[str]:
    """Each sglang version a survey offers must be one the deploy plan derives a manifest for.

    The same data and code the plan uses: roles/sglang_runtime/files/known_runtimes.yml and
    deploy_plan.derive_manifest (a version with no known runtime and no pins is refused there).
    """
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: PLC0415

    known = yaml.safe_load((repo / deploy_plan.KNOWN_RUNTIMES_FILE).read_text())
    return [e for v in versions if v for e in deploy_plan.derive_manifest(str(v), [], known)["errors"]]


def known_runtime_versions(repo: pathlib.Path = REPO) -> list[str]:
    from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: PLC0415

    return sorted((yaml.safe_load((repo / deploy_plan.KNOWN_RUNTIMES_FILE).read_text()) or {}).get("runtimes") or {})


def offered_sglang_versions(template: dict) -> list | None:
    """The sglang versions a template's survey lets the operator choose (None: the role default applies)."""
    for question in template.get("survey") or []:
        if question["variable"] == "sglang_runtime_sglang_version":
            return [str(v) for v in sendable_values(question) if v]
    return None


def question_errors(
    question: dict, template: dict, specs: dict[str, dict] | None = None, repo: pathlib.Path = REPO
) -> list[str]:
    """Everything wrong with one survey question with respect to the variable its answer reaches."""
    specs = role_specs(repo) if specs is None else specs
    var = question["variable"]
    values = sendable_values(question)
    playbook = repo / template["playbook"]
    if var in specs:
        spec = specs[var]
        errors = _type_errors(question, var, spec)
        errors = errors or [e for v in values for e in _validate(var, spec, v)]
        errors = errors or project_check_errors(var, spec, values, playbook, repo)
        if var == "sglang_service_speculative_algorithm":
            versions = offered_sglang_versions(template) or [None]  # None: the default runtime
            errors = errors or [e for v in versions for e in runtime_serves_errors(values, repo, v)]
        if var == "sglang_runtime_sglang_version":
            errors = errors or known_runtime_errors(values, repo)
        return errors
    pspec = playbook_spec(playbook, var)
    if pspec is not None:
        return _playbook_variable_errors(question, pspec, values, playbook, repo)
    return _mapped_variable_errors(question, template, specs, values, repo)


def _playbook_variable_errors(
    question: dict, pspec: dict, values: list, playbook: pathlib.Path, repo: pathlib.Path
) -> list[str]:
    """A question for a variable the playbook itself validates (its validate_inputs task)."""
    var = question["variable"]
    errors = _type_errors(question, var, pspec)
    if errors:
        return errors
    errors = [e for v in values for e in _validate(var, pspec, v)]
    errors += project_check_errors(var, pspec, values, playbook, repo)
    if question["type"] == "integer":
        for bound, inside in (("min", lambda q, s: q >= s), ("max", lambda q, s: q <= s)):
            if pspec.get(bound) is not None and (
                question.get(bound) is None or not inside(question[bound], pspec[bound])
            ):
                errors.append(f"{var}: survey {bound} {question.get(bound)} outside the {pspec['_source']} range")
    return errors


def _mapped_variable_errors(
    question: dict, template: dict, specs: dict[str, dict], values: list, repo: pathlib.Path
) -> list[str]:
    """A question whose answer reaches role variables only through the template's extra_vars."""
    var = question["variable"]
    playbook = repo / template["playbook"]
    targets = mapped_targets(template, var)
    if not targets:
        return [
            f"{var}: not a role variable (roles/*/meta/argument_specs.yml), not a variable of "
            f"{template['playbook']}, and no extra_var of the template maps it onto one"
        ]
    errors = []
    for target, expression in targets.items():
        if target not in specs:
            errors.append(f"{var}: the template maps it onto {target}, which no role declares")
            continue
        for value in values:
            rendered = render(expression, {var: value})
            errors.extend(f"{var}={value!r} -> {e}" for e in _validate(target, specs[target], rendered))
            errors.extend(
                f"{var}={value!r} -> {e}"
                for e in project_check_errors(target, specs[target], [rendered], playbook, repo)
            )
            if not isinstance(rendered, list) and specs[target].get("type") == "list":
                errors.append(f"{var}={value!r} -> {target} is {rendered!r}, not a list")
    return errors
