#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_model_check
short_description: Check a model directory's weights are whole before the server is started on it
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Runs on the GPU host, before the unit starts. C(config.json) must be there and parse; the tokenizer must be
    there when O(require_tokenizer) (C(tokenizer.json), C(tokenizer.model) or C(vocab.json)); every shard
    C(model.safetensors.index.json) names must be in the directory (without an index, every C(*.safetensors)
    file is checked, and there must be one).
  - Each shard's safetensors header is read (8-byte little-endian length, then JSON) and its tensors'
    C(data_offsets) must tile the data section and end exactly at the file's size, each as long as its shape
    and dtype say. Only headers are read, so a 54 GB model is checked in well under a second.
  - With O(sha256), every shard's sha256 is computed (minutes for 54 GB) and compared with the manifest in
    O(manifest_dir) when one was recorded; O(state=record) writes that manifest (once, at a good deploy).
    Sizes are compared with a recorded manifest even without O(sha256).
  - A problem fails with C(failure_class=model_integrity), the file (RV(file)) and what was found.
  - Read-only with O(state=check); supports check mode.
options:
  path:
    description: The model directory.
    type: path
    required: true
  name:
    description: What the directory is, for messages (for example the variable that holds it).
    type: str
    default: model
  require_tokenizer:
    description: Require a tokenizer file (a target model); a DFlash draft uses the target's.
    type: bool
    default: true
  sha256:
    description: Compute every shard's sha256 (slow) and check it against the recorded manifest.
    type: bool
    default: false
  manifest_dir:
    description: Directory of the recorded manifests (one file per model directory). Empty - no manifest.
    type: path
    default: ''
  manifest_required:
    description: With O(state=check), fail when no manifest was recorded for this directory.
    type: bool
    default: false
  state:
    description:
      - V(check) the directory; V(record) checks it too and then writes its manifest when none exists
        (digests only with O(sha256)).
    type: str
    choices: [check, record]
    default: check
"""

EXAMPLES = r"""
- name: Check the target model's weights
  specdec.sglang.sglang_model_check:
    path: /models/Qwen3.6-27B
    name: sglang_service_model_path

- name: Record the draft's manifest with digests after a good deploy
  specdec.sglang.sglang_model_check:
    path: /models/dflash-draft
    require_tokenizer: false
    sha256: true
    manifest_dir: /opt/sglang/state/model-manifests
    state: record
"""

RETURN = r"""
ok:
  description: Whether the directory passed.
  returned: always
  type: bool
failure_class:
  description: C(model_integrity) when a file is missing or damaged; null otherwise.
  returned: always
  type: str
file:
  description: The file the problem is about.
  returned: on failure
  type: str
  sample: /models/target/model-00002-of-00011.safetensors
problem:
  description: What was found, and what was expected.
  returned: on failure
  type: str
hint:
  description: What to do.
  returned: on failure
  type: str
summary:
  description: Shards and tensors checked, their bytes, seconds taken, whether digests were compared.
  returned: success
  type: dict
  sample: {"shards": 11, "tensors": 851, "bytes": 54839172096, "elapsed_s": 0.04, "sha256_checked": false}
manifest:
  description: The manifest file for this directory (written with O(state=record)).
  returned: when O(manifest_dir) is set
  type: str
"""

import json  # noqa: E402
import os  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host import model_integrity  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier  # noqa: E402


def _read_manifest(path):
    try:
        with open(path, "rb") as handle:
            return json.loads(handle.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise model_integrity.IntegrityError(
            path, "the recorded manifest cannot be read (%s); remove it to record anew" % exc
        ) from None


def _write_manifest(path, data):
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=1, sort_keys=True) + "\n", 0o600)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            name=dict(type="str", default="model"),
            require_tokenizer=dict(type="bool", default=True),
            sha256=dict(type="bool", default=False),
            manifest_dir=dict(type="path", default=""),
            manifest_required=dict(type="bool", default=False),
            state=dict(type="str", choices=["check", "record"], default="check"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    path = p["path"].rstrip("/") or "/"
    manifest_path = os.path.join(p["manifest_dir"], model_integrity.manifest_name(path)) if p["manifest_dir"] else None
    result = {"changed": False, "ok": False, "failure_class": None}
    if manifest_path:
        result["manifest"] = manifest_path
    try:
        manifest = _read_manifest(manifest_path) if manifest_path else None
        if manifest is None and p["manifest_required"] and p["state"] == "check":
            raise model_integrity.IntegrityError(
                manifest_path or path,
                "no manifest recorded for %s and manifest_required is true: deploy once with sha256 on to record it"
                % path,
            )
        summary = model_integrity.check_directory(
            path,
            require_tokenizer=p["require_tokenizer"],
            sha256=p["sha256"],
            manifest=manifest,
        )
    except model_integrity.IntegrityError as exc:
        failure_class = model_integrity.FAILURE_CLASS
        hint = failure_classifier.hint_for(failure_class)
        module.fail_json(
            msg="%s: %s=%s: %s: %s; hint: %s" % (failure_class, p["name"], path, exc.path, exc.problem, hint),
            ok=False,
            failure_class=failure_class,
            file=exc.path,
            problem=exc.problem,
            hint=hint,
            **({"manifest": manifest_path} if manifest_path else {}),
        )
    result["ok"] = True
    result["summary"] = {k: v for k, v in summary.items() if k != "files"}
    if p["state"] == "record" and manifest_path and manifest is None:
        result["changed"] = True
        if not module.check_mode:
            _write_manifest(manifest_path, model_integrity.manifest_of(summary))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
