# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the controller knows about itself: its identity, the ansible-playbook run, its processes.

Used by the action plugins (they run in Ansible's worker processes on the controller). The
decisions are ``module_utils/_host/host_lock.py``'s; this file only reads ``/proc`` and ``/etc``.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import threading

from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def boot_id() -> str:
    return _read("/proc/sys/kernel/random/boot_id")


def identity() -> str:
    """This controller: its machine id and pid namespace (where a pid means one process)."""
    try:
        pid_ns = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        pid_ns = ""
    return host_lock.controller_identity(_read("/etc/machine-id"), pid_ns, socket.gethostname())


def pid_start(pid: int) -> str:
    """The start token of ``pid`` on this controller ("" when no such process)."""
    return host_lock.process_start_token(boot_id(), _read("/proc/%d/stat" % int(pid)))


def playbook_pid() -> int:
    """The ansible-playbook process of this run: the parent of the worker an action plugin runs in.

    Ansible forks its workers from the main process (``multiprocessing`` context ``fork``)."""
    return os.getppid()


def owner() -> str:
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or str(os.getuid())
    return "%s@%s" % (user, socket.gethostname())


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _libc_prctl(option: int, value: int) -> int:
    """prctl(2) through libc; -1 where there is none (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        return -1


def guard_worker(
    *, poll_s: float = 1.0, kill=os.killpg, exit_=os._exit, getppid=os.getppid, sleep=None, prctl=_libc_prctl
) -> threading.Thread:
    """End this worker, and its connection's processes, when the ansible-playbook process is gone.

    Ansible's workers leave the main process's process group (``setsid``): ansible-runner's cancel
    (SIGKILL to that group, the AWX cancel) and a kill of ansible-playbook leave the worker of a long
    task running (an async task's poll loop: the readiness wait), reparented, for as long as that task
    lasts. Two guards: the kernel sends the worker SIGTERM the moment its parent dies
    (``PR_SET_PDEATHSIG``, Linux), which Ansible's worker answers by sending SIGTERM to its own process
    group (``WorkerProcess._term``: the worker and its nsenter / ssh children end; a SIGKILL here would
    end the worker alone and leave its children); and a daemon thread that notices the new parent
    kills that process group where the first guard is not there or was late.
    The host-side job it started is reaped by the next run.
    """
    parent = getppid()
    pause = sleep or threading.Event().wait
    prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # a parent that died before this line is the thread's to see

    def watch():
        while True:
            pause(poll_s)
            if getppid() != parent:
                try:
                    if os.getpgrp() == os.getpid():  # the worker leads its group: nothing else is in it
                        kill(os.getpgrp(), signal.SIGKILL)
                finally:
                    exit_(1)
                return

    thread = threading.Thread(target=watch, name="sglang-parent-guard", daemon=True)
    _start_with_blocked(thread, signal.SIGTERM)
    return thread


def _start_with_blocked(thread, signum):
    """Start ``thread`` with ``signum`` blocked in it (a new thread inherits its creator's mask).

    Python runs signal handlers in the main thread: a SIGTERM the kernel hands to this sleeping guard
    thread would wait for the main thread's next bytecode (the end of its sleep). Blocked here, the
    kernel hands it to a thread that takes it, the main thread, whose sleep it interrupts.
    """
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        thread.start()
        return
    old = mask(signal.SIG_BLOCK, {signum})
    try:
        thread.start()
    finally:
        mask(signal.SIG_SETMASK, old)
