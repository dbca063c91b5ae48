# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_files``: ``src`` read, ``template`` rendered on the controller; one module run.

A template is rendered by Ansible's own ``template`` lookup (the role's ``templates`` directory, the
task's variables, ``ansible_managed``), which is what ``ansible.builtin.template`` renders too; a
``src`` is found like ``ansible.builtin.copy``'s (the role's ``files`` directory, or a path). The module
receives each file's content and never a controller path.
"""

from __future__ import annotations

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

MODULE = "specdec.sglang.sglang_files"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _supports_check_mode = True
    _supports_async = False

    def _content(self, item, task_vars):
        sources = [key for key in ("content", "src", "template") if item.get(key) is not None]
        if len(sources) > 1:
            raise AnsibleActionFail("%s: give one of content, src and template, not %s" % (item.get("path"), sources))
        if "src" in sources:
            try:
                path = self._find_needle("files", item["src"])
            except AnsibleError as exc:
                raise AnsibleActionFail(to_text(exc)) from exc
            with open(path, "rb") as handle:
                return to_text(handle.read(), errors="surrogate_or_strict")
        if "template" in sources:
            lookup = self._shared_loader_obj.lookup_loader.get(
                "ansible.builtin.template", loader=self._loader, templar=self._templar
            )
            return lookup.run([item["template"]], variables=task_vars)[0]
        return item.get("content")

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        files = self._task.args.get("files")
        if not isinstance(files, list) or not all(isinstance(item, dict) for item in files):
            raise AnsibleActionFail("files must be a list of dicts, not %r" % type(files).__name__)
        resolved = []
        for item in files:
            entry = {key: value for key, value in item.items() if key not in ("src", "template")}
            if (item.get("state") or "file") == "file":
                entry["content"] = self._content(item, task_vars or {})
            resolved.append(entry)
        module_args = dict(self._task.args, files=resolved)
        result.update(self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars))
        return result
