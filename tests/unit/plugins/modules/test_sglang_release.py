"""The sglang_release_* modules: each operation through its real module entry point, on a release tree in tmp_path."""

import json
import os
import time
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.specdec.sglang.plugins.module_utils._release import release_steps
from ansible_collections.specdec.sglang.plugins.modules import (
    sglang_release_judge,
    sglang_release_observe,
    sglang_release_plan,
    sglang_release_reap,
    sglang_release_record,
    sglang_release_report,
    sglang_release_restart,
    sglang_release_rollback,
    sglang_release_target,
)
from support.module_run import run_main, set_module_args

MODULES = {
    module.OPERATION: module
    for module in (
        sglang_release_plan,
        sglang_release_restart,
        sglang_release_judge,
        sglang_release_rollback,
        sglang_release_observe,
        sglang_release_record,
        sglang_release_report,
        sglang_release_target,
        sglang_release_reap,
    )
}
ENVELOPES = {"full": {"mem_fraction_static": 0.88}, "small": {"mem_fraction_static": 0.95}}
V1 = {
    "release_id": "r1",
    "previous_release_id": "r0",
    "unit": "sglang",
    "envelope": "small",
    "ladder": ["full", "small"],
    "envelopes": ENVELOPES,
    "base_url": "http://127.0.0.1:30000",
    "speculative_algorithm": "DFLASH",
    "served_model_name": "",
}


@pytest.fixture
def tree(tmp_path):
    """A host: <root>/releases/r0..r2 (r0 oldest, each complete), <root>/current -> r1, live files in etc/."""
    root = tmp_path / "opt"
    for age, name in enumerate(["r0", "r1", "r2"]):
        path = root / "releases" / name / "venv" / "bin"
        path.mkdir(parents=True)
        (path / "sglang").write_text("#!/bin/sh\n")
        (root / "releases" / name / ".complete").write_text(name + "\n")
        os.utime(root / "releases" / name, (1000 + age, 1000 + age))
    (root / "state" / "last_good").mkdir(parents=True)
    os.symlink(str(root / "releases" / "r1"), str(root / "current"))
    etc = tmp_path / "etc"
    etc.mkdir()
    files = {}
    for role, name in (("unit", "sglang.service"), ("env", "sglang.env"), ("config", "sglang.yaml")):
        (etc / name).write_text("live %s\n" % role)
        files[role] = str(etc / name)
    return {"root": root, "state": root / "state" / "last_good", "files": files}


def good_deploy(tree, record=V1):
    """The state a good deploy of r1 leaves: the record and copies equal to the live files."""
    (tree["state"] / "deploy.json").write_text(json.dumps(record))
    for path in tree["files"].values():
        (tree["state"] / os.path.basename(path)).write_text(open(path).read())


def run(
    monkeypatch,
    capsys,
    tree,
    *,
    active="active",
    check_mode=False,
    unit=None,
    journal=(),
    process=None,
    started=None,
    own_tmp="",
    step,
    **params,
):
    args = {
        "runtime_root": str(tree["root"]),
        "release_id": "r2",
        "ladder": ["full", "small"],
        "envelopes": ENVELOPES,
        "files": tree["files"],
        "_ansible_check_mode": check_mode,
        **params,
    }
    set_module_args(monkeypatch, args)
    commands = []

    props = {"ActiveState": active, "MainPID": "0", "InvocationID": "", "NRestarts": "0", **(unit or {})}

    def run_command(self, argv, **kwargs):
        commands.append(argv)
        if argv[0] == "journalctl":
            return 0, "".join(json.dumps(entry) + "\n" for entry in journal), ""
        if argv[:2] == ["systemctl", "show"] and argv[3].startswith("--property=") and "," in argv[3]:
            wanted = argv[3].split("=", 1)[1].split(",")
            return 0, "".join("%s=%s\n" % (key, props.get(key, "")) for key in wanted), ""
        return 0, active + "\n", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    # The running process as /proc would show it: (argv, resolved paths, environ, unreadable) by pid, its start.
    monkeypatch.setattr(release_steps.Host, "process", lambda self, pid: (process or {}).get(pid))
    monkeypatch.setattr(release_steps.Host, "started_at", lambda self, pid, monotonic_us=None: started)
    # Ansible's async results and temporary directories of this "host": under the tree, never the runner's home.
    monkeypatch.setattr(release_steps.Host, "async_dir", lambda self: str(tree["root"] / "home" / ".ansible_async"))
    monkeypatch.setattr(release_steps.Host, "remote_tmp", lambda self: str(tree["root"] / "home" / ".ansible" / "tmp"))
    monkeypatch.setattr(release_steps.Host, "own_tmp_dir", lambda self: own_tmp)
    out = run_main(MODULES[step].main, capsys)
    out["_commands"] = commands
    return out


# -- plan -----------------------------------------------------------------------------------------
def test_plan_of_a_first_deploy_starts_at_the_head_of_the_ladder(monkeypatch, capsys, tree):
    out = run(monkeypatch, capsys, tree, step="plan")
    assert out["changed"] is False
    assert (out["record"], out["previous_release_id"]) == (None, "")
    assert (out["first_envelope"], out["to_try"]) == ("full", ["full", "small"])


def test_plan_migrates_a_v1_record_and_resumes_at_its_envelope(monkeypatch, capsys, tree):
    good_deploy(tree)
    out = run(monkeypatch, capsys, tree, step="plan", release_id="r1")
    assert out["record"]["schema"] == 2
    assert out["previous_release_id"] == "r1"
    assert (out["first_envelope_index"], out["to_try"]) == (1, ["small"])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"release_id": ""}, "release_id='': expected the id of a release under"),
        ({"release_id": "../etc"}, "release_id='../etc'"),
        ({"ladder": ["full", "huge"]}, "every name must be a key of envelopes ['full', 'small']"),
        ({"ladder": []}, "every name must be a key of envelopes"),
    ],
)
def test_plan_refuses_bad_inputs(monkeypatch, capsys, tree, params, message):
    out = run(monkeypatch, capsys, tree, step="plan", **params)
    assert out["failed"] is True
    assert message in out["msg"]


def test_plan_fails_on_an_unreadable_record(monkeypatch, capsys, tree):
    (tree["state"] / "deploy.json").write_text("{broken")
    out = run(monkeypatch, capsys, tree, step="plan")
    assert out["failed"] is True
    assert "deploy.json is not JSON" in out["msg"]


# -- restart --------------------------------------------------------------------------------------
SETTINGS = ("ExecStart", "Environment", "EnvironmentFiles")


def test_restart_is_not_needed_when_the_recorded_deploy_runs(monkeypatch, capsys, tree):
    good_deploy(tree)
    launcher = str(tree["root"] / "releases" / "r1" / "venv" / "bin" / "sglang")
    out = run(monkeypatch, capsys, tree, step="restart", release_id="r1", launcher=launcher)
    assert (out["restart"], out["reasons"]) == (False, [])
    show = "--property=" + ",".join(
        ("ActiveState", "MainPID", "InvocationID", "NRestarts", "ExecMainStartTimestampMonotonic", *SETTINGS)
    )
    assert out["_commands"] == [["systemctl", "show", "sglang.service", show]]  # no record time: no journal


def test_restart_is_needed_when_a_file_changed_or_the_service_is_down(monkeypatch, capsys, tree):
    good_deploy(tree)
    with open(tree["files"]["config"], "a") as handle:
        handle.write("api-key: new\n")
    out = run(monkeypatch, capsys, tree, step="restart", release_id="r1", active="failed")
    assert out["restart"] is True
    assert out["reasons"] == ["service is failed", "config file differs from the last good copy"]


def test_restart_fails_when_the_release_has_no_launcher(monkeypatch, capsys, tree):
    missing = str(tree["root"] / "releases" / "r2" / "venv" / "bin" / "python")
    out = run(monkeypatch, capsys, tree, step="restart", launcher=missing)
    assert out["failed"] is True
    assert "venv/bin/python is missing: release r2 was not built" in out["msg"]


# -- judge ----------------------------------------------------------------------------------------
def test_judge_appends_the_attempt_and_names_the_next_envelope(monkeypatch, capsys, tree):
    readiness = {"ready": False, "failure_class": "restart_loop", "cause_class": "oom_mem_fraction"}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="judge",
        envelope="full",
        readiness=readiness,
        attempts=[],
        restarted=True,
        started_at=100.0,
    )
    assert (out["outcome"], out["next_envelope"]) == ("next_envelope", "small")
    assert [a["envelope"] for a in out["attempts"]] == ["full"]
    assert out["attempt"]["start_to_verdict_s"] is None  # no verdict time on the host's clock: no duration
    assert out["attempt"]["settings"] == ENVELOPES["full"]


def test_judge_of_the_last_envelope_fails(monkeypatch, capsys, tree):
    readiness = {"ready": False, "failure_class": "oom_mem_fraction"}
    out = run(monkeypatch, capsys, tree, step="judge", envelope="small", readiness=readiness, attempts=[{"x": 1}])
    assert (out["outcome"], out["next_envelope"]) == ("failed", "")
    assert len(out["attempts"]) == 2


# -- rollback -------------------------------------------------------------------------------------
def test_rollback_restores_the_good_files_and_points_current_back(monkeypatch, capsys, tree):
    good_deploy(tree)
    for path in tree["files"].values():
        with open(path, "w") as handle:
            handle.write("failed release\n")
    os.unlink(str(tree["root"] / "current"))
    os.symlink(str(tree["root"] / "releases" / "r2"), str(tree["root"] / "current"))
    out = run(monkeypatch, capsys, tree, step="rollback")
    assert (out["changed"], out["restored"], out["target"]) == (True, True, "r1")
    assert os.readlink(str(tree["root"] / "current")) == str(tree["root"] / "releases" / "r1")
    for role, path in tree["files"].items():
        assert open(path).read() == "live %s\n" % role
    assert oct(os.stat(tree["files"]["env"]).st_mode & 0o777) == "0o600"
    assert oct(os.stat(tree["files"]["unit"]).st_mode & 0o777) == "0o644"


def test_rollback_in_check_mode_changes_nothing(monkeypatch, capsys, tree):
    good_deploy(tree)
    with open(tree["files"]["unit"], "w") as handle:
        handle.write("failed release\n")
    out = run(monkeypatch, capsys, tree, step="rollback", check_mode=True)
    assert (out["changed"], out["restored"]) == (True, True)
    assert open(tree["files"]["unit"]).read() == "failed release\n"


def test_rollback_after_a_first_deploy_restores_nothing(monkeypatch, capsys, tree):
    out = run(monkeypatch, capsys, tree, step="rollback")
    assert (out["changed"], out["restored"], out["target"]) == (False, False, "")


def test_rollback_to_a_release_gone_from_disk_restores_nothing(monkeypatch, capsys, tree):
    good_deploy(tree, dict(V1, release_id="r9"))
    out = run(monkeypatch, capsys, tree, step="rollback")
    assert (out["restored"], out["target"], out["on_disk"]) == (False, "r9", False)


# -- record ---------------------------------------------------------------------------------------
def test_record_writes_the_current_schema_copies_the_files_and_prunes(monkeypatch, capsys, tree):
    good_deploy(tree)
    readiness = {"ready": True, "settle": {"ok": True, "stayed_up_s": 30.1}}
    fields = {"base_url": "http://127.0.0.1:30000", "speculative_algorithm": "DFLASH", "bogus": 1}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="record",
        envelope="full",
        readiness=readiness,
        keep_releases=1,
        fields=fields,
    )
    assert out["changed"] is True
    written = json.loads((tree["state"] / "deploy.json").read_text())
    assert written == out["record"]
    assert (written["schema"], written["release_id"], written["previous_release_id"]) == (2, "r2", "r1")
    assert written["settle"] == readiness["settle"]
    assert "bogus" not in written
    assert oct(os.stat(tree["state"] / "deploy.json").st_mode & 0o777) == "0o600"
    # r2 (new), r1 (its previous) and r1 again (the good one before) are protected; r0 goes.
    assert out["pruned"] == ["r0"]
    assert sorted(os.listdir(tree["root"] / "releases")) == ["r1", "r2"]


def test_record_in_check_mode_writes_nothing(monkeypatch, capsys, tree):
    out = run(monkeypatch, capsys, tree, step="record", envelope="full", keep_releases=1, check_mode=True)
    assert out["pruned"] == ["r1", "r0"]
    assert not (tree["state"] / "deploy.json").exists()
    assert sorted(os.listdir(tree["root"] / "releases")) == ["r0", "r1", "r2"]


# -- report and target ----------------------------------------------------------------------------
def test_report_of_a_failure_carries_the_exception_line_into_the_message(monkeypatch, capsys, tree):
    readiness = {
        "ready": False,
        "failure_class": "crashed_on_start",
        "traceback": "Traceback (most recent call last):\nValueError: bad",
        "exception_line": "ValueError: bad",
    }
    attempt = {"envelope": "full", "failure_class": "crashed_on_start", "cause_class": "crashed_on_start"}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="report",
        outcome="failed",
        host="lab1",
        readiness=readiness,
        attempts=[attempt],
        rollback_target="",
    )
    assert out["report"]["exception_line"] == "ValueError: bad"
    assert "exception: ValueError: bad" in out["text"]
    assert out["text"][-1] == "ValueError: bad"
    assert "attempts" not in out["stats"]


def test_report_of_a_success_is_the_summary(monkeypatch, capsys, tree):
    readiness = {"ready": True, "probe": {"completion_tokens": 16}, "server": {"version": "0.5.23"}}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="report",
        host="lab1",
        envelope="full",
        readiness=readiness,
        attempts=[{"envelope": "full"}],
        restarted=True,
        fields={"previous_release_id": "r1"},
    )
    assert out["report"]["ok"] is True
    assert out["report"]["previous_release_id"] == "r1"
    assert out["text"][0] == "sglang.service on lab1 serves release r2 (restarted)"


def test_report_says_when_the_previous_servers_drain_was_cut_by_the_stop_timeout(monkeypatch, capsys, tree):
    readiness = {"ready": True, "probe": {"completion_tokens": 16}, "server": {"version": "0.5.23"}}
    common = dict(step="report", host="lab1", envelope="full", readiness=readiness, attempts=[{"envelope": "full"}])
    out = run(monkeypatch, capsys, tree, restarted=True, fields={"stop_result": "timeout"}, **common)
    assert out["report"]["stop_result"] == "timeout"
    assert any("stop_result: timeout" in line and "SIGKILLed" in line for line in out["text"])
    clean = run(monkeypatch, capsys, tree, restarted=True, fields={"stop_result": "success"}, **common)
    assert clean["report"]["stop_result"] == "success"
    assert not any("stop_result" in line for line in clean["text"])


def test_target_is_the_previous_good_release(monkeypatch, capsys, tree):
    good_deploy(tree)
    out = run(monkeypatch, capsys, tree, step="target")
    assert (out["target"], out["serving"]) == ("r0", "r1")


def test_target_refuses_a_release_not_on_disk_listing_the_newest_first(monkeypatch, capsys, tree):
    good_deploy(tree)
    out = run(monkeypatch, capsys, tree, step="target", rollback_release="r7")
    assert out["failed"] is True
    assert "release 'r7' is not on disk. Releases on disk, newest first: r2, r1, r0." in out["msg"]


def test_target_refuses_an_incomplete_release_naming_the_complete_ones(monkeypatch, capsys, tree):
    good_deploy(tree)
    (tree["root"] / "releases" / "r2" / ".complete").unlink()
    out = run(monkeypatch, capsys, tree, step="target", rollback_release="r2")
    assert out["failed"] is True
    assert "release 'r2' is incomplete: it has no .complete" in out["msg"]
    assert "Complete releases, newest first: r1, r0." in out["msg"]


def test_judge_times_the_start_to_the_hosts_verdict_not_to_ansibles_return(monkeypatch, capsys, tree):
    readiness = {"ready": False, "failure_class": "crashed_on_start", "verdict_epoch": 103.04}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="judge",
        envelope="full",
        readiness=readiness,
        restarted=True,
        started_at=100.0,
    )
    assert out["attempt"]["start_to_verdict_s"] == 3.0


# -- drift, crashes since the record, a failed record, reaping (issue 23) -----------------------------
ENV = {"HOME": "/var/lib/sglang", "INVOCATION_ID": "inv-a"}


def running(tree, environ=ENV, release_id="r1"):
    argv = [str(tree["root"] / "releases" / release_id / "venv" / "bin" / "python3"), "sglang", "serve"]
    return {41: (argv, [], environ, {})}


def recorded_deploy(monkeypatch, capsys, tree):
    """A good deploy of r1 through the record step: the record holds the process it verified."""
    good_deploy(tree)
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="record",
        release_id="r1",
        envelope="small",
        unit={"MainPID": "41", "InvocationID": "inv-a"},
        process=running(tree),
    )
    assert out["changed"] and out["record"]["observed"]["release"] == "r1"
    return out["record"]


def test_the_running_process_of_the_record_is_left_running(monkeypatch, capsys, tree):
    recorded_deploy(monkeypatch, capsys, tree)
    launcher = str(tree["root"] / "releases" / "r1" / "venv" / "bin" / "sglang")
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="restart",
        release_id="r1",
        launcher=launcher,
        unit={"MainPID": "41", "InvocationID": "inv-a"},
        process=running(tree),
    )
    assert (out["restart"], out["drift"], out["restarts_since_record"]) == (False, [], None)


def test_drift_is_found_on_the_main_pid(monkeypatch, capsys, tree):
    recorded_deploy(monkeypatch, capsys, tree)
    other = {77: running(tree, environ={**ENV, "SGLANG_SIM_LOAD_S": "90", "INVOCATION_ID": "inv-x"})[41]}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="restart",
        release_id="r1",
        unit={"MainPID": "77", "InvocationID": "inv-x"},
        process=other,
    )
    assert out["restart"] is True
    assert out["drift"] == [
        "the running process's environment is not the recorded one",
        "started as invocation inv-x, not the verified inv-a",
    ]
    assert out["reasons"] == ["drift: " + reason for reason in out["drift"]]
    assert out["observed"]["invocation_id"] == "inv-x"


def test_a_crash_since_the_record_is_read_from_the_journal(monkeypatch, capsys, tree):
    recorded_deploy(monkeypatch, capsys, tree)
    journal = [
        {"_SYSTEMD_INVOCATION_ID": "inv-a", "MESSAGE": "RuntimeError: boom"},
        {"INVOCATION_ID": "inv-a", "MESSAGE": "sglang.service: Main process exited, code=killed, status=9/KILL"},
    ]
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="restart",
        release_id="r1",
        unit={"MainPID": "42", "InvocationID": "inv-b", "NRestarts": "1"},
        process={42: running(tree)[41]},
        journal=journal,
    )
    assert out["drift"] == []  # the same deploy, restarted by systemd: stated, not drift
    found = out["restarts_since_record"]
    assert (found["n_restarts"], found["last_exit_lines"]) == (1, ["RuntimeError: boom"])
    assert "status=9/KILL" in found["last_exit"]
    assert out["_commands"][-1][:6] == ["journalctl", "--no-pager", "-o", "json", "-u", "sglang.service"]


def test_a_full_disk_at_the_record_changes_nothing_and_leaves_no_temp_file(monkeypatch, capsys, tree):
    good_deploy(tree)
    before = {path.name: path.read_bytes() for path in tree["state"].iterdir()}
    for path in tree["files"].values():
        with open(path, "a") as handle:
            handle.write("new\n")
    real = release_steps.shutil.copyfile
    copies = []

    def copyfile(src, dest):
        copies.append(dest)
        if len(copies) == 2:  # the second good copy meets a full disk
            with open(dest, "w") as handle:
                handle.write("part")
            raise OSError(28, "No space left on device", src, None, dest)  # as shutil's sendfile copy says it
        return real(src, dest)

    monkeypatch.setattr(release_steps.shutil, "copyfile", copyfile)
    out = run(monkeypatch, capsys, tree, step="record", release_id="r2", envelope="full")
    assert out["failed"] is True
    assert out["record_error"]["errno"] == "ENOSPC" and out["record_error"]["free_bytes"] > 0
    assert out["record_error"]["path"] == copies[1]  # the file it could not write, not the one it read
    assert "no space left to record the release in" in out["msg"]
    after = {path.name: path.read_bytes() for path in tree["state"].iterdir()}
    assert after == before  # no temp file, no partial copy, the record unchanged


def test_judge_turns_a_failed_record_into_a_failed_attempt(monkeypatch, capsys, tree):
    ready = {"envelope": "full", "ready": True, "failure_class": "", "phase": "ready"}
    error = {"errno": "ENOSPC", "strerror": "No space left on device", "path": "/x", "free_bytes": 0}
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="judge",
        envelope="full",
        readiness={"ready": True},
        attempts=[ready],
        record_error=error,
    )
    assert out["outcome"] == "failed" and len(out["attempts"]) == 1
    assert (out["attempt"]["failure_class"], out["attempt"]["phase"]) == ("record_failed", "record")


def test_reap_ends_a_live_readiness_job_by_its_group_and_removes_its_leftovers(monkeypatch, capsys, tree, tmp_path):
    import subprocess  # noqa: PLC0415
    import time  # noqa: PLC0415

    job = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        async_dir, tmpdir = tmp_path / "async", tmp_path / "ansible-tmp-1-2"
        async_dir.mkdir()
        tmpdir.mkdir()
        (async_dir / "j9.123").write_text('{"started": 1, "finished": 0}')
        (async_dir / "other.1").write_text("{}")
        stat = open("/proc/%d/stat" % job.pid).read()
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
        record = {
            "pid": job.pid,
            "start": release_steps.host_lock.process_start_token(boot, stat),
            "pgid": job.pid,
            "jid": "j9",
            "async_dir": str(async_dir),
            "tmpdir": str(tmpdir),
        }
        job_file = tree["root"] / "state" / "readiness.job"
        job_file.write_text(json.dumps(record))
        out = run(monkeypatch, capsys, tree, step="reap", job_file=str(job_file))
        assert out["reaped"] is True and out["changed"] is True
        deadline = time.monotonic() + 5
        while job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert job.returncode == -15  # SIGTERM
        assert sorted(out["removed"]) == sorted([str(async_dir / "j9.123"), str(tmpdir)])
        assert [p.name for p in async_dir.iterdir()] == ["other.1"] and not tmpdir.exists()
        assert not job_file.exists()
        again = run(monkeypatch, capsys, tree, step="reap", job_file=str(job_file))
        assert (again["reaped"], again["changed"], again["removed"]) == (False, False, [])
    finally:
        if job.poll() is None:
            job.kill()


# -- an observation that cannot be made (issue 35) -------------------------------------------------------
def unreadable_environ(tree, release_id="r1"):
    argv = running(tree, release_id=release_id)[41][0]
    return {41: (argv, [], {}, {"environ": "Permission denied", "exe": "Permission denied"})}


def test_an_unreadable_environment_is_recorded_as_such_and_an_env_file_changed_since_the_start_is_drift(
    monkeypatch, capsys, tree
):
    good_deploy(tree)
    started = os.stat(tree["files"]["env"]).st_mtime + 100
    common = dict(release_id="r1", unit={"MainPID": "41", "InvocationID": "inv-a"}, started=started)
    out = run(monkeypatch, capsys, tree, step="record", envelope="small", process=unreadable_environ(tree), **common)
    assert out["record"]["observed"]["unreadable"] == ["environ", "exe"]
    assert out["record"]["observed"]["unreadable_reasons"]["environ"] == "Permission denied"
    assert "environ_sha256" not in out["record"]["observed"]
    launcher = str(tree["root"] / "releases" / "r1" / "venv" / "bin" / "sglang")
    same = run(monkeypatch, capsys, tree, step="restart", launcher=launcher, process=unreadable_environ(tree), **common)
    assert (same["restart"], same["drift"]) == (False, [])
    assert same["observed"]["unreadable"] == ["environ", "exe"]
    # The env file put back (same content) after a start by hand with another one: newer than the process.
    os.utime(tree["files"]["env"], (started + 50, started + 50))
    moved = run(
        monkeypatch, capsys, tree, step="restart", launcher=launcher, process=unreadable_environ(tree), **common
    )
    assert moved["restart"] is True
    assert moved["drift"][0].startswith("%s changed at " % tree["files"]["env"])
    assert "its environment cannot be read (Permission denied)" in moved["drift"][0]


def test_observe_after_a_rollback_makes_the_restored_process_the_records(monkeypatch, capsys, tree):
    recorded_deploy(monkeypatch, capsys, tree)
    restored = {43: running(tree)[41]}
    out = run(
        monkeypatch, capsys, tree, step="observe", unit={"MainPID": "43", "InvocationID": "inv-r"}, process=restored
    )
    assert out["changed"] is True and out["observed"]["invocation_id"] == "inv-r"
    record = json.loads((tree["state"] / "deploy.json").read_text())
    assert (record["release_id"], record["observed"]["invocation_id"], record["observed"]["main_pid"]) == (
        "r1",
        "inv-r",
        43,
    )
    os.unlink(str(tree["root"] / "current"))
    os.symlink(str(tree["root"] / "releases" / "r2"), str(tree["root"] / "current"))
    other = run(
        monkeypatch, capsys, tree, step="observe", unit={"MainPID": "43", "InvocationID": "inv-s"}, process=restored
    )
    assert other["changed"] is False  # current names another release than the record: the record is left alone
    assert json.loads((tree["state"] / "deploy.json").read_text())["observed"]["invocation_id"] == "inv-r"


# -- what interrupted runs left (issue 35) -----------------------------------------------------------------
MARKER = "runpy.run_module(mod_name='ansible_collections.specdec.sglang.plugins.modules.sglang_readiness')\n"


def tmp_dir(root, name, wrapper, content, age_s):
    path = root / name
    path.mkdir(parents=True)
    (path / wrapper).write_text(content)
    os.utime(path, (time.time() - age_s, time.time() - age_s))
    return path


def test_reap_removes_the_results_of_a_readiness_job_that_ended_before_it(monkeypatch, capsys, tree):
    job_file = str(tree["root"] / "state" / "readiness.job")  # no job file: the job ended and removed it
    results = tree["root"] / "home" / ".ansible_async"
    results.mkdir(parents=True)
    ours = {"ready": True, "invocation": {"module_args": {"job_file": job_file, "unit": "sglang.service"}}}
    (results / "j1.100").write_text(json.dumps(ours))
    other = {"invocation": {"module_args": {"job_file": "/srv/other/readiness.job"}}}
    (results / "j2.200").write_text(json.dumps(other))
    (results / "j3.300").write_text(json.dumps({"started": 1, "finished": 0}))  # a job still running
    (results / "notes.txt").write_text("not json")
    out = run(monkeypatch, capsys, tree, step="reap", job_file=job_file)
    assert (out["reaped"], out["changed"], out["removed"]) == (False, True, [str(results / "j1.100")])
    assert sorted(path.name for path in results.iterdir()) == ["j2.200", "j3.300", "notes.txt"]
    assert "an earlier run of the collection left" in str(out["warnings"][0])
    again = run(monkeypatch, capsys, tree, step="reap", job_file=job_file)
    assert (again["changed"], again["removed"], again["reason"]) == (False, [], "")


def test_reap_removes_only_the_collections_own_stale_temporary_directories(monkeypatch, capsys, tree):
    import subprocess  # noqa: PLC0415

    root = tree["root"] / "home" / ".ansible" / "tmp"
    stale = tmp_dir(root, "ansible-tmp-1-1-1", "AnsiballZ_sglang_readiness.py", MARKER, 3600)
    theirs = tmp_dir(root, "ansible-tmp-2-2-2", "AnsiballZ_ping.py", "mod_name='ansible.modules.ping'\n", 3600)
    fresh = tmp_dir(root, "ansible-tmp-3-3-3", "AnsiballZ_sglang_release.py", MARKER, 0)
    live = tmp_dir(root, "ansible-tmp-4-4-4", "AnsiballZ_sglang_readiness.py", MARKER, 3600)
    own = tmp_dir(root, "ansible-tmp-5-5-5", "AnsiballZ_sglang_release.py", MARKER, 3600)
    not_tmp = tmp_dir(root, "mine-1", "AnsiballZ_sglang_release.py", MARKER, 3600)
    job = subprocess.Popen(["sh", "-c", "sleep 30", str(live / "AnsiballZ_sglang_readiness.py")])
    # between fork and exec the child's /proc cmdline is still pytest's: wait until it shows the live path
    deadline = time.monotonic() + 10
    while str(live) not in Path("/proc/%d/cmdline" % job.pid).read_bytes().decode(errors="replace"):
        assert time.monotonic() < deadline, "the stand-in job never showed its command line"
        time.sleep(0.01)
    try:
        out = run(
            monkeypatch, capsys, tree, step="reap", job_file=str(tree["root"] / "state" / "r.job"), own_tmp=str(own)
        )
    finally:
        job.kill()
        job.wait()
    assert out["removed"] == [str(stale)]
    assert not stale.exists()
    assert all(path.exists() for path in (theirs, fresh, live, own, not_tmp))


def test_reap_in_check_mode_removes_nothing(monkeypatch, capsys, tree):
    root = tree["root"] / "home" / ".ansible" / "tmp"
    stale = tmp_dir(root, "ansible-tmp-1-1-1", "AnsiballZ_sglang_readiness.py", MARKER, 3600)
    out = run(monkeypatch, capsys, tree, step="reap", job_file=str(tree["root"] / "r.job"), check_mode=True)
    assert out["changed"] is True and out["removed"] == [] and stale.exists()


def test_observe_on_a_full_disk_leaves_the_record_and_warns(monkeypatch, capsys, tree):
    recorded_deploy(monkeypatch, capsys, tree)
    before = (tree["state"] / "deploy.json").read_text()

    def full(self, dest, text, mode):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(release_steps.Host, "write", full)
    out = run(
        monkeypatch,
        capsys,
        tree,
        step="observe",
        unit={"MainPID": "43", "InvocationID": "inv-r"},
        process={43: running(tree)[41]},
    )
    assert out["changed"] is False and "failed" not in out
    assert "No space left on device" in str(out["warnings"])
    assert (tree["state"] / "deploy.json").read_text() == before
