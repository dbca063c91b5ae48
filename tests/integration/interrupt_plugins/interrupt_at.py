# TEST ONLY (tests/integration/test_interruptions.py): Ctrl-C at a named task, deterministically.
# Enabled only by that test, through ANSIBLE_CALLBACK_PLUGINS and ANSIBLE_CALLBACKS_ENABLED.
"""Send SIGINT to ansible-playbook's process group (what Ctrl-C in a terminal does) at a named task.

Environment (read once, when the callback loads):

- ``SPECDEC_INTERRUPT_TASK``: the task's name, or the start of it (names with a templated suffix).
- ``SPECDEC_INTERRUPT_EVENT``: ``start`` (the task is about to run: every earlier step is done, this one
  has not begun) or ``async_poll`` (the task's async job runs on the host and has been polled once).
- ``SPECDEC_INTERRUPT_MARK``: a file the callback writes before it signals (the task and the event), so the
  test can prove the interruption happened where it asked.

The signal goes to the whole process group, as the terminal's Ctrl-C does: ansible-playbook, its workers
and their connection processes (the test starts ansible-playbook in a session of its own).
"""

import json
import os
import signal
import subprocess
import threading
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: interrupt_at
type: aggregate
short_description: TEST ONLY, SIGINT to the play's process group at a named task
description:
  - Used by tests/integration/test_interruptions.py to interrupt a deploy at a step boundary.
requirements:
  - enabled through ANSIBLE_CALLBACKS_ENABLED
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "interrupt_at"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._task = os.environ.get("SPECDEC_INTERRUPT_TASK", "")
        self._event = os.environ.get("SPECDEC_INTERRUPT_EVENT", "start")
        self._mark = os.environ.get("SPECDEC_INTERRUPT_MARK", "")
        self._fired = False
        self._current = ""

    def _matches(self, name, event):
        return bool(self._task) and not self._fired and event == self._event and name.startswith(self._task)

    def _interrupt(self, name, event):
        self._fired = True
        if self._mark:
            with open(self._mark, "w", encoding="utf-8") as handle:
                json.dump({"task": name, "event": event, "time": time.time()}, handle)
        if threading.current_thread() is threading.main_thread():
            os.killpg(os.getpgrp(), signal.SIGINT)
        else:
            # Callbacks of worker results (the async poll) run in the strategy's results thread; a signal
            # raised from there leaves the main thread's cleanup waiting on that thread. The terminal's
            # Ctrl-C comes from outside: so does this one.
            subprocess.Popen(["kill", "-INT", "--", "-%d" % os.getpgrp()])

    # The task's own name (get_name() prefixes the role: "specdec.sglang.sglang_runtime : Install sglang").
    # The linear strategy runs one task at a time: an async poll belongs to the last task started (the
    # poll's own result names the async_status task, not the one polled).
    def v2_playbook_on_task_start(self, task, is_conditional):
        self._current = task.name or ""
        if self._matches(self._current, "start"):
            self._interrupt(self._current, "start")

    def v2_runner_on_async_poll(self, result):
        if self._matches(self._current, "async_poll"):
            self._interrupt(self._current, "async_poll")
