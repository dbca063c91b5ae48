# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Strict, typed checks of play and role variables, before any host is contacted.

Pure functions, stdlib only. The action ``specdec.sglang.validate_inputs`` hands each variable's
value, its argument spec (``meta/argument_specs.yml``: ``type``, ``elements``, ``choices``,
``required``) and the role's extra rule (``min``, ``max``, ``pattern``, ...) to ``check``.

Unlike Ansible's argument spec validation, which splits a string on commas into a list, a
string is never read as a list or a dict: ``-e sglang_preflight_gpus=12`` is refused with the
command line that passes a list. Scalars from ``-e name=value`` arrive as strings, so an int,
float or bool written as a string is accepted and read the one documented way.

Every message names the variable, the value found and the values allowed.
"""

from __future__ import annotations

import difflib
import json
import re

BOOL_TRUE = ("true", "yes", "on", "1", "y", "t")
BOOL_FALSE = ("false", "no", "off", "0", "n", "f")
_INT = re.compile(r"^[+-]?[0-9]+$")
_FLOAT = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$")
# Absolute path that a unit file, an env file and a shell can carry without quoting.
ABS_PATH = re.compile(r"^/[^\s\"'\\$%`]*$")
ABS_PATH_MEANS = "an absolute path without whitespace, quotes, '$', '%' or '`'"
# serial: a host count, a percentage of the hosts, or a list of those (batch sizes in order).
_PERCENT = re.compile(r"^([0-9]+(\.[0-9]+)?)%$")

RULE_KEYS = frozenset(
    (
        "min",
        "max",
        "pattern",
        "means",
        "abs_path",
        "allow_empty",
        "non_empty",
        "unique",
        "keys",
        "required_keys",
        "key_pattern",
        "keys_not_in",
        "value_pattern",
        "batch_size",
        "envelopes",
    )
)
TYPES = ("str", "path", "int", "float", "bool", "list", "dict", "raw")


class SpecError(ValueError):
    """A spec or rule that cannot be applied (a bug in the role, not in the user's input)."""


def show(value) -> str:
    """The value as the user would write it in JSON (strings quoted, so '12' and 12 differ)."""
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# The name of each JSON kind, for messages; bool comes before number because a bool is an int.
_KINDS = (
    (bool, "a bool"),
    ((int, float), "a number"),
    (str, "a string"),
    (dict, "a dict"),
    ((list, tuple), "a list"),
)


def _kind(value) -> str:
    if value is None:
        return "null"
    for types, kind in _KINDS:
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _example_list(value, elements: str | None) -> list:
    """What the user most likely meant by a string given for a list: its comma-separated items."""
    items = [part.strip() for part in str(value).split(",") if part.strip()]
    if elements in ("int", "float"):
        return [int(i) if _INT.match(i) else i for i in items]
    return items


def _pass_hint(name: str, example) -> str:
    return f"pass it as JSON: -e '{json.dumps({name: example})}'"


def convert(name: str, value, type_: str, elements: str | None = None) -> tuple[object, list[str]]:
    """``value`` read as ``type_``: ``(converted, [])`` or ``(None, [error])``."""
    if type_ not in TYPES:
        raise SpecError(f"{name}: unknown type {type_!r}")
    found = f"{name}={show(value)}"
    if type_ == "raw":
        return value, []
    if type_ == "list":
        return _to_list(name, found, value, elements)
    if type_ == "dict":
        return _to_dict(name, found, value)
    return _SCALARS[type_](found, value)


def _to_str(found: str, value) -> tuple[object, list[str]]:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None, [f"{found}: must be a string, not {_kind(value)}"]
    return (value if isinstance(value, str) else str(value)), []


def _to_int(found: str, value) -> tuple[object, list[str]]:
    if isinstance(value, int) and not isinstance(value, bool):
        return value, []
    if isinstance(value, float) and value.is_integer():
        return int(value), []
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value.strip()), []
    return None, [f"{found}: must be an integer (a whole number such as 8), not {_kind(value)}"]


def _to_float(found: str, value) -> tuple[object, list[str]]:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), []
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value.strip()), []
    return None, [f"{found}: must be a number (such as 0.88), not {_kind(value)}"]


def _to_bool(found: str, value) -> tuple[object, list[str]]:
    if isinstance(value, bool):
        return value, []
    if isinstance(value, int) and value in (0, 1):
        return bool(value), []
    if isinstance(value, str) and value.strip().lower() in BOOL_TRUE + BOOL_FALSE:
        return value.strip().lower() in BOOL_TRUE, []
    return None, [f"{found}: must be a boolean, one of true, false (also yes/no, on/off, 1/0)"]


_SCALARS = {"str": _to_str, "path": _to_str, "int": _to_int, "float": _to_float, "bool": _to_bool}


def _to_list(name: str, found: str, value, elements: str | None) -> tuple[object, list[str]]:
    if isinstance(value, (list, tuple)):
        return list(value), []
    of = f" of {elements}" if elements else ""
    if isinstance(value, str):
        return None, [
            f"{found}: must be a list{of}, not a string (a string is never read as a list, neither character"
            f" by character nor split on commas); {_pass_hint(name, _example_list(value, elements))}"
        ]
    return None, [f"{found}: must be a list{of}, not {_kind(value)}; {_pass_hint(name, [])}"]


def _to_dict(name: str, found: str, value) -> tuple[object, list[str]]:
    if isinstance(value, dict):
        return value, []
    return None, [
        f"{found}: must be a dict (a mapping of names to values), not {_kind(value)}; "
        f"{_pass_hint(name, {'name': 'value'})}"
    ]


def _range_text(rule: dict) -> str:
    low, high = rule.get("min"), rule.get("max")
    if low is not None and high is not None:
        return f"in {low}-{high}"
    if low is not None:
        return f">= {low}"
    return f"<= {high}"


def _check_scalar(label: str, value, rule: dict) -> list[str]:
    """Range, pattern and path rules on one converted scalar."""
    found = f"{label}={show(value)}"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = rule.get("min"), rule.get("max")
        if (low is not None and value < low) or (high is not None and value > high):
            return [f"{found}: must be {_range_text(rule)}"]
    if isinstance(value, str):
        if value == "":
            if rule.get("non_empty"):
                return [f"{found}: must not be empty{'; ' + rule['means'] if rule.get('means') else ''}"]
            if rule.get("allow_empty") or not (rule.get("abs_path") or rule.get("pattern")):
                return []
        if rule.get("abs_path") and not ABS_PATH.match(value):
            empty = ' or "" (unset)' if rule.get("allow_empty") else ""
            return [f"{found}: must be {ABS_PATH_MEANS}{empty}"]
        if rule.get("pattern") and not re.search(rule["pattern"], value):
            means = rule.get("means") or f"a value matching {rule['pattern']}"
            return [f"{found}: must be {means}"]
    return []


def _check_batch_size(name: str, value) -> list[str]:
    """Ansible's ``serial``: a host count >= 1, a percentage in (0, 100], or a non-empty list of those."""
    allowed = 'a host count >= 1 (such as 1), a percentage of the hosts (such as "25%"), or a list of those'
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not value:
        return [f"{name}=[]: must be {allowed}"]
    for position, item in enumerate(items):
        label = f"{name}[{position}]" if isinstance(value, list) else name
        if isinstance(item, bool):
            return [f"{label}={show(item)}: must be {allowed}"]
        if isinstance(item, int) or (isinstance(item, str) and _INT.match(item.strip())):
            if int(item) >= 1:
                continue
        elif isinstance(item, str) and _PERCENT.match(item.strip()):
            if 0 < float(_PERCENT.match(item.strip()).group(1)) <= 100:
                continue
        return [f"{label}={show(item)}: must be {allowed}"]
    return []


def _check_dict(name: str, value: dict, rule: dict) -> list[str]:
    errors = []
    allowed = rule.get("keys")
    if allowed is not None:
        unknown = sorted(str(k) for k in value if k not in allowed)
        if unknown:
            errors.append(f"{name}: unknown key(s) {', '.join(unknown)}; allowed keys: {', '.join(allowed)}")
    missing = [k for k in rule.get("required_keys") or [] if k not in value]
    if missing:
        errors.append(f"{name}: missing key(s) {', '.join(missing)}")
    if rule.get("key_pattern"):
        bad = sorted(str(k) for k in value if not re.search(rule["key_pattern"], str(k)))
        if bad:
            means = rule.get("means") or f"names matching {rule['key_pattern']}"
            errors.append(f"{name}: key(s) {', '.join(bad)} must be {means}")
    reserved = sorted(str(k) for k in value if k in (rule.get("keys_not_in") or []))
    if reserved:
        errors.append(
            f"{name}: key(s) {', '.join(reserved)} are set by the role, not here"
            f" (reserved: {', '.join(rule['keys_not_in'])})"
        )
    if rule.get("value_pattern"):
        for key, item in value.items():
            if isinstance(item, (dict, list)) or item is None or not re.search(rule["value_pattern"], str(item)):
                means = rule.get("value_means") or f"a value matching {rule['value_pattern']}"
                errors.append(f"{name}[{show(key)}]={show(item)}: must be {means}")
    return errors


def check(name: str, value, spec: dict, rule: dict | None = None) -> list[str]:
    """Errors of one variable: its type (and element type), choices, then the role's rule."""
    rule = dict(rule or {})
    unknown_rule = set(rule) - RULE_KEYS - {"value_means"}
    if unknown_rule:
        raise SpecError(f"{name}: unknown rule key(s) {', '.join(sorted(unknown_rule))}")
    if rule.get("batch_size"):
        return _check_batch_size(name, value)
    if value is None:
        return [f"{name}: must be set (found null); see docs/variables.md for its allowed values"]
    type_ = spec.get("type", "str")
    converted, errors = convert(name, value, type_, spec.get("elements"))
    if errors:
        return errors
    if type_ == "list":
        return _check_list(name, converted, spec, rule)
    if type_ == "dict":
        return _check_dict(name, converted, rule) + (check_envelopes(name, converted) if rule.get("envelopes") else [])
    return _check_choices(name, converted, spec.get("choices")) or _check_scalar(name, converted, rule)


def _check_list(name: str, items: list, spec: dict, rule: dict) -> list[str]:
    """Errors of a list: emptiness and repeats, then each item's element type, choices and rule."""
    if rule.get("non_empty") and not items:
        return [f"{name}=[]: must list at least one item{'; ' + rule['means'] if rule.get('means') else ''}"]
    errors = []
    if rule.get("unique"):
        seen = [show(i) for i in items]
        twice = sorted({s for s in seen if seen.count(s) > 1})
        if twice:
            errors.append(f"{name}: {', '.join(twice)} listed more than once; allowed: each item once")
    elements = spec.get("elements")
    for position, item in enumerate(items):
        label = f"{name}[{position}]"
        element = item
        if elements:
            element, item_errors = convert(label, item, elements)
            if item_errors:
                errors.extend(item_errors)
                continue
        errors.extend(_check_choices(label, element, spec.get("choices")))
        errors.extend(_check_scalar(label, element, rule))
    return errors


def _check_choices(label: str, value, choices) -> list[str]:
    if not choices:
        return []
    if value in choices or str(value) in [str(c) for c in choices]:
        return []
    named = ", ".join('""' if c == "" else str(c) for c in choices)  # an empty choice stays visible
    return [f"{label}={show(value)}: must be one of {named}"]


def check_all(values: dict, specs: dict, rules: dict | None = None) -> list[str]:
    """Errors of every variable in ``specs``; ``values`` maps the names that are set to their values.

    A rule for a variable that has no spec is a bug in the role and raises ``SpecError``.
    """
    rules = rules or {}
    stray = sorted(set(rules) - set(specs))
    if stray:
        raise SpecError(f"rules for variables without an argument spec: {', '.join(stray)}")
    errors: list[str] = []
    for name in sorted(specs):
        spec = specs[name] or {}
        if name not in values:
            if spec.get("required"):
                errors.append(f"{name}: is required and not set; see docs/variables.md")
            continue
        found = check(name, values[name], spec, rules.get(name))
        if spec.get("no_log"):
            found = [hide_secret(message, values[name]) for message in found]
        errors.extend(found)
    return errors


def hide_secret(message: str, value) -> str:
    """A message about a secret, without the secret (nor any part of a list or dict holding it)."""
    parts = [value] + (list(value) if isinstance(value, (list, tuple)) else [])
    parts += list(value.values()) if isinstance(value, dict) else []
    for part in sorted((show(p) for p in parts), key=len, reverse=True):
        message = message.replace(part, '"<hidden>"')
    for part in (p for p in parts if isinstance(p, str) and p):
        message = message.replace(part, "<hidden>")
    return message


# --- memory envelopes (sglang_service_envelopes) ---------------------------------------------------------
# Each field, the rule it must meet, and the advice an error gives. One rule per field, checked in this order;
# an error names the envelope, the field, the value found and the rule it broke.
ENVELOPE_FIELDS = ("context_length", "mem_fraction_static", "max_running_requests", "cuda_graph", "environment")
ENVELOPE_REQUIRED = ("mem_fraction_static",)
# Set by the sglang_service role from its own variables (the GPU pinning, the key, the DDTree knobs): never in
# sglang_service_environment or an envelope's environment.
ENVELOPE_RESERVED_ENVIRONMENT = (
    "CUDA_VISIBLE_DEVICES",
    "SGLANG_API_KEY",
    "SGLANG_DDTREE_BUDGET",
    "SGLANG_DDTREE_TREE_BUILDER",
    "SGLANG_DDTREE_STEP_GRAPH",
)
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_ONE_LINE = re.compile(r"[^\n\r]*")  # fullmatch: "$" would accept a trailing newline
_ENVELOPE_USE = {
    "context_length": "use a whole number >= 0 (0 = the model's own context length), such as 32768",
    "mem_fraction_static": "use a number strictly between 0 and 1, such as 0.88",
    "max_running_requests": "use a whole number >= 1, such as 4",
    "cuda_graph": "use true or false (a YAML or JSON boolean; false renders --disable-cuda-graph)",
    "environment": "use a dict of environment variable names ([A-Z0-9_]) to one-line values",
}


def _whole_number(value):
    """``value`` as an int when it is one (an int, or a string of digits), else None; a bool is not a number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value.strip())
    return None


def _whole_number_error(low: int):
    def rule(value) -> str | None:
        number = _whole_number(value)
        if number is None:
            return f"is {_kind(value)}, not a whole number"
        return f"is below {low}" if number < low else None

    return rule


def _fraction_error(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return f"is {_kind(value)}, not a number"
    if isinstance(value, str) and not _FLOAT.match(value.strip()):
        return "is a string, not a number"
    return None if 0 < float(value) < 1 else "is outside (0, 1)"


def _boolean_error(value) -> str | None:
    # Strict: the role renders it with `| bool` but the envelope planner reads it with Python's bool(),
    # where the string "false" is true.
    return None if isinstance(value, bool) else f"is {_kind(value)}, not a boolean"


# The rule of each scalar field: the rule ``value`` breaks ("is outside (0, 1)"), or None when it is valid.
_ENVELOPE_RULES = {
    "context_length": _whole_number_error(0),
    "mem_fraction_static": _fraction_error,
    "max_running_requests": _whole_number_error(1),
    "cuda_graph": _boolean_error,
}


def _envelope_environment_errors(label: str, environment) -> list[str]:
    use = _ENVELOPE_USE["environment"]
    if not isinstance(environment, dict):
        return [f"{label}={show(environment)} is {_kind(environment)}, not a dict; {use}"]
    errors = []
    for key, item in environment.items():
        where = f"{label}.{key}"
        if not _ENV_NAME.match(str(key)):
            errors.append(f"{where}: the name is not [A-Z_][A-Z0-9_]*; {use}")
        elif key in ENVELOPE_RESERVED_ENVIRONMENT:
            errors.append(
                f"{where}: the name is set by the role, not here (reserved: {', '.join(ENVELOPE_RESERVED_ENVIRONMENT)})"
            )
        elif isinstance(item, (dict, list)) or item is None or not _ONE_LINE.fullmatch(str(item)):
            errors.append(f"{where}={show(item)} is not a one-line string, number or boolean; {use}")
    return errors


def check_envelope(label: str, envelope) -> list[str]:
    """Errors of one envelope, ``label`` being ``sglang_service_envelopes.<name>``: one per field that breaks its rule.

    Each message names the envelope and the field, the value found, the rule broken and what to use:
    ``sglang_service_envelopes.full.mem_fraction_static=1.2 is outside (0, 1); use a number strictly between 0
    and 1, such as 0.88``.
    """
    if not isinstance(envelope, dict):
        return [
            f"{label}={show(envelope)} is {_kind(envelope)}, not a dict; an envelope is a dict of "
            f"{', '.join(ENVELOPE_FIELDS)} (mem_fraction_static required)"
        ]
    errors = []
    for key in envelope:
        if key not in ENVELOPE_FIELDS:
            close = difflib.get_close_matches(str(key), ENVELOPE_FIELDS, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]}? " if close else ""
            errors.append(f"{label}.{key} is not an envelope field ({hint}allowed: {', '.join(ENVELOPE_FIELDS)})")
    for field in ENVELOPE_REQUIRED:
        if field not in envelope:
            errors.append(f"{label}.{field} is missing (required); {_ENVELOPE_USE[field]}")
    for field in ENVELOPE_FIELDS:
        if field not in envelope:
            continue
        if field == "environment":
            errors.extend(_envelope_environment_errors(f"{label}.environment", envelope[field]))
            continue
        broken = _ENVELOPE_RULES[field](envelope[field])
        if broken:
            errors.append(f"{label}.{field}={show(envelope[field])} {broken}; {_ENVELOPE_USE[field]}")
    return errors


def check_envelopes(name: str, envelopes: dict) -> list[str]:
    """Errors of every envelope of ``name`` (``sglang_service_envelopes``), in the order they are defined."""
    errors = []
    for envelope_name, envelope in envelopes.items():
        errors.extend(check_envelope(f"{name}.{envelope_name}", envelope))
    return errors


def unknown_variables(names, known, prefixes) -> list[str]:
    """A message for each of ``names`` with one of ``prefixes`` that no argument spec (``known``) has.

    A role-prefixed variable nobody reads is a typo until shown otherwise (``sglang_service_speculative_algo``
    deploys the default algorithm without a word): the message names the closest known variable.
    Names starting with ``_`` are internal facts and are not checked.
    """
    known = set(known)
    messages = []
    for name in sorted(set(names)):
        if name in known or name.startswith("_") or not name.startswith(tuple(prefixes)):
            continue
        prefix = next(p for p in prefixes if name.startswith(p))
        same_role = sorted(k for k in known if k.startswith(prefix))
        # Compared without the shared prefix, which would make every name of the role look close.
        close = difflib.get_close_matches(name[len(prefix) :], [k[len(prefix) :] for k in same_role], n=1, cutoff=0.6)
        hint = f"did you mean {prefix}{close[0]}?" if close else f"known {prefix}* variables: {', '.join(same_role)}"
        messages.append(f"{name}: no role reads this variable ({hint}); remove it or fix its name")
    return messages
