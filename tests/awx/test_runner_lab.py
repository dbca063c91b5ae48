"""Jobs run the way AWX runs them: ansible-runner in a private data dir, against one lab host.

awx/runner/awx_job.py writes the private data dir from a job template of awx/templates.yml and the
survey answers (project/, inventory/ as AWX imported it from inventory/hosts.yml, env/extravars,
env/settings, env/envvars with the lab credential's environment, env/cmdline with the template's
limit, verbosity, forks and job type) and runs it with ansible-runner's Python API. Artifacts are
the set_stats data of the playbook_on_stats event, as AWX reads them.

One lab host (podman, systemd as PID 1, the engine simulator as a TEST DOUBLE for sglang) serves
every case, in order: deploy (release A), check mode, a failing deploy (a simulator fault), then
the workflow's next nodes (diagnose with the support bundle, rollback) with the failed deploy's
artifacts, a deploy of release B cancelled while readiness waits, the deploy that recovers, and a
rollback to A chosen in the survey. Each case asserts the job's status, rc and artifacts.
"""

import hashlib
import json
import os
import pathlib
import subprocess
import tarfile
import time

import awx_job
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "specdec-awx-"
HOST = "lab1"
CONTAINER = PREFIX + HOST
ROOT = "/opt/sglang"
UNIT = "sglang.service"
# Host variables set on the AWX inventory for the lab host: a short stability window keeps the
# suite lean (the window itself is tested by molecule).
LAB_HOST_VARS = {"sglang_service_settle_s": 2}
# The lab host is reached over SSH as the SCM source says (inventory/group_vars/lab: the container's sshd
# through podman exec), as AWX imports it; tests/ee reaches one over the network, inside the execution environment.
# Release B: the same inputs with another path to the same Python, so a new release id.
RELEASE_B_VARS = {"sglang_runtime_python_interpreter": "/usr/bin/python3.11"}
FAST_ENV = {"SGLANG_SIM_LOAD_S": "1.0", "SGLANG_SIM_WARMUP_S": "0.5"}


def lab_env():
    env = dict(os.environ)
    env.update(
        CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"),
        SPECDEC_LAB_PREFIX=PREFIX,
        SPECDEC_REPO=str(REPO),
        ANSIBLE_NOCOLOR="1",
    )
    return env


def sh(argv, timeout=600, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=lab_env(), check=False, cwd=REPO)
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"expected {argv} to succeed, it exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def on_host(script, check=True):
    return sh(["podman", "exec", CONTAINER, "sh", "-c", script], timeout=120, check=check)


def host_state():
    """What a job could change on the host: the switch, the unit, its files, the record, the releases."""
    out = on_host(
        f"readlink {ROOT}/current; systemctl show -p ActiveState -p MainPID -p InvocationID {UNIT}; "
        f"sha256sum /etc/systemd/system/{UNIT} /etc/sglang/sglang.env {ROOT}/state/last_good/* 2>/dev/null; "
        f"ls {ROOT}/releases",
    ).stdout
    return out.splitlines()


def last_good_release():
    return json.loads(on_host(f"cat {ROOT}/state/last_good/deploy.json").stdout)["release_id"]


def generate():
    """A real generation against the service, from inside the host (what readiness proves)."""
    script = (
        "import json, urllib.request; "
        "req = urllib.request.Request('http://127.0.0.1:30000/generate', method='POST', "
        "data=json.dumps({'text': 'Say hi.', 'sampling_params': {'max_new_tokens': 4}}).encode(), "
        "headers={'Content-Type': 'application/json', 'Authorization': 'Bearer lab-only-not-a-secret'}); "
        "print(json.load(urllib.request.urlopen(req, timeout=10))['meta_info']['completion_tokens'])"
    )
    return int(on_host(f'python3 -c "{script}"').stdout.strip())


class Lab:
    """The shared lab host and a counter for private data dirs."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.jobs = 0
        self.release = {}
        self.cancelled_job = None  # the readiness job a cancelled deploy left on the host
        # One checkout for every job (AWX syncs the project per job; a snapshot keeps the cases on
        # the same code while the working tree may change).
        self.project = tmp / "project"
        awx_job.copy_project(self.project)

    def job(self, template, *, answers=None, launch=None, host_vars=None, cancel_on=None, workflow=None):
        self.jobs += 1
        launch = {"limit": HOST, **(launch or {})}
        pdd = awx_job.build_private_data_dir(
            self.tmp / f"job{self.jobs}",
            awx_job.job_template(template),
            answers=answers or {},
            launch=launch,
            envvars={"SPECDEC_LAB_PREFIX": PREFIX, "SPECDEC_REPO": str(REPO), **lab_env_subset()},
            host_vars={HOST: {**LAB_HOST_VARS, **(host_vars or {})}},
            job_timeout=1500,
            job_id=self.jobs,
            workflow=workflow,
            project=self.project,
        )
        assert pdd.errors == []
        state = {"cancel": False, "running": None}

        def on_event(event):
            # Cancel once the task's async job runs on the host and has been polled: the first poll event
            # after that task started (a poll event names the async_status task, not the one polled).
            if event.get("event") == "runner_on_start":
                state["running"] = event.get("event_data", {}).get("resolved_action")
            if cancel_on and event.get("event") == "runner_on_async_poll" and state["running"] == cancel_on:
                state["cancel"] = True

        return awx_job.run_job(pdd, event_handler=on_event, cancel_callback=lambda: state["cancel"])


def lab_env_subset():
    return {"CONTAINERS_CONF": str(REPO / "lab" / "containers.conf")}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    lab_bin = str(REPO / "lab" / "bin" / "lab")
    sh([lab_bin, "down"], timeout=120, check=False)
    sh([lab_bin, "up", "1"], timeout=900)
    try:
        sh(["ansible-playbook", "lab/playbooks/lab.yml", "-l", HOST], timeout=900)
        yield Lab(tmp_path_factory.mktemp("awx-jobs"))
    finally:
        sh([lab_bin, "down"], timeout=120, check=False)


def stats(result):
    return result.artifacts["sglang_deploy"][HOST]


def test_deploy_succeeds(lab):
    result = lab.job(
        "sglang deploy",
        answers={"sglang_deploy_serial": 1, "sglang_service_speculative_algorithm": "DFLASH"},
    )
    assert (result.status, result.rc) == ("successful", 0), result.stdout[-3000:]
    deploy = stats(result)
    assert deploy["ok"] is True
    assert deploy["release_id"] == last_good_release()
    # the real sglang wheel of the runtime role's default version (the lab inventory installs that one)
    defaults = yaml.safe_load((REPO / "roles/sglang_runtime/defaults/main.yml").read_text())
    assert deploy["versions"]["sglang"] == defaults["sglang_runtime_sglang_version"]
    assert deploy["versions"]["torch"].startswith("2.11.0")
    assert deploy["gpus"] == []  # the lab has no GPU; the key is there for AWX
    assert deploy["envelope"] == "full"  # the survey's default ladder, rendered into the role's list
    assert deploy["speculative_algorithm"] == "DFLASH"
    assert 0 < deploy["time_to_ready_s"] < 120
    assert 0 < deploy["probe_latency_s"] < 10
    assert deploy["probe_tokens_per_s"] > 0
    assert deploy["spec_accept_length"] >= 1
    assert [a["envelope"] for a in result.artifacts["sglang_deploy_attempts"][HOST]] == ["full"]
    # the fleet summary (last play of playbooks/deploy.yml, json_query over the reports) as AWX reads it
    fleet = result.artifacts["sglang_deploy_fleet"]
    assert fleet["hosts_by_release"] == {deploy["release_id"]: [HOST]}
    assert (fleet["hosts_ok"], fleet["hosts_failed"], fleet["failed"]) == (1, 0, [])
    assert fleet["slowest_time_to_ready"] == {
        "host": HOST,
        "release_id": deploy["release_id"],
        "time_to_ready_s": deploy["time_to_ready_s"],
    }
    assert fleet["lowest_accept_length"]["spec_accept_length"] == deploy["spec_accept_length"]
    assert generate() > 0
    lab.release["A"] = deploy["release_id"]


def test_check_mode_changes_nothing(lab):
    before = host_state()
    result = lab.job(
        "sglang deploy",
        answers={"specdec_awx_envelope_ladder": "full,small"},
        launch={"job_type": "check"},
        host_vars={"sglang_service_environment": {**FAST_ENV, "SGLANG_SIM_FAULT": "crash_on_start"}},
    )
    cmdline = (result.private_data_dir / "env" / "cmdline").read_text()
    assert "--check" in cmdline.split()
    assert result.status in ("successful", "failed")
    assert host_state() == before
    assert generate() > 0
    assert (result.status, result.rc) == ("successful", 0), [r.get("msg") for r in result.failed_results()]


def test_deploy_fails_with_a_simulator_fault_and_says_why(lab):
    result = lab.job(
        "sglang deploy",
        host_vars={"sglang_service_environment": {**FAST_ENV, "SGLANG_SIM_FAULT": "crash_on_start"}},
    )
    assert result.status == "failed"
    assert result.rc == 2
    deploy = stats(result)
    assert deploy["ok"] is False
    assert deploy["failure_class"] in ("crashed_on_start", "restart_loop")
    assert deploy["cause_class"] == "crashed_on_start"
    assert deploy["hint"]
    assert deploy["exception_line"], "the exception line of the traceback the server logged"
    # The job's stdout events carry the same diagnosis: AWX shows them on the failed task.
    messages = "\n".join(str(r.get("msg", "")) for r in result.failed_results())
    assert deploy["failure_class"] in messages
    assert deploy["hint"] in messages
    assert deploy["exception_line"] in messages
    # The last good release (A) serves again.
    assert deploy["rollback"]["ready"] is True
    assert last_good_release() == lab.release["A"]
    assert on_host(f"readlink {ROOT}/current").stdout.strip().endswith(lab.release["A"])
    assert generate() > 0
    lab.failed = result


def workflow_after(*jobs):
    """AWX's workflow node launch: the artifacts of the jobs before it, and the workflow's variables."""
    artifacts = {}
    for job in jobs:
        artifacts.update(job.artifacts)
    return {"id": 900, "name": "sglang deploy with diagnosis", "artifacts": artifacts}


def test_workflow_diagnose_fetches_the_support_bundle_of_the_failed_deploy(lab):
    result = lab.job("sglang diagnose", workflow=workflow_after(lab.failed))
    assert (result.status, result.rc) == ("successful", 0), result.stdout[-3000:]
    bundles = sorted((result.private_data_dir / "project" / "diagnostics").glob(f"{HOST}-*.tar.gz"))
    assert len(bundles) == 1
    with tarfile.open(bundles[0]) as tar:
        names = {pathlib.PurePosixPath(n).name for n in tar.getnames()}
        journal = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("journal.log"))).read()
    assert {"unit.service", "journal.log", "environment.redacted", "releases.txt"} <= names
    # The journal of the last starts holds the failed start's exception; no secret leaves the host.
    assert lab.failed.artifacts["sglang_deploy"][HOST]["exception_line"].encode() in journal
    assert b"lab-only-not-a-secret" not in journal
    said = [e["stdout"] for e in result.events if "support bundle of lab1" in e.get("stdout", "")]
    assert said, "the job's stdout says where the bundle is"
    published = result.artifacts["sglang_diagnose"][HOST]
    assert pathlib.Path(published["bundle"]).resolve() == bundles[0].resolve()
    assert published["sha1"] == hashlib.sha1(bundles[0].read_bytes()).hexdigest()  # fetch's checksum is sha1
    lab.diagnosed = result


def test_workflow_rollback_verifies_the_restored_release_and_steps_no_further(lab):
    """The deploy restored A itself; the workflow's Rollback node re-verifies A. With only A on disk,
    stepping back once more (the rollback template's meaning by hand) would have nowhere to go."""
    result = lab.job("sglang rollback", workflow=workflow_after(lab.failed, lab.diagnosed))
    assert "\nawx_workflow_job_id: 900\n" in result.private_data_dir.joinpath("env", "extravars").read_text()
    assert (result.status, result.rc) == ("successful", 0), [r.get("msg") for r in result.failed_results()]
    deploy = stats(result)
    assert deploy["ok"] is True
    assert deploy["release_id"] == lab.release["A"]
    assert deploy["probe_completion_tokens"] > 0
    assert last_good_release() == lab.release["A"]
    assert on_host(f"readlink {ROOT}/current").stdout.strip().endswith(lab.release["A"])
    assert generate() > 0


def test_cancel_while_readiness_waits_leaves_the_host_consistent(lab):
    slow = {"sglang_service_environment": {"SGLANG_SIM_LOAD_S": "90", "SGLANG_SIM_WARMUP_S": "0.5"}}
    result = lab.job("sglang deploy", host_vars={**RELEASE_B_VARS, **slow}, cancel_on="specdec.sglang.sglang_readiness")
    assert (result.status, result.rc) == ("canceled", 254)
    assert result.artifacts == {}, "a cancelled job publishes no statistics"
    started = [e for e in result.events if e.get("event") == "runner_on_start"]
    assert started[-1]["event_data"]["resolved_action"] == "specdec.sglang.sglang_readiness"
    # Consistent: release B is complete on disk and switched to, but never recorded as good;
    # the record still names A, so the next deploy restarts and verifies B, or a rollback returns to A.
    assert last_good_release() == lab.release["A"]
    current = on_host(f"readlink {ROOT}/current").stdout.strip()
    assert not current.endswith(lab.release["A"])
    lab.release["B"] = pathlib.PurePosixPath(current).name
    assert on_host(f"test -f {ROOT}/releases/{lab.release['B']}/.complete", check=False).returncode == 0
    # The cancel SIGKILLs ansible-playbook's process group; its worker polling the readiness wait (its own
    # session) ends with it instead of polling for the whole async budget (it was left for 40+ minutes).
    left = controller_processes_of(result.private_data_dir, within_s=30)
    assert left == [], ps(left)
    # The readiness job still runs on the host, recorded there: the next run reaps it.
    job = json.loads(on_host(f"cat {ROOT}/state/readiness.job").stdout)
    lab.cancelled_job = job
    assert on_host(f"kill -0 {job['pid']}", check=False).returncode == 0


def ps(pids):
    """What ps says of these processes (state, parent, group, session, age, command)."""
    argv = ["ps", "-o", "pid,ppid,pgid,sid,stat,etime,args", "-p", ",".join(map(str, pids))]
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


def controller_processes_of(private_data_dir, within_s):
    """Processes on this machine whose command line names the job's private data dir, after up to ``within_s``."""
    marker = str(private_data_dir).encode()
    deadline = time.monotonic() + within_s
    while True:
        found = []
        for entry in pathlib.Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and marker in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_next_deploy_recovers_after_the_cancel(lab):
    started = time.monotonic()
    result = lab.job("sglang deploy", host_vars=RELEASE_B_VARS)
    assert (result.status, result.rc) == ("successful", 0), result.stdout[-3000:]
    # The cancelled run's lock is taken over at once (its ansible-playbook is gone): a wait for it would have
    # ended in a refusal after sglang_service_lock_timeout_s (120 s), not in a deploy. Its readiness job on
    # the host is ended. The time is a regression bound for the whole deploy (124 s measured on a loaded
    # 2-core machine), not a speed claim.
    assert "is gone (the run was interrupted)" in " ".join(result.stdout.split())
    assert time.monotonic() - started < 400
    job = lab.cancelled_job  # the cancel test's (these cases run in order on one lab host)
    assert job is not None, "the cancel test did not run before"
    assert on_host(f"kill -0 {job['pid']}", check=False).returncode != 0
    assert on_host(f"test -e {ROOT}/state/readiness.job", check=False).returncode != 0
    # and its async leftovers (the job's status files, its module's temporary directory) are removed
    leftovers = on_host(f"ls {job['async_dir']}/{job['jid']}.* {job['tmpdir']}", check=False)
    assert leftovers.returncode != 0 and leftovers.stdout.strip() == "", leftovers.stdout
    deploy = stats(result)
    assert deploy["release_id"] == lab.release["B"]
    assert deploy["previous_release_id"] == lab.release["A"]
    assert last_good_release() == lab.release["B"]
    assert generate() > 0


def test_rollback_to_the_release_chosen_in_the_survey(lab):
    result = lab.job("sglang rollback", answers={"sglang_rollback_release": lab.release["A"]})
    assert (result.status, result.rc) == ("successful", 0), result.stdout[-3000:]
    deploy = stats(result)
    assert deploy["release_id"] == lab.release["A"]
    assert deploy["probe_tokens_per_s"] > 0
    assert last_good_release() == lab.release["A"]
    assert on_host(f"readlink {ROOT}/current").stdout.strip().endswith(lab.release["A"])
    assert generate() > 0
