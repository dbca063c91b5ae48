# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.deploy_plan``: the deploy plan, on the controller, no host contact.

The logic is ``module_utils/_plan/deploy_plan.py``; this file reads the data it needs (the known
runtimes, the patch set manifests, wheel METADATA, an index's metadata) and hands it over.
"""

from __future__ import annotations

import html
import os
import re
import urllib.parse

import yaml
from ansible.errors import AnsibleError, AnsibleUndefinedVariable
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_coherence import wheel_metadata
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import (
    normalize_name,
    wheel_filename_info,
)

COLLECTION = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["'][^>]*>""", re.IGNORECASE)


def load_known_runtimes(path: str | None = None) -> dict:
    with open(path or os.path.join(COLLECTION, deploy_plan.KNOWN_RUNTIMES_FILE), encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


def load_patch_set(directory: str) -> dict | None:
    manifest = os.path.join(directory, "patchset.yml")
    if not os.path.isfile(manifest):
        return None
    with open(manifest, encoding="utf-8") as handle:
        return deploy_plan.patch_set_record(directory, yaml.safe_load(handle) or {})


def available_patch_sets(root: str) -> list[dict]:
    records = []
    if root and os.path.isdir(root):
        for name in sorted(os.listdir(root)):
            record = load_patch_set(os.path.join(root, name))
            if record is not None:
                records.append(record)
    return records


def fetch_index_metadata(index_url: str, name: str, version: str, opener=open_url):
    """(METADATA text, where) for ``name==version`` from a PEP 503 index that serves PEP 658 metadata, or None."""
    base = index_url.rstrip("/") + "/" + normalize_name(name) + "/"
    try:
        page = opener(base, timeout=10).read().decode("utf-8", "replace")
    except Exception:  # an unreachable index: the caller falls back on the known runtime
        return None
    for href in _HREF.findall(page):
        url = urllib.parse.urljoin(base, html.unescape(href)).split("#", 1)[0]
        info = wheel_filename_info(urllib.parse.unquote(url.rsplit("/", 1)[-1]))
        if info and normalize_name(info[0]) == normalize_name(name) and info[1].split("+", 1)[0] == version:
            try:
                return opener(url + ".metadata", timeout=10).read().decode("utf-8", "replace"), url + ".metadata"
            except Exception:
                return None
    return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _VALID_ARGS = frozenset((*deploy_plan.INPUT_VARIABLES, "patchset_root", "facts"))

    def _inputs(self, task_vars: dict) -> dict:
        """Every input of the plan: the task's own arguments, else the variable that sets it, else its absent value."""
        inputs = {}
        for name, (variable, absent) in deploy_plan.INPUT_VARIABLES.items():
            if name in self._task.args:
                value = self._task.args[name]
            elif variable in task_vars:
                try:
                    value = self._templar.template(task_vars[variable])
                except AnsibleUndefinedVariable:
                    value = absent  # built from a variable of a role that is not loaded
            else:
                value = absent
            if name in deploy_plan.BOOLEAN_INPUTS:
                value = boolean(value, strict=False)
            if value is not None:
                inputs[name] = value
        inputs["patchset_root"] = self._task.args.get("patchset_root")
        return inputs

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._inputs(task_vars)
        explicit = None
        if args.get("patch_sets") is not None:
            explicit = []
            for position, directory in enumerate(args["patch_sets"]):
                record = load_patch_set(str(directory))
                if record is None:
                    parent = os.path.dirname(os.path.normpath(str(directory)))
                    names = ", ".join(r["name"] for r in available_patch_sets(parent))
                    raise AnsibleError(
                        f"sglang_deploy_patch_sets[{position}]: {directory} has no patchset.yml"
                        + (f"; patch sets in {parent}: {names}" if names else "")
                    )
                explicit.append(record)
        try:
            known = load_known_runtimes()
        except (OSError, yaml.YAMLError) as exc:
            raise AnsibleError(f"deploy_plan: cannot read {deploy_plan.KNOWN_RUNTIMES_FILE}: {exc}") from exc
        deferred = deploy_plan.deferred_inputs(args)
        if deferred:
            # The roles' own validation names the variable and what is allowed; no plan before that.
            result.update(changed=False, skipped=True, msg=f"no plan yet: {deferred} is checked by its role")
            return result
        facts = self._task.args.get("facts")
        built = deploy_plan.plan(
            dict(args, explicit_patch_sets=explicit),
            known,
            available_patch_sets(str(args.get("patchset_root") or os.path.join(COLLECTION, "patchsets"))),
            wheel_metadata,
            facts=facts,
            fetch_index_metadata=fetch_index_metadata,
        )
        result.update(changed=False, plan=built["plan"], errors=built["errors"], warnings=built["warnings"])
        host = self._task_vars_host(task_vars) if facts is not None else ""
        if built["errors"]:
            result["failed"] = True
            what = f"The deploy plan{' of ' + host if host else ''} is refused"
            if ((built["plan"].get("host") or {}).get("reference_venv") or {}).get("errors"):
                # What an operator most often meets here, named first (the other problems of the host follow).
                what = f"The reference venv {built['plan']['reference_venv']} contradicts the plan"
            result["msg"] = (
                f"{what} ({len(built['errors'])} problem(s); nothing was built or changed on any host): "
                + " | ".join(built["errors"])
            )
            return result
        result["ansible_facts"] = {"sglang_deploy_plan": built["plan"]}
        plan = built["plan"]
        sets = ", ".join(s["name"] for s in plan["patch_sets"]) or "none"
        result["msg"] = (
            f"Plan: sglang {plan['sglang']['version']} ({plan['sglang']['source']}; requirements: "
            f"{plan['sglang']['requires_source']}), {plan['coherence']['checked']} requirement(s) of the manifest hold,"
            f" patch sets: {sets}, runtime proven: {plan['runtime'].get('proven')}"
        )
        if "host" in plan:
            release = plan["host"]["release"]
            state = "to be built" if release["build"] else "complete, nothing to build"
            result["msg"] += (
                f"; {host}: release {release['release_id']} ({state}),"
                f" GPUs {', '.join(plan['host']['gpus']['uuids']) or 'none (no GPU checks)'}"
            )
        return result

    @staticmethod
    def _task_vars_host(task_vars):
        return str((task_vars or {}).get("inventory_hostname") or "")
