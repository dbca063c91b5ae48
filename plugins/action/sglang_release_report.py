# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_release_report``: the operation runs here, on the controller.

It reads no host file (it turns registered results into a report): the module's own argument spec and
code (``release_steps.run_on_controller``), in the worker, with no round trip to the host.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils.release_steps import run_on_controller


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)  # the common checks only
        result.update(run_on_controller("report", dict(self._task.args), check_mode=self._task.check_mode))
        return result
