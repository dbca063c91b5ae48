"""Deploys as transactions on the lab host (issue 23), after every other check of this scenario (file order):

- two deploys started at once onto a stale lock (another run's, taken before the host's last boot): the first
  to reach the host takes it over and says so, the other waits for the host lock, both finish, and the host is
  left in the state of the one that finished last (its environment in the file, in the running process and in
  the record), with no lock left;
- a deploy killed the way ansible-runner cancels an AWX job (SIGKILL to ansible-playbook's process group) while
  readiness waits: none of its processes stays on the controller; the next plain deploy takes its lock over at
  once (said), ends its readiness job on the host and removes its async leftovers, finds the process it
  started (another environment) although every file equals its good copy - drift - and restarts and verifies.
"""

import json
import os
import pathlib
import signal
import time
import uuid

import deploy_process
from deploy_process import finish
from scenario_fixtures import LOCK, main_pid, place_lock, process_env

ROOT = "/opt/sglang"
JOB = ROOT + "/state/readiness.job"
ENV_FILE = "/etc/sglang/sglang.env"


def start(marker, extra=None):
    """A deploy (molecule/shared/deploy_process.py), ``marker`` in its environment, no report, a long lock wait."""
    extra_vars = {"sglang_service_report_dir": "", "sglang_service_lock_timeout_s": 500}
    if marker:
        extra_vars["sglang_service_environment"] = {"SPECDEC_TEST_RUN": marker}
    extra_vars.update(extra or {})
    return deploy_process.start(extra_vars)


def record(lab_host):
    return json.loads(lab_host.file(ROOT + "/state/last_good/deploy.json").content_string)


def controller_processes(marker):
    """Processes on the controller whose command line carries this test's marker (ansible-playbook's workers)."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def describe(pid):
    """A controller process as ps would show it: state, parent, process group, session, command line."""
    try:
        stat = pathlib.Path("/proc/%d/stat" % pid).read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        cmdline = pathlib.Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError as exc:
        return "%d: gone (%s)" % (pid, exc)
    state, ppid, pgrp, session = fields[0], fields[1], fields[2], fields[3]
    return "%d state=%s ppid=%s pgrp=%s session=%s: %s" % (pid, state, ppid, pgrp, session, cmdline[:300])


def test_two_deploys_at_once_onto_a_stale_lock_one_takes_it_over_one_waits_the_last_to_finish_serves(lab_host):
    assert not lab_host.file(LOCK).exists  # the earlier runs released theirs
    place_lock(lab_host, "00000000-not-this-boot")
    first = start("concurrent-a")
    second = start("concurrent-b")
    out_a, out_b = finish(first), finish(second)
    assert first.returncode == 0, out_a[-3000:]
    assert second.returncode == 0, out_b[-3000:]
    # Exactly one took the stale lock over (said, with why); the other found that run's live lock and waited.
    said = ("taking over the stale lock of run otherrun0000", "the host rebooted")
    took_over = [out for out in (out_a, out_b) if all(words in out for words in said)]
    assert len(took_over) == 1, (out_a[-3000:], out_b[-3000:])
    last = "concurrent-a" if first.finished_at > second.finished_at else "concurrent-b"
    # The state is the finished one's: the environment file, the running process, the record's observation.
    assert 'SPECDEC_TEST_RUN="%s"' % last in lab_host.file(ENV_FILE).content_string
    assert process_env(lab_host)["SPECDEC_TEST_RUN"] == last
    observed = record(lab_host)["observed"]
    invocation = lab_host.check_output("systemctl show --property=InvocationID --value sglang.service").strip()
    assert (observed["main_pid"], observed["invocation_id"]) == (main_pid(lab_host), invocation)
    assert not lab_host.file(LOCK).exists


def alive(lab_host, pid):
    return lab_host.run("kill -0 %d" % pid).rc == 0


def test_a_cancelled_deploy_leaves_nothing_running_and_its_drift_is_found_and_healed(lab_host):
    serving = process_env(lab_host).get("SPECDEC_TEST_RUN")  # the inputs of the recorded deploy
    marker = "cancelled-" + uuid.uuid4().hex  # on no other process of this machine (CI runs units side by side)
    slow = start(marker, {"sglang_service_environment": {"SPECDEC_TEST_RUN": marker, "SGLANG_SIM_LOAD_S": "120"}})
    deadline = time.monotonic() + 600
    while not any("Wait for a real generation" in line for line in slow.lines):
        assert slow.poll() is None and time.monotonic() < deadline, "".join(slow.lines)[-3000:]
        time.sleep(0.2)
    deadline = time.monotonic() + 60
    while not lab_host.file(JOB).exists:  # the async readiness job runs on the host
        assert slow.poll() is None and time.monotonic() < deadline, "".join(slow.lines)[-3000:]
        time.sleep(0.5)
    os.killpg(slow.pid, signal.SIGKILL)  # ansible-runner's cancel (AWX)
    finish(slow)
    # Ansible's worker of the readiness wait (its own session) ends with its ansible-playbook.
    deadline = time.monotonic() + 30  # the guard looks once a second; a loaded CI machine is slow to schedule it
    while controller_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = controller_processes(marker)
    assert left == [], [describe(pid) for pid in left]
    lock = json.loads(lab_host.file(LOCK).content_string)  # left behind by the killed run
    assert lock["controller_pid"] == slow.pid
    job = json.loads(lab_host.file(JOB).content_string)
    assert job["jid"] and alive(lab_host, job["pid"])  # its readiness job still runs on the host
    assert process_env(lab_host)["SPECDEC_TEST_RUN"] == marker
    # A later interrupted run put every file back: each equals its good copy, the unit runs another environment.
    lab_host.check_output("cp %s/state/last_good/sglang.env %s" % (ROOT, ENV_FILE))

    started = time.monotonic()
    plain = start(serving)
    out = finish(plain)
    assert plain.returncode == 0, out[-4000:]
    assert time.monotonic() - started < 300  # not the lock's timeout nor the slow start
    # The killed run's controller pid is gone, or (pid_max is 32768 on a busy CI machine) already another
    # process's: host_lock.holder_liveness tells both apart by the pid's start token, and both are dead holders.
    gone = "ansible-playbook process %s on this controller is gone (the run was interrupted)" % slow.pid
    reused = "pid %s on this controller is now another process" % slow.pid
    assert "taking over the lock of run %s" % lock["run_id"] in out and (gone in out or reused in out), out[-4000:]
    assert "a readiness job left by an interrupted run (pid %s" % job["pid"] in out, out[-4000:]
    # Drift is found whether the deploy can read the process's environment (then compared) or not (a lab host's
    # root over SSH without CAP_SYS_PTRACE; then said, and decided on the files and the invocation).
    drift = [line for line in out.splitlines() if "drift: " in line]
    unobserved = [line for line in out.splitlines() if "not observed: the running process's" in line]
    if any("environ" in line for line in unobserved):
        assert any("cannot be read" in line for line in drift), out[-4000:]
    else:
        assert any("the running process's environment is not the recorded one" in line for line in drift), out[-4000:]
    assert "(restarted)" in out
    assert not alive(lab_host, job["pid"])
    assert not lab_host.file(JOB).exists and not lab_host.file(LOCK).exists
    leftovers = lab_host.run("ls %s/%s.* %s" % (job["async_dir"], job["jid"], job["tmpdir"]))
    assert leftovers.rc != 0 and leftovers.stdout.strip() == "", leftovers.stdout
    assert "SGLANG_SIM_LOAD_S" not in process_env(lab_host)
    assert record(lab_host)["observed"]["main_pid"] == main_pid(lab_host)
