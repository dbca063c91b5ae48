# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_envelope_plan``: with the configs already read, the plan is made here.

The deploy hands the module both ``config.json`` as the host facts read them (``target_config``,
``draft_config``): the plan then runs on the controller, with the module's own argument spec and code, and
nothing is read on the host again. Without them the module runs on the host and reads the files.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.specdec.sglang.plugins.modules import sglang_envelope_plan as module


def run_on_controller(args: dict) -> dict | None:
    """The module's result from the configs in ``args``; None when a config must be read on the host."""
    validated = ArgumentSpecValidator(module.ARGUMENT_SPEC).validate(args)
    if validated.error_messages:
        return {"failed": True, "msg": "; ".join(validated.error_messages)}
    p = validated.validated_parameters
    if not p["target_config"] or (module.uses_draft(p) and not p["draft_config"]):
        return None
    out, failure = module.plan(p, p["target_config"], p["draft_config"] if module.uses_draft(p) else None)
    return dict(out, failed=True, msg=failure) if failure else out


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        here = run_on_controller(dict(self._task.args))
        if here is None:
            return super().run(tmp, task_vars)
        result = super(NormalAction, self).run(tmp, task_vars)  # ActionBase: the common checks only
        result.update(here)
        return result
