# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_readiness``: the module as it is, in a worker that ends with its run.

The readiness wait is the longest task of a deploy, usually ``async`` with a poll loop in Ansible's
worker process. A cancelled AWX job (ansible-runner SIGKILLs ansible-playbook's process group) or a
killed ansible-playbook leaves that worker (its own session) polling for as long as the task's async
budget: ``controller.guard_worker`` ends it when its ansible-playbook is gone. The host-side job is
reaped by the next run (``sglang_release_reap``).
"""

from __future__ import annotations

from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.specdec.sglang.plugins.plugin_utils import controller


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        controller.guard_worker()
        return super().run(tmp, task_vars)
