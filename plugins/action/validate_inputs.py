# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.validate_inputs``: strict variable checks on the controller, no host contact."""

from __future__ import annotations

import os
import re

import yaml
from ansible.errors import AnsibleError, AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils.validation import SpecError, check_all, unknown_variables


def _with_origin(message: str, task_vars: dict) -> str:
    """Name the variable a templated value came from, so the user sees which one to fix."""
    match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)", message)
    raw = task_vars.get(match.group(1)) if match else None
    if isinstance(raw, str) and "{{" in raw:
        return f"{message} (its value comes from {raw.strip()})"
    return message


ROLES = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "roles"))


def known_role_variables(roles_dir: str = ROLES) -> set:
    """Every variable a role documents (argument specs) or sets (set_fact, register) in its tasks."""
    known = set()
    for role in sorted(os.listdir(roles_dir)):
        spec_file = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if os.path.isfile(spec_file):
            with open(spec_file, encoding="utf-8") as handle:
                for entry in ((yaml.safe_load(handle) or {}).get("argument_specs") or {}).values():
                    known.update((entry or {}).get("options") or {})
        tasks_dir = os.path.join(roles_dir, role, "tasks")
        for name in sorted(os.listdir(tasks_dir)) if os.path.isdir(tasks_dir) else []:
            with open(os.path.join(tasks_dir, name), encoding="utf-8") as handle:
                known.update(_set_names(yaml.safe_load(handle)))
    return known


def _set_names(node) -> set:
    """Names a task list sets: set_fact keys and register targets, blocks included."""
    found = set()
    if isinstance(node, list):
        for item in node:
            found |= _set_names(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("ansible.builtin.set_fact", "set_fact") and isinstance(value, dict):
                found |= {k for k in value if k != "cacheable"}
            elif key == "register" and isinstance(value, str):
                found.add(value)
            elif key in ("block", "rescue", "always"):
                found |= _set_names(value)
    return found


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("rules", "specs", "entry_point", "unknown_prefixes"))

    def _role_specs(self, entry_point: str) -> tuple[str, dict]:
        role = getattr(self._task, "_role", None)
        role_path = getattr(role, "_role_path", None)
        if not role_path:
            raise AnsibleError("validate_inputs: outside a role, give the variables' specs with specs:")
        spec_file = os.path.join(role_path, "meta", "argument_specs.yml")
        with open(spec_file, encoding="utf-8") as handle:
            data = yaml.safe_load(handle) or {}
        try:
            options = data["argument_specs"][entry_point].get("options") or {}
        except KeyError as exc:
            raise AnsibleError(f"validate_inputs: {spec_file} has no entry point {entry_point!r}") from exc
        return role.get_name(), options

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        if args.get("unknown_prefixes"):
            return self._unknown(result, task_vars, list(args["unknown_prefixes"]), args.get("specs") or {})
        rules = args.get("rules") or {}
        if args.get("specs"):
            owner, specs = "play", args["specs"]
        else:
            owner, specs = self._role_specs(args.get("entry_point") or "main")
        values = {}
        errors = []
        deferred = []
        for name in specs:
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleUndefinedVariable:
                # A default computed from a fact of a later step (a release dir): checked when the role runs.
                deferred.append(name)
            except Exception as exc:  # any templating failure is this variable's error
                errors.append(f"{name}: cannot be templated: {str(exc).splitlines()[0]}")
        try:
            found = check_all(values, specs, rules)
        except SpecError as exc:
            raise AnsibleError(f"validate_inputs ({owner}): {exc}") from exc
        errors.extend(_with_origin(message, task_vars) for message in found)
        result.update(changed=False, checked=sorted(values), deferred=sorted(deferred), errors=errors)
        if errors:
            result["failed"] = True
            summary = f"{len(errors)} invalid input(s) for {owner}, nothing was done on any host: "
            result["msg"] = summary + " | ".join(errors)
        else:
            result["msg"] = f"{len(values)} variable(s) of {owner} are valid"
        return result

    def _unknown(self, result, task_vars, prefixes, specs):
        known = known_role_variables() | set(specs)
        names = [n for n in task_vars if n not in ("vars", "hostvars", "groups", "group_names")]
        errors = unknown_variables(names, known, prefixes)
        result.update(changed=False, errors=errors)
        if errors:
            result["failed"] = True
            result["msg"] = f"{len(errors)} unknown variable(s), nothing was done on any host: " + " | ".join(errors)
        else:
            result["msg"] = "every role-prefixed variable is one a role reads"
        return result
