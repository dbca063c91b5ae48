# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_host_lock``: take the host lock, checking the holder on the controller.

The module takes or releases the lock file on the host. Whether the run that holds it is still alive
is known only where that run's ansible-playbook runs: this plugin (on the controller) names this run
(controller identity, ansible-playbook pid and its start), calls the module without waiting, and,
while another run holds the lock, asks ``host_lock.holder_liveness``: a dead holder of this controller
is taken over at once (said in a warning), a live or foreign one is waited for up to ``timeout_s``,
then the task fails naming it.
"""

from __future__ import annotations

import time

from ansible.plugins.action import ActionBase
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock
from ansible_collections.specdec.sglang.plugins.plugin_utils import controller

MODULE = "specdec.sglang.sglang_host_lock"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def _call(self, args, task_vars):
        return self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        if args.get("state", "acquired") == "released" or self._task.check_mode:
            result.update(self._call(args, task_vars))
            return result
        controller.guard_worker()  # a wait of a killed run ends with it (it would take the lock for nobody)
        me = controller.identity()
        pid = int(args.get("controller_pid") or controller.playbook_pid())
        args.update(
            controller=me,
            controller_pid=pid,
            controller_pid_start=controller.pid_start(pid),
            owner=args.get("owner") or controller.owner(),
            wait=False,
        )
        timeout_s = float(args.get("timeout_s", 120))
        poll_s = float(args.get("poll_s", 2.0))
        started = time.monotonic()
        while True:
            out = self._call(args, task_vars)
            waited = round(time.monotonic() - started, 1)
            if out.get("failed") or out.get("action") != host_lock.HELD:
                out["waited_s"] = waited
                result.update(out)
                return result
            holder = out.get("holder")
            state, why = host_lock.holder_liveness(holder, controller=me, pid_start=controller.pid_start)
            if state == host_lock.DEAD:
                args.update(take_over_run_id=holder["run_id"], take_over_reason=why)
                continue
            if waited >= timeout_s:
                result.update(
                    failed=True,
                    action=host_lock.REFUSE,
                    holder=holder,
                    waited_s=waited,
                    liveness=state,
                    failure_class="host_locked",
                    reason=why,
                    msg=host_lock.refusal(
                        holder,
                        path=args["path"],
                        waited_s=waited,
                        timeout_s=timeout_s,
                        max_age_s=int(args.get("max_age_s", 14400)),
                        liveness_reason=why,
                        now=out.get("now"),
                    ),
                )
                return result
            time.sleep(min(poll_s, max(0.1, timeout_s - waited)))
