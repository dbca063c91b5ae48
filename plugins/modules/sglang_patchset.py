#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_patchset
short_description: Apply, revert, verify or validate an sglang patch set
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - Manages a patch set (C(patchset.yml) plus C(files/) overlays and/or C(diffs/) unified diffs) against the
    sglang installed in a release's venv. See C(docs/patchsets.md) for the format.
  - Every file is checked before anything is written. A file that is at neither its base nor its result
    checksum refuses the whole set, naming the file and both checksums.
  - O(state=applied) backs the originals up in O(backup_dir), writes the results (overlays, or unified diffs
    applied in pure Python with strict context matching; the result must hash to C(result_sha256)), purges
    the touched modules' C(__pycache__) entries and byte-compiles them with the venv's python. Applying an
    applied set changes nothing.
  - O(state=reverted) restores the backed-up originals byte for byte (checked against C(base_sha256)) and
    removes files the set created.
  - O(state=verified) checks every file is at its result checksum and runs the manifest's verify step,
    imports in a venv that has torch (a GPU venv), or compile plus syntax-tree checks where torch is absent.
  - O(state=validated) checks the patch set itself (schema, overlays, diffs, optionally base checksums against
    a pristine O(source_tree)) and touches nothing; run it on the controller (C(delegate_to=localhost))
    before any host change.
options:
  state:
    description: What to do with the patch set.
    type: str
    choices: [applied, reverted, verified, validated]
    default: applied
  src:
    description:
      - The patch set directory (the one holding C(patchset.yml)). On the target for V(applied) (already
        copied there); on the controller for V(validated).
      - For V(reverted) and V(verified) only the manifest is needed; O(manifest) may replace it.
    type: path
  manifest:
    description:
      - The parsed manifest. When given, C(patchset.yml) is not read on the target, so targets need no PyYAML.
        The role passes the manifest returned by O(state=validated).
    type: dict
  venv:
    description: The release's venv. O(python) defaults to C(<venv>/bin/python).
    type: path
  python:
    description: The venv's python; used to find site-packages, byte-compile and verify.
    type: path
  site_packages:
    description: The site-packages directory holding sglang. Asked from O(python) when omitted.
    type: path
  backup_dir:
    description:
      - Where originals are kept, inside the release (for example C(<release>/patch-backups/<name>)).
      - Required for V(applied) and V(reverted).
    type: path
  verify:
    description: With V(applied) or V(reverted), also run the verify step afterwards.
    type: bool
    default: true
  verify_mode:
    description:
      - V(import) imports the modules in the venv (needs torch, a GPU venv); V(compile) compiles the touched
        files and checks the manifest's C(defines) in their syntax trees; V(auto) picks V(import) when torch
        is importable in the venv, else V(compile).
    type: str
    choices: [auto, import, compile]
    default: auto
  check_version:
    description: Refuse to apply when the installed sglang version differs from the manifest's C(sglang_version).
    type: bool
    default: true
  source_tree:
    description: With V(validated), a pristine site-packages tree of the target sglang to check base checksums against.
    type: path
  label:
    description:
      - "Names the set in a failure's message, which becomes C(<label>: <reason>). The role passes
        C(sglang_patches_sets[<index>]=<directory> (<name>))."
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reports per file what would change, with before and after checksums, and writes nothing.
  diff_mode:
    support: none
    description: Reports checksums per file instead of a text diff.
notes:
  - Refusals return C(file), C(expected_sha256) and C(found_sha256) as data besides the message.
"""

EXAMPLES = r"""
- name: Validate the patch set on the controller before any host change
  specdec.sglang.sglang_patchset:
    state: validated
    src: "{{ playbook_dir }}/patchsets/ddtree-spec-info"
  delegate_to: localhost
  register: ddtree_set

- name: Apply it to the release's sglang
  specdec.sglang.sglang_patchset:
    state: applied
    src: /opt/sglang/releases/r1/patchsets/ddtree-spec-info
    manifest: "{{ ddtree_set.manifest }}"
    venv: /opt/sglang/releases/r1/venv
    backup_dir: /opt/sglang/releases/r1/patch-backups/ddtree-spec-info

- name: Verify (imports in a GPU venv, compile and syntax checks elsewhere)
  specdec.sglang.sglang_patchset:
    state: verified
    manifest: "{{ ddtree_set.manifest }}"
    venv: /opt/sglang/releases/r1/venv

- name: Revert to the pristine files
  specdec.sglang.sglang_patchset:
    state: reverted
    manifest: "{{ ddtree_set.manifest }}"
    venv: /opt/sglang/releases/r1/venv
    backup_dir: /opt/sglang/releases/r1/patch-backups/ddtree-spec-info
"""

RETURN = r"""
name:
  description: The patch set's name.
  returned: always
  type: str
  sample: ddtree-spec-info
sglang_version:
  description: The sglang version the patch set targets.
  returned: always
  type: str
  sample: 0.5.23
site_packages:
  description: The site-packages directory the set was applied to.
  returned: when state is not validated
  type: str
  sample: /opt/sglang/releases/r1/venv/lib/python3.11/site-packages
files:
  description:
    - One row per file. For V(validated) the rows carry C(path), C(source) and C(base)
      (V(ok), V(mismatch) or V(not checked)) instead.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Path relative to site-packages.
      type: str
      sample: sglang/srt/speculative/spec_info.py
    action:
      description: V(none), V(patch), V(overlay), V(create) (applied); V(none), V(restore), V(remove) (reverted).
      type: str
      sample: patch
    before_sha256:
      description: Checksum found before the task (null when the file was absent).
      type: str
      sample: 11d25b728ea18aeff82bc269c65a6608b5c9638b0ab754f284b2df76bead7910
    after_sha256:
      description: Checksum after the task (null when the file is removed).
      type: str
      sample: 32b50a441329c8c854f3e20ed797503c0e539f797571d6f5fd8f44e2f33845ab
  sample:
    - path: sglang/srt/speculative/spec_info.py
      action: patch
      before_sha256: 11d25b728ea18aeff82bc269c65a6608b5c9638b0ab754f284b2df76bead7910
      after_sha256: 32b50a441329c8c854f3e20ed797503c0e539f797571d6f5fd8f44e2f33845ab
pycache_purged:
  description: Compiled files removed for the touched modules.
  returned: when state is applied or reverted
  type: list
  elements: str
  sample:
    - /opt/sglang/current/venv/lib/python3.11/site-packages/sglang/srt/speculative/__pycache__/spec_info.cpython-311.pyc
compiled:
  description: Files byte-compiled again with the venv's python.
  returned: when state is applied or reverted
  type: list
  elements: str
  sample: [/opt/sglang/releases/r1/venv/lib/python3.11/site-packages/sglang/srt/speculative/spec_info.py]
verify:
  description: The verify step's result (empty when it did not run).
  returned: always
  type: dict
  contains:
    ok:
      description: Whether every check passed.
      type: bool
    mode:
      description: V(import) or V(compile), after V(auto) was resolved.
      type: str
    checksums:
      description: Per file C(path), C(ok), C(expected_sha256), C(found_sha256).
      type: list
      elements: dict
    compiled:
      description: Files that compiled.
      type: list
      elements: str
    imported:
      description: Modules that imported (import mode).
      type: list
      elements: str
    defines:
      description: C(module:Name.attr) entries found.
      type: list
      elements: str
    errors:
      description: What failed.
      type: list
      elements: str
  sample:
    ok: true
    mode: compile
    compiled: [/opt/sglang/releases/r1/venv/lib/python3.11/site-packages/sglang/srt/speculative/spec_info.py]
    imported: []
    defines: ["sglang.srt.speculative.spec_info:SpeculativeAlgorithm.DDTREE"]
    errors: []
manifest:
  description: The parsed, validated manifest; pass it to later tasks as O(manifest).
  returned: always
  type: dict
  sample: {name: ddtree-spec-info, sglang_version: 0.5.23, files: [], verify: {compile: true}}
"""

import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps  # noqa: E402


def _runner(module):
    def run(argv):
        return module.run_command(argv, check_rc=False)

    return run


def _missing_param(p):
    """Why the parameters do not name what the state needs, or None when they do."""
    state = p["state"]
    if state == "validated" and not p["src"]:
        return "src is required with state=validated: the patch set directory on the controller"
    if state == "applied" and not p["src"]:
        return "src is required with state=applied: the patch set directory copied to the target"
    if state in ("applied", "reverted") and not p["backup_dir"]:
        return "backup_dir is required with state=%s (for example <release>/patch-backups/<name>)" % state
    if not p["src"] and not p["manifest"]:
        return "src or manifest is required: which patch set?"
    return None


def _python(p):
    """The target interpreter: `python`, else the venv's bin/python, else None."""
    return p["python"] or (os.path.join(p["venv"], "bin", "python") if p["venv"] else None)


def _change(module, manifest, python, site_packages, runner):
    """Apply or revert the patch set (state applied / reverted); the result keys of that step."""
    p = module.params
    if p["state"] == "applied":
        return ps.apply(
            p["src"],
            site_packages,
            p["backup_dir"],
            manifest,
            python,
            runner=runner,
            check_mode=module.check_mode,
            check_version=p["check_version"],
        )
    if p["state"] == "reverted":
        return ps.revert(site_packages, p["backup_dir"], manifest, python, runner=runner, check_mode=module.check_mode)
    return {}


def _fail(module, msg, **result):
    module.fail_json(msg=ps.refusal(module.params.get("label"), msg), **result)


def run_module(module, runner=None):
    p = module.params
    runner = runner or _runner(module)
    state = p["state"]
    result = {"changed": False, "files": [], "verify": {}}
    missing = _missing_param(p)
    if missing:
        _fail(module, missing)

    manifest = p["manifest"] if p["manifest"] is not None else ps.load_manifest(p["src"])
    ps.check_manifest(manifest)
    result.update(name=manifest["name"], sglang_version=manifest["sglang_version"], manifest=manifest)

    if state == "validated":
        report = ps.validate(p["src"], manifest, source_tree=p["source_tree"])
        result["files"] = report["files"]
        return result

    python = _python(p)
    if not python:
        _fail(module, "venv or python is required with state=%s" % state, **result)
    if not os.path.exists(python) and module.check_mode:
        # The venv is built by an earlier task that check mode did not run.
        result.update(changed=state != "verified", skipped_reason="%s does not exist yet (check mode)" % python)
        return result
    site_packages = p["site_packages"] or ps.resolve_site_packages(python, runner)
    result["site_packages"] = site_packages

    result.update(_change(module, manifest, python, site_packages, runner))
    if state == "verified" or (p["verify"] and not module.check_mode):
        result["verify"] = ps.verify(
            site_packages, manifest, python, mode=p["verify_mode"], runner=runner, reverted=state == "reverted"
        )
        if not result["verify"]["ok"]:
            _fail(
                module,
                "patch set %s failed verification: %s" % (manifest["name"], "; ".join(result["verify"]["errors"])),
                **result,
            )
    return result


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "applied", "choices": ["applied", "reverted", "verified", "validated"]},
            "src": {"type": "path"},
            "manifest": {"type": "dict"},
            "venv": {"type": "path"},
            "python": {"type": "path"},
            "site_packages": {"type": "path"},
            "backup_dir": {"type": "path"},
            "verify": {"type": "bool", "default": True},
            "verify_mode": {"type": "str", "default": "auto", "choices": ["auto", "import", "compile"]},
            "check_version": {"type": "bool", "default": True},
            "source_tree": {"type": "path"},
            "label": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    try:
        result = run_module(module)
    except ps.PatchsetError as exc:
        _fail(module, exc.msg, **exc.data)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
