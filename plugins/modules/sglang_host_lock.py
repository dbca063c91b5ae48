#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_host_lock
short_description: Take or release the host lock of a deploy, rollback or stop
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Takes the lock file O(path) by an atomic create (C(O_CREAT|O_EXCL), mode 0600) and writes its holder into it -
    the run id O(run_id), O(owner) (the controller's host name), O(controller_pid), O(play), the start time and
    the host's boot id. The lock outlives this module's process - it belongs to the ansible-playbook run until a
    task with O(state=released) and the same O(run_id) removes it.
  - A lock held by another run is waited for up to O(timeout_s) seconds, then the task fails naming the holder.
  - The action plugin of the same name runs on the controller. It does the waiting, and checks there whether
    the holder still runs - same controller identity (O(controller)) - its ansible-playbook pid and that
    process's start. A holder whose process is gone (an interrupted play - Ctrl-C, an AWX cancel) is taken over
    at once (O(take_over_run_id)), with a warning that says so. A holder from another controller cannot be checked
    - only its age (O(max_age_s)) or O(break_lock) take its lock.
  - A stale lock is taken over with a warning that says why - the host rebooted since it was taken (another
    boot id), its recorded host process is dead (a lock taken by a host-side tool with its pid), or it is older
    than O(max_age_s).
  - A lock this run holds already is kept (not changed). A release of a lock held by another run leaves it in
    place with a warning.
options:
  state:
    description: V(acquired) takes the lock (waiting), V(released) removes this run's lock.
    type: str
    choices: [acquired, released]
    default: acquired
  path:
    description: The lock file on the host. Its directory is created (0755) when missing.
    type: path
    required: true
  run_id:
    description: The id of this ansible-playbook run (the same for every play of the run).
    type: str
    required: true
  owner:
    description: Who runs the play (the controller's host name, and user).
    type: str
    default: ''
  controller_pid:
    description:
      - The ansible-playbook process on the controller (checked there, not on the host). The action plugin sets it.
    type: int
    default: 0
  controller:
    description:
      - The controller's identity (machine id and pid namespace); the action plugin sets it. Only a run from the
        same controller can check the holder's O(controller_pid).
    type: str
    default: ''
  controller_pid_start:
    description: The start token (boot id and start time) of O(controller_pid); the action plugin sets it.
    type: str
    default: ''
  take_over_run_id:
    description:
      - Take over the lock when it is still held by this run id (the controller found that run dead). Set by the
        action plugin.
    type: str
    default: ''
  take_over_reason:
    description: Why O(take_over_run_id) is dead, for the warning.
    type: str
    default: ''
  break_lock:
    description:
      - Take over another run's lock whatever its age (C(sglang_service_lock_break)), with a warning naming it.
        For a holder on another controller that is known to be gone.
    type: bool
    default: false
  wait:
    description:
      - Wait on the host for a live holder (up to O(timeout_s)). The action plugin sets V(false), looks at the
        holder on the controller, and waits there.
    type: bool
    default: true
  play:
    description: The play that takes the lock.
    type: str
    default: ''
  timeout_s:
    description: Seconds to wait for another run's lock before failing.
    type: int
    default: 120
  max_age_s:
    description: A lock taken longer ago than this is stale and taken over.
    type: int
    default: 14400
  poll_s:
    description: Seconds between two looks at a held lock.
    type: float
    default: 2.0
"""

EXAMPLES = r"""
- name: Hold the host lock for this deploy
  specdec.sglang.sglang_host_lock:
    path: /opt/sglang/state/host.lock
    run_id: "{{ sglang_host_lock_run_id }}"
    owner: "{{ lookup('ansible.builtin.pipe', 'hostname') }}"
    play: "{{ ansible_play_name }}"
    timeout_s: 120

- name: Release it
  specdec.sglang.sglang_host_lock:
    state: released
    path: /opt/sglang/state/host.lock
    run_id: "{{ sglang_host_lock_run_id }}"
"""

RETURN = r"""
action:
  description:
    - C(acquire), C(ours), C(take_over) (taking), C(refuse) (failed), C(held) (another live holder, O(wait=false)),
      C(released) or C(kept) (releasing).
  returned: always
  type: str
holder:
  description: The lock's record after the task (taking), or the record found (refusing, releasing another's).
  returned: when a lock is held
  type: dict
waited_s:
  description: Seconds waited for another run's lock.
  returned: when taking
  type: float
reason:
  description: The decision in words (the stale holder and why, when taken over).
  returned: always
  type: str
"""

import errno  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock  # noqa: E402

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["acquired", "released"], default="acquired"),
    path=dict(type="path", required=True),
    run_id=dict(type="str", required=True),
    owner=dict(type="str", default=""),
    controller_pid=dict(type="int", default=0),
    controller=dict(type="str", default=""),
    controller_pid_start=dict(type="str", default=""),
    take_over_run_id=dict(type="str", default=""),
    take_over_reason=dict(type="str", default=""),
    break_lock=dict(type="bool", default=False),
    wait=dict(type="bool", default=True),
    play=dict(type="str", default=""),
    timeout_s=dict(type="int", default=120),
    max_age_s=dict(type="int", default=14400),
    poll_s=dict(type="float", default=2.0),
)


def _boot_id():
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(path):
    """(exists, record, mtime) of the lock file."""
    try:
        with open(path) as handle:
            text = handle.read()
            mtime = os.fstat(handle.fileno()).st_mtime
    except FileNotFoundError:
        return False, None, 0.0
    return True, host_lock.parse(text), mtime


def _create(path, record):
    """True when this call created the lock file (atomically), False when one exists."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as handle:
        handle.write(host_lock.dumps(record))
        handle.flush()
        os.fsync(handle.fileno())
    return True


def _take_over(path, record, mine):
    """Replace the lock ``record`` (read before) by ``mine``; False when another run got there first."""
    # Move the stale file aside first: of two runs taking it over, one rename succeeds.
    aside = "%s.stale.%d" % (path, os.getpid())
    try:
        os.rename(path, aside)
    except OSError as exc:
        if exc.errno != errno.ENOENT:
            raise
        return False
    with open(aside) as handle:
        moved = host_lock.parse(handle.read())
    if (moved or {}).get("run_id") != (record or {}).get("run_id"):
        # Another run replaced the lock since it was read: put theirs back, and look again.
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        os.unlink(aside)
        return False
    os.unlink(aside)
    return _create(path, mine)


def _acquire(module, params):
    path = params["path"]
    boot_id = _boot_id()
    start = time.time()
    while True:
        now = time.time()
        waited = now - start
        exists, record, mtime = _read(path)
        action, reason = host_lock.decide(
            record,
            exists=exists,
            run_id=params["run_id"],
            now=now,
            mtime=mtime,
            boot_id=boot_id,
            max_age_s=params["max_age_s"],
            waited_s=waited,
            timeout_s=params["timeout_s"],
            pid_alive=_pid_alive,
            take_over_run_id=params["take_over_run_id"],
            take_over_reason=params["take_over_reason"],
            break_lock=params["break_lock"],
            wait=params["wait"],
        )
        mine = host_lock.make_record(
            params["run_id"],
            owner=params["owner"],
            controller=params["controller"],
            controller_pid=params["controller_pid"],
            controller_pid_start=params["controller_pid_start"],
            play=params["play"],
            started_at=now,
            boot_id=boot_id,
        )
        if action == host_lock.OURS:
            module.exit_json(changed=False, action=action, holder=record, waited_s=waited, reason=reason)
        if action == host_lock.HELD:
            module.exit_json(changed=False, action=action, holder=record, waited_s=waited, reason=reason, now=now)
        if action == host_lock.REFUSE:
            module.fail_json(
                msg="The host lock %s is %s. Another deploy, rollback or stop runs on this host: run again when it"
                " has finished, or raise sglang_service_lock_timeout_s. If that run is gone, run again with"
                " -e sglang_service_lock_break=true after checking, or wait until the lock is older than"
                " sglang_service_lock_max_age_s (%ds)." % (path, reason, params["max_age_s"]),
                action=action,
                holder=record,
                waited_s=waited,
                reason=reason,
                failure_class="host_locked",
            )
        if action == host_lock.TAKE_OVER:
            if _take_over(path, record, mine):
                # Said in the output: the module's warning names the old holder and why.
                module.warn(reason)
                module.exit_json(changed=True, action=action, holder=mine, waited_s=waited, reason=reason)
            continue
        if action == host_lock.ACQUIRE:
            if _create(path, mine):
                module.exit_json(changed=True, action=action, holder=mine, waited_s=waited, reason=reason)
            continue
        time.sleep(min(params["poll_s"], max(0.1, params["timeout_s"] - waited)))


def _release(module, params):
    path = params["path"]
    exists, record, _mtime = _read(path)
    remove, reason = host_lock.release_action(record, exists, params["run_id"])
    if not remove:
        if exists:
            module.warn("%s left in place: %s" % (path, reason))
        module.exit_json(changed=False, action="kept", holder=record, reason=reason)
    if not module.check_mode:
        os.unlink(path)
    module.exit_json(changed=True, action="released", reason=reason)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    params = module.params
    if params["state"] == "released":
        _release(module, params)
    if module.check_mode:
        exists, record, _mtime = _read(params["path"])
        module.exit_json(changed=not exists, action="check", holder=record, waited_s=0.0, reason="check mode")
    directory = os.path.dirname(params["path"])
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, 0o755)
    _acquire(module, params)


if __name__ == "__main__":
    main()
