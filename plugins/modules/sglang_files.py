#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_files
short_description: Put a set of small files and directories in place in one module run
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Writes each file of O(files) whose content differs, and creates each missing directory, in the order given;
    then sets every entry's mode, owner and group where they differ. One module run for the whole set, where
    M(ansible.builtin.copy) or M(ansible.builtin.template) per file costs a transfer and two module runs each.
  - A file is written to a temporary file next to it, given its mode, owner and group, and renamed over the old
    one, so a reader never sees it half written or with looser permissions (a 0600 secret stays 0600).
  - The action plugin reads O(files[].src) and renders O(files[].template) on the controller (a template sees the
    task's variables, as with M(ansible.builtin.template)); the module receives only content.
  - For small text files (1 MiB at most each); wheels and other large files belong to M(ansible.builtin.copy).
  - Supports check mode and diff mode (the text of each file it would change). Use C(no_log) when a file
    holds a secret.
options:
  files:
    description: The files and directories, in the order they are put in place (a directory before its files).
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description:
          - Absolute path on the host.
          - A file's directory must exist or come earlier in the list; a directory's missing parents are created
            (mode 0755 under the default umask).
        type: path
        required: true
      state:
        description: C(file) or C(directory).
        type: str
        choices: [file, directory]
        default: file
      content:
        description: The file's text. One of O(files[].content), O(files[].src) and O(files[].template) for a file.
        type: str
      src:
        description: A file on the controller (looked up like M(ansible.builtin.copy)'s C(src)), sent as content.
        type: str
      template:
        description: A Jinja2 template on the controller (looked up in the role's C(templates)), rendered with
          the task's variables and sent as content.
        type: str
      mode:
        description: The mode, as an octal string (C('0644')).
        type: str
        required: true
      owner:
        description: The owning user.
        type: str
        default: root
      group:
        description: The owning group.
        type: str
        default: root
"""

EXAMPLES = r"""
- name: The watchdog's directory, code and timer in one module run
  specdec.sglang.sglang_files:
    files:
      - {path: /opt/sglang/watch, state: directory, mode: "0755"}
      - {path: /opt/sglang/watch/readiness.py, src: "{{ role_path }}/files/readiness.py", mode: "0644"}
      - {path: /etc/systemd/system/sglang-watch.timer, template: sglang-watch.timer.j2, mode: "0644"}
"""

RETURN = r"""
changed_paths:
  description: The paths whose content, existence, mode, owner or group changed (or would, in check mode).
  returned: always
  type: list
  elements: str
files:
  description: Per entry, in order - C(path), C(action) (C(create), C(replace) or C(keep), of the content or
    the directory) and C(changed) (content or attributes).
  returned: always
  type: list
  elements: dict
"""

import grp  # noqa: E402
import os  # noqa: E402
import pwd  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._release import file_set  # noqa: E402

ENTRY_OPTIONS = dict(
    path=dict(type="path", required=True),
    state=dict(type="str", choices=list(file_set.STATES), default="file"),
    content=dict(type="str"),
    src=dict(type="str"),
    template=dict(type="str"),
    mode=dict(type="str", required=True),
    owner=dict(type="str", default="root"),
    group=dict(type="str", default="root"),
)


def inspect(path):
    """None (nothing there), "directory", or the file's bytes."""
    if os.path.isdir(path):
        return "directory"
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def user_id(name):
    return int(name) if name.isdigit() else pwd.getpwnam(name).pw_uid


def group_id(name):
    return int(name) if name.isdigit() else grp.getgrnam(name).gr_gid


def write_file(item):
    """The content, its mode and owner set, replacing ``item["path"]`` whole (a reader never sees part of it)."""
    write_atomically(
        item["path"], item["content"], int(item["mode"], 8), user_id(item["owner"]), group_id(item["group"])
    )


def diff_of(item, action):
    """The before/after text of a file this run writes."""
    before = inspect(item["path"]) if action == "replace" else b""
    return dict(
        before_header=item["path"],
        after_header=item["path"],
        before=before.decode("utf-8", "replace"),
        after=item["content"],
    )


def put_in_place(module, item, action):
    """Write or create one entry (not in check mode), then set its attributes; whether anything changed."""
    path = item["path"]
    changed = action != "keep"
    if changed and not module.check_mode:
        if item["state"] == "directory":
            os.makedirs(path, 0o755)  # its missing parents too; its own mode is set below
        else:
            write_file(item)
    if action == "keep" or not module.check_mode:
        # the attributes of what is there now (in check mode only what already exists)
        changed = module.set_mode_if_different(path, item["mode"], changed)
        changed = module.set_owner_if_different(path, item["owner"], changed)
        changed = module.set_group_if_different(path, item["group"], changed)
    return changed


def main():
    module = AnsibleModule(
        argument_spec=dict(files=dict(type="list", elements="dict", required=True, options=ENTRY_OPTIONS)),
        supports_check_mode=True,
    )
    items = module.params["files"]
    errors = file_set.check_items(items)
    unresolved = [item["path"] for item in items if item.get("src") or item.get("template")]
    if unresolved:
        errors.append("src and template are read on the controller (the action plugin): %s" % ", ".join(unresolved))
    if errors:
        module.fail_json(msg="sglang_files: " + "; ".join(errors))
    try:
        steps = file_set.plan(items, inspect)
    except (OSError, ValueError) as exc:
        module.fail_json(msg="sglang_files: %s" % exc)

    entries, diffs = [], []
    for item, action in steps:
        if action != "keep" and item["state"] == "file" and module._diff:
            diffs.append(diff_of(item, action))
        try:
            changed = put_in_place(module, item, action)
        except (OSError, KeyError) as exc:  # KeyError: no such user or group
            module.fail_json(msg="sglang_files: cannot write %s: %s" % (item["path"], exc), files=entries)
        entries.append(dict(path=item["path"], action=action, changed=changed))

    changed_paths = [entry["path"] for entry in entries if entry["changed"]]
    result = dict(changed=bool(changed_paths), changed_paths=changed_paths, files=entries)
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()
