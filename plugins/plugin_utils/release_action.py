# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The action plugin of a release operation that reads no host file (``release_steps.CONTROLLER_OPERATIONS``).

It runs the module's own argument spec and code (``release_steps.run_on_controller``) in the worker, with no
round trip to the host: ``sglang_release_judge`` and ``sglang_release_report`` are ``controller_action(op)``.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import run_on_controller


def controller_action(operation: str) -> type:
    """The ActionModule class of ``sglang_release_<operation>``."""

    class ActionModule(ActionBase):
        TRANSFERS_FILES = False
        _requires_connection = False

        def run(self, tmp=None, task_vars=None):
            result = super().run(tmp, task_vars)  # the common checks only
            result.update(run_on_controller(operation, dict(self._task.args), check_mode=self._task.check_mode))
            return result

    ActionModule.__doc__ = f"sglang_release_{operation}, on the controller."
    return ActionModule
