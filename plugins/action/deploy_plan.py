# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.deploy_plan``: the deploy plan, on the controller, no host contact.

The logic is ``module_utils/deploy_plan.py``; this file reads the data it needs (the known
runtimes, the patch set manifests, wheel METADATA, an index's metadata) and hands it over.
"""

from __future__ import annotations

import html
import os
import re
import urllib.parse

import yaml
from ansible.errors import AnsibleError
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils import deploy_plan
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_coherence import wheel_metadata
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_manifest import normalize_name, wheel_filename_info

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
    _VALID_ARGS = frozenset(
        (
            "sglang",
            "manifest",
            "python_version",
            "cuda_version",
            "index_url",
            "algorithm",
            "attention_backend",
            "patch_sets",
            "patchset_root",
            "runtime_root",
            "unit_name",
            "config_dir",
            "cache_dir",
            "disk_path",
            "gpus_wanted",
            "reference_venv",
            "extra_wheels",
            "plan",
            "target_config",
            "target_config_path",
            "release_python",
            "core_sources",
            "reference_venv_report",
        )
    )

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars or {})
        args = dict(self._task.args)
        if "target_config" in args:
            return self._check_target(result, args)
        if "reference_venv_report" in args:
            return self._check_reference_venv(result, args)
        if "release_python" in args:
            release = deploy_plan.release_of(args.get("plan") or {}, dict(args["release_python"] or {}))
            result.update(changed=False, msg=f"release {release['release_id']} at {release['release_dir']}", **release)
            return result
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
        inputs = dict(args, explicit_patch_sets=explicit)
        built = deploy_plan.build_plan(
            inputs,
            known,
            available_patch_sets(str(args.get("patchset_root") or os.path.join(COLLECTION, "patchsets"))),
            wheel_metadata,
            fetch_index_metadata=fetch_index_metadata,
        )
        result.update(changed=False, plan=built["plan"], errors=built["errors"], warnings=built["warnings"])
        if built["errors"]:
            result["failed"] = True
            result["msg"] = (
                f"The deploy plan is refused ({len(built['errors'])} problem(s); nothing was done on any host): "
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
        return result

    def _check_reference_venv(self, result, args):
        checked = deploy_plan.check_reference_venv(args.get("plan") or {}, args.get("reference_venv_report") or {})
        result.update(changed=False, **checked)
        venv = (args.get("reference_venv_report") or {}).get("venv") or "(unset)"
        if checked["errors"]:
            result["failed"] = True
            result["msg"] = (
                f"The reference venv {venv} contradicts the plan ({len(checked['errors'])} problem(s);"
                " nothing was built): " + " | ".join(checked["errors"])
            )
        else:
            result["msg"] = f"reference venv {venv}: {checked['checked']} version(s) and requirement(s) hold" + (
                "; " + "; ".join(checked["notes"]) if checked["notes"] else ""
            )
        return result

    def _check_target(self, result, args):
        checked = deploy_plan.check_target(
            args.get("plan") or {},
            args.get("target_config") or {},
            str(args.get("target_config_path") or "config.json"),
        )
        result.update(changed=False, **checked)
        if checked["error"]:
            result["failed"] = True
            result["msg"] = checked["error"] + " (nothing was built)"
        else:
            result["msg"] = f"target architecture {checked['architecture']}: served by the plan's patch sets"
        return result
