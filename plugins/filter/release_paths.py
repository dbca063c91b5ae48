# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ``specdec.sglang.release_paths``: the paths of a release root, from their one owner."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: release_paths
short_description: The paths under a release root - the releases, the current link and the last good state
version_added: 0.3.0
author: specdec maintainers (@specdec)
description:
  - Returns the paths C(plugins/module_utils/_release/release.py) derives from a runtime root (their one owner), for
    plays that read a host without a deploy plan (C(playbooks/diagnose.yml)). A deploy takes them from
    C(sglang_deploy_plan.paths) and the release modules.
options:
  _input:
    description: The runtime root (C(sglang_runtime_root)).
    type: str
    required: true
  replica:
    description: A named replica (its last good state is C(<root>/state/last_good-<replica>)); empty for the single
      replica.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: List the releases and the current link
  ansible.builtin.command:
    cmd: ls -la {{ _paths.releases }} {{ _paths.current }}
  vars:
    _paths: "{{ sglang_service_runtime_root | specdec.sglang.release_paths }}"
  changed_when: false
"""

RETURN = r"""
_value:
  description: C(root), C(releases), C(current) (the link the unit starts from) and C(last_good) (the record and the
    good copies of the unit's files).
  type: dict
"""

from ansible.errors import AnsibleFilterError  # noqa: E402  (plugins keep their docs first)
from ansible_collections.specdec.sglang.plugins.module_utils._release import release  # noqa: E402


def release_paths(root, replica=""):
    root = str(root or "").rstrip("/")
    if not root.startswith("/"):
        raise AnsibleFilterError("release_paths: the runtime root must be an absolute path, got %r" % root)
    return {
        "root": root,
        "releases": release.releases_dir(root),
        "current": release.current_link(root),
        "last_good": release.last_good_dir(root, str(replica or "")),
    }


class FilterModule:
    def filters(self):
        return {"release_paths": release_paths}
