# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.validate_inputs``: every input check on the controller, no host contact.

Thin: it templates the play's variables, reads the roles' argument specs and the data files, and hands
them to ``validation_rules.check_inputs`` (the rules and their tests live there); it fails with every
error at once.
"""

from __future__ import annotations

import os
import re

import yaml
from ansible.errors import AnsibleError, AnsibleUndefinedVariable
from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation import SpecError
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation_rules import (
    ALL_ROLES,
    PLAYS,
    check_inputs,
)

COLLECTION = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
ROLES_DIR = os.path.join(COLLECTION, "roles")
KNOWN_RUNTIMES = os.path.join(ROLES_DIR, "sglang_runtime", "files", "known_runtimes.yml")
SERVICE_VARS = os.path.join(ROLES_DIR, "sglang_service", "vars", "main.yml")


def _load(path: str):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def role_specs(roles_dir: str = ROLES_DIR) -> dict:
    """role -> variable -> argument spec of its ``main`` entry point."""
    specs = {}
    for role in ALL_ROLES:
        data = _load(os.path.join(roles_dir, role, "meta", "argument_specs.yml"))
        specs[role] = dict((data.get("argument_specs") or {}).get("main", {}).get("options") or {})
    return specs


def known_role_variables(roles_dir: str = ROLES_DIR) -> set:
    """Every variable a role documents (argument specs) or sets (set_fact, register) in its tasks."""
    known = set()
    for role in sorted(os.listdir(roles_dir)):
        spec_file = os.path.join(roles_dir, role, "meta", "argument_specs.yml")
        if os.path.isfile(spec_file):
            for entry in (_load(spec_file).get("argument_specs") or {}).values():
                known.update((entry or {}).get("options") or {})
        tasks_dir = os.path.join(roles_dir, role, "tasks")
        for name in sorted(os.listdir(tasks_dir)) if os.path.isdir(tasks_dir) else []:
            with open(os.path.join(tasks_dir, name), encoding="utf-8") as handle:
                try:
                    known.update(_set_names(yaml.safe_load(handle)))
                except yaml.YAMLError:
                    continue  # a task file Ansible cannot read fails where it runs, not in every validation
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


def managed_flags(path: str = SERVICE_VARS) -> tuple:
    """The flags the service role renders itself (its vars/main.yml, one owner)."""
    return tuple(_load(path).get("_sglang_service_managed_flags") or ())


class PatchSetReader:
    """``read(dir) -> (name, error)`` over the controller's patch set directories; keeps each parsed set."""

    def __init__(self, source_tree: str = ""):
        self.source_tree = source_tree or None
        self.results = []

    def read(self, directory: str):
        try:
            manifest = patchset.load_manifest(directory)
            patchset.check_manifest(manifest)
            report = patchset.validate(directory, manifest, source_tree=self.source_tree)
        except patchset.PatchsetError as exc:
            return "", str(exc)
        self.results.append(
            {
                "item": directory,
                "name": manifest["name"],
                "sglang_version": manifest["sglang_version"],
                "manifest": manifest,
                "files": report["files"],
                "changed": False,
            }
        )
        return manifest["name"], ""


def _with_origin(message: str, task_vars: dict) -> str:
    """Name the variable a templated value came from, so the user sees which one to fix."""
    match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)", message)
    raw = task_vars.get(match.group(1)) if match else None
    if isinstance(raw, str) and "{{" in raw:
        return f"{message} (its value comes from {raw.strip()})"
    return message


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset(("play", "roles"))

    def _scope(self):
        args = self._task.args
        play = args.get("play")
        if play is not None and play not in PLAYS:
            raise AnsibleError(f"validate_inputs: play={play!r}; allowed: {', '.join(PLAYS)}")
        roles = args.get("roles")
        if roles is None and play is None:
            role = getattr(self._task, "_role", None)
            if role is None:
                raise AnsibleError("validate_inputs: outside a role, name the play (play:) or the roles (roles:)")
            roles = [role.get_name().split(".")[-1]]
        roles = tuple(roles) if roles is not None else tuple(PLAYS[play]["roles"])
        unknown = sorted(set(roles) - set(ALL_ROLES))
        if unknown:
            raise AnsibleError(f"validate_inputs: roles {', '.join(unknown)}; allowed: {', '.join(ALL_ROLES)}")
        return play, roles

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        play, roles = self._scope()
        specs = role_specs()
        in_scope = {n for role in roles for n in specs[role]} | set(PLAYS[play]["variables"] if play else ())
        names = in_scope | {n for role in specs.values() for n in role}
        values, errors, deferred = {}, [], []
        for name in sorted(names):
            if name not in task_vars:
                continue
            try:
                values[name] = self._templar.template(task_vars[name])
            except AnsibleUndefinedVariable:
                # A default computed from a fact of a later step (a release dir): checked when the role runs.
                if name in in_scope:
                    deferred.append(name)
            except Exception as exc:  # any templating failure is this variable's error
                if name in in_scope:
                    errors.append(f"{name}: cannot be templated: {str(exc).splitlines()[0]}")
        reader = PatchSetReader(str(values.get("sglang_patches_source_tree") or ""))
        try:
            found = check_inputs(
                values,
                specs,
                roles=roles,
                play=play,
                names=[n for n in task_vars if n not in ("vars", "hostvars", "groups", "group_names")],
                known_names=known_role_variables() if play else (),
                known_runtimes=_load(KNOWN_RUNTIMES),
                managed_flags=managed_flags(),
                read_patch_set=reader.read,
                file_exists=os.path.isfile,
            )
        except SpecError as exc:
            raise AnsibleError(f"validate_inputs: {exc}") from exc
        errors.extend(_with_origin(message, task_vars) for message in found)
        owner = f"playbooks/{play}.yml" if play else ", ".join(roles)
        result.update(
            changed=False,
            checked=sorted(n for n in values if n in in_scope),
            deferred=sorted(deferred),
            errors=errors,
            results=reader.results,
        )
        if errors:
            result["failed"] = True
            result["msg"] = f"{len(errors)} invalid input(s) for {owner}, nothing was done on any host: " + " | ".join(
                errors
            )
        else:
            result["msg"] = f"the inputs of {owner} are valid"
        return result
