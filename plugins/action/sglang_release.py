# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_release``: steps ``judge`` and ``report`` on the controller.

Those two steps read no host file: they turn registered results into a verdict and a report. They run
here, in the worker, through the module's own ``Steps`` (the same argument spec and code), with no
round trip to the host. Every other step runs the module on the host.
"""

from __future__ import annotations

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible_collections.specdec.sglang.plugins.module_utils import release
from ansible_collections.specdec.sglang.plugins.modules import sglang_release

CONTROLLER_STEPS = ("judge", "report")


def run_on_controller(args: dict, check_mode: bool = False) -> dict:
    """One controller step: the module's validation and ``Steps`` method, as the module's result dict."""
    validated = ArgumentSpecValidator(sglang_release.ARGUMENT_SPEC).validate(args)
    if validated.error_messages:
        return {"failed": True, "msg": "; ".join(validated.error_messages)}
    params = validated.validated_parameters
    steps = sglang_release.Steps(params, host=None, check_mode=check_mode)
    try:
        result = getattr(steps, params["step"])()
    except release.RecordError as exc:
        return {"failed": True, "msg": "sglang_release %s: %s" % (params["step"], exc), "step": params["step"]}
    result.setdefault("changed", False)
    result["step"] = params["step"]
    return result


class ActionModule(NormalAction):
    def run(self, tmp=None, task_vars=None):
        args = self._task.args
        if args.get("step") not in CONTROLLER_STEPS:
            return super().run(tmp, task_vars)
        result = super(NormalAction, self).run(tmp, task_vars)  # ActionBase: the common checks only
        result.update(run_on_controller(dict(args), check_mode=self._task.check_mode))
        return result
