"""The transactional decisions of release.py (issue 23): the running process against the record (drift),
crashes since the record, a failed record, the readiness job left by an interrupted run."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._release import release

ROOT = "/opt/sglang"
ENV = {"HOME": "/var/lib/sglang", "CUDA_VISIBLE_DEVICES": "GPU-1", "INVOCATION_ID": "inv-a", "JOURNAL_STREAM": "8:1"}
ARGV = ["/opt/sglang/releases/r1/venv/bin/python3", "/opt/sglang/current/venv/bin/sglang", "serve", "--port", "30000"]


def observed(argv=ARGV, environ=ENV, invocation="inv-a", paths=()):
    return release.observe_process(
        ROOT, invocation_id=invocation, main_pid=41, argv=argv, paths=list(paths), environ=environ
    )


def recorded(obs=None, release_id="r1"):
    return dict(release.RECORD_DEFAULTS, release_id=release_id, observed=obs if obs is not None else observed())


def test_the_release_is_read_from_the_resolved_paths_not_from_current():
    assert release.process_release(ROOT, ["/usr/bin/python3.11", "/opt/sglang/releases/r7/venv/lib/x.so"]) == "r7"
    assert release.process_release(ROOT, ["/opt/sglang/current/venv/bin/sglang"]) == ""
    assert release.process_release(ROOT, ["/opt/sglang/releases-old/r1/x"]) == ""
    assert observed()["release"] == "r1"


def test_systemds_per_start_variables_do_not_count():
    again = observed(environ=dict(ENV, INVOCATION_ID="inv-b", JOURNAL_STREAM="9:2"), invocation="inv-b")
    assert again["environ_sha256"] == observed()["environ_sha256"]
    assert release.drift_reasons(recorded(), again, release_id="r1") == []  # systemd restarted the same deploy


def test_the_verified_process_is_no_drift():
    assert release.drift_reasons(recorded(), observed(), release_id="r1") == []


def test_another_environment_is_drift_and_names_the_invocations():
    other = observed(environ=dict(ENV, SGLANG_SIM_LOAD_S="90", INVOCATION_ID="inv-x"), invocation="inv-x")
    reasons = release.drift_reasons(recorded(), other, release_id="r1")
    assert reasons[0] == "the running process's environment is not the recorded one"
    assert reasons[-1] == "started as invocation inv-x, not the verified inv-a"


def test_another_release_or_command_line_is_drift():
    other = observed(argv=["/opt/sglang/releases/r2/venv/bin/python3", *ARGV[1:4], "30001"], invocation="inv-y")
    reasons = release.drift_reasons(recorded(), other, release_id="r1")
    assert "the running process runs release r2, the record r1" in reasons
    assert "the running process's command line is not the recorded one" in reasons


def test_drift_then_restarts_even_when_every_file_equals_its_good_copy():
    sha = {"unit": "a", "good_unit": "a", "env": "b", "good_env": "b", "config": "c", "good_config": "c"}
    common = dict(release_id="r1", requested=False, active_state="active", current_release="r1", sha256=sha)
    assert release.restart_decision(recorded(), **common) == (False, [])
    restart, reasons = release.restart_decision(recorded(), drift=["the environment differs"], **common)
    assert restart and reasons == ["drift: the environment differs"]


def test_no_observation_no_drift_check():
    assert release.drift_reasons(recorded(obs={}), observed(environ={}), release_id="r1") == []
    assert release.drift_reasons(recorded(), {}, release_id="r1") == []  # nothing runs: the active state decides
    assert release.drift_reasons(recorded(), observed(environ={}), release_id="r2") == []  # another release anyway


# -- an observation that cannot be made (issue 35): said, and decided on what can be read ----------------
NO_PTRACE = {"environ": "Permission denied", "exe": "Permission denied", "cwd": "Permission denied"}
STARTED = 1_700_000_000.0
ENV_FILE, UNIT_FILE = "/etc/sglang/sglang.env", "/etc/systemd/system/sglang.service"


def seen_without_environ(argv=ARGV, invocation="inv-a", unreadable=NO_PTRACE, started=STARTED, settings=None):
    return release.observe_process(
        ROOT,
        invocation_id=invocation,
        main_pid=41,
        argv=argv,
        paths=[],
        environ={},
        unreadable=unreadable,
        started_at=started,
        unit_settings=settings or {"ExecStart": "/opt/sglang/current/venv/bin/sglang serve", "Environment": ""},
    )


def test_a_readable_environment_that_differs_is_drift():
    other = observed(environ=dict(ENV, SPECDEC_BY_HAND="1"))
    assert release.drift_reasons(recorded(), other, release_id="r1") == [
        "the running process's environment is not the recorded one"
    ]


def test_an_unreadable_environment_is_said_never_hashed_as_empty():
    obs = seen_without_environ()
    assert obs["unreadable"] == ["cwd", "environ", "exe"]
    assert obs["unreadable_reasons"]["environ"] == "Permission denied"
    assert "environ_sha256" not in obs and obs["cmdline_sha256"] == observed()["cmdline_sha256"]
    assert obs["release"] == "r1"  # the command line still names it
    assert release.observation_lines(obs) == [
        "not observed: the running process's cwd, environ, exe (Permission denied); drift decided on what could be read"
    ]
    unknown_start = seen_without_environ(started=None)
    assert release.observation_lines(unknown_start)[1].startswith("not observed: the running process's started_at (")


def test_unreadable_environment_and_an_env_file_newer_than_the_start_is_drift():
    record = recorded(seen_without_environ())
    now = seen_without_environ()
    changed = {ENV_FILE: STARTED + 30, UNIT_FILE: STARTED - 600}
    reasons = release.drift_reasons(record, now, release_id="r1", changed_at=changed)
    assert reasons == [
        "/etc/sglang/sglang.env changed at 1700000030, after the process started (1700000000), and its "
        "environment cannot be read (Permission denied)"
    ]


def test_unreadable_environment_against_a_record_that_read_it_uses_the_same_fallbacks():
    changed = {ENV_FILE: STARTED + 1}
    assert release.drift_reasons(recorded(), dict(seen_without_environ()), release_id="r1", changed_at=changed)


def test_unreadable_and_the_process_under_another_release_than_current_is_drift():
    other = seen_without_environ(argv=["/opt/sglang/releases/r2/venv/bin/python3", *ARGV[1:]])
    reasons = release.drift_reasons(recorded(seen_without_environ()), other, release_id="r1")
    assert reasons[0] == "the running process runs release r2, the record r1"


def test_unreadable_release_and_current_switched_after_the_start_is_drift():
    hidden = {"cmdline": "Permission denied", "exe": "Permission denied", "cwd": "Permission denied"}
    now = seen_without_environ(argv=[], unreadable=dict(hidden, environ="Permission denied"))
    assert now["release"] == "" and "release" in now["unreadable"]
    record = recorded(seen_without_environ())
    assert release.drift_reasons(record, now, release_id="r1", current_changed_at=STARTED - 5) == []
    reasons = release.drift_reasons(record, now, release_id="r1", current_changed_at=STARTED + 5)
    assert reasons[0].startswith("current was switched at 1700000005, after the process started (1700000000)")
    assert "cmdline, cwd, exe unreadable" in reasons[0]


def test_unreadable_environment_and_a_start_outside_the_deploy_is_drift_unless_systemd_restarted_it():
    record = recorded(seen_without_environ())
    by_hand = seen_without_environ(invocation="inv-h", started=STARTED + 100)
    reasons = release.drift_reasons(record, by_hand, release_id="r1", n_restarts=0)
    assert reasons == [
        "started as invocation inv-h, not the verified inv-a, and not by systemd's Restart= (NRestarts=0): a start "
        "outside the deploy whose environment cannot be read (Permission denied)"
    ]
    assert release.drift_reasons(record, by_hand, release_id="r1", n_restarts=2) == []


def test_unreadable_and_other_systemd_settings_is_drift():
    record = recorded(seen_without_environ())
    now = seen_without_environ(
        settings={"ExecStart": "/opt/sglang/current/venv/bin/sglang serve", "Environment": "X=1"}
    )
    assert release.drift_reasons(record, now, release_id="r1") == [
        "the unit's ExecStart / Environment / EnvironmentFiles are not the recorded ones"
    ]


def test_unreadable_and_everything_consistent_is_no_drift_but_the_report_says_what_was_not_observed():
    record = recorded(seen_without_environ())
    now = seen_without_environ()
    changed = {ENV_FILE: STARTED - 60, UNIT_FILE: STARTED - 600}
    assert (
        release.drift_reasons(record, now, release_id="r1", changed_at=changed, current_changed_at=STARTED - 61) == []
    )
    common = dict(
        host="lab1",
        unit="sglang",
        release_id="r1",
        previous_release_id="r0",
        attempts=[{"envelope": "full", "failure_class": ""}],
        restarted=False,
        versions={},
        envelope="full",
        envelope_settings={},
        context={},
    )
    report = release.success_report({"ready": True}, observed=now, **common)
    assert report["observed"]["unreadable"] == ["cwd", "environ", "exe"]
    text = release.success_summary(report)
    assert (
        "not observed: the running process's cwd, environ, exe (Permission denied); drift decided on what could be read"
        in text
    )
    failed = release.failure_report({}, target="r0", rollback=None, observed=now, **common_failure(common))
    assert any(
        line.startswith("not observed: the running process's cwd, environ")
        for line in release.failure_message(failed).splitlines()
    )


def common_failure(common):
    return {key: common[key] for key in ("host", "unit", "release_id", "previous_release_id", "attempts")}


# -- crashes between deploys ----------------------------------------------------------------------
JOURNAL = [
    {"_SYSTEMD_INVOCATION_ID": "inv-a", "MESSAGE": "ready to roll", "__REALTIME_TIMESTAMP": "1000000000"},
    {"_SYSTEMD_INVOCATION_ID": "inv-a", "MESSAGE": "Traceback (most recent call last):"},
    {"_SYSTEMD_INVOCATION_ID": "inv-a", "MESSAGE": "RuntimeError: CUDA error: an illegal memory access"},
    {
        "INVOCATION_ID": "inv-a",
        "UNIT": "sglang.service",
        "MESSAGE": "sglang.service: Main process exited, code=exited, status=1/FAILURE",
        "__REALTIME_TIMESTAMP": "1700000123500000",
    },
    {"INVOCATION_ID": "inv-a", "MESSAGE": "sglang.service: Failed with result 'exit-code'."},
    {"_SYSTEMD_INVOCATION_ID": "inv-b", "MESSAGE": "starting again"},
]


def test_a_crash_and_systemds_restart_since_the_record_are_stated_with_the_exits_lines():
    found = release.restarts_since_record(recorded(), invocation_id="inv-b", n_restarts=1, entries=JOURNAL)
    assert (found["n_restarts"], found["exits"]) == (1, 1)
    assert found["last_exit"] == "sglang.service: Main process exited, code=exited, status=1/FAILURE"
    assert found["last_exit_at"] == 1700000123.5
    assert found["last_exit_lines"][-1] == "RuntimeError: CUDA error: an illegal memory access"
    assert "starting again" not in found["last_exit_lines"]


def test_nothing_is_stated_while_the_recorded_start_runs():
    assert release.restarts_since_record(recorded(), invocation_id="inv-a", n_restarts=0, entries=JOURNAL[:3]) is None


def test_time_to_ready_only_for_a_start_this_run_made():
    readiness = {"ready": True, "time_to_ready_s": 3600.0, "probe": {}}
    common = dict(
        host="h",
        unit="sglang.service",
        release_id="r1",
        previous_release_id="",
        attempts=[{}],
        versions={},
        envelope="full",
        envelope_settings={},
        context={},
    )
    kept = release.success_report(readiness, restarted=False, **common)
    assert kept["time_to_ready_s"] is None and kept["up_s"] == 3600.0
    assert "not started by this run (no time to ready)" in " ".join(release.success_summary(kept))
    started = release.success_report(dict(readiness, time_to_ready_s=12.5), restarted=True, **common)
    assert started["time_to_ready_s"] == 12.5
    restarts = release.restarts_since_record(recorded(), invocation_id="inv-b", n_restarts=1, entries=JOURNAL)
    text = release.success_summary(
        release.success_report(
            readiness, restarted=True, drift=["the environment differs"], restarts=restarts, **common
        )
    )
    assert "drift: the environment differs (restarted and verified)" in text
    assert any(line.startswith("since the last record: 1 restart(s) by systemd, 1 exit(s)") for line in text)
    assert "  | RuntimeError: CUDA error: an illegal memory access" in text


# -- a failed record ----------------------------------------------------------------------------
def test_a_full_disk_at_the_record_is_diagnosed_and_the_ready_attempt_fails():
    error = {"errno": "ENOSPC", "strerror": "No space left on device", "path": "/s/last_good/sglang.env.tmp"}
    attempt = release.record_failure_attempt({"envelope": "full", "ready": True}, error, state_dir="/s", free_bytes=0)
    assert (attempt["ready"], attempt["failure_class"], attempt["phase"]) == (False, "record_failed", "record")
    assert attempt["reason"] == (
        "no space left to record the release in /s (/s/last_good/sglang.env.tmp: No space left on device, 0 bytes free)"
    )
    assert "free space on the file system of /s" in attempt["hint"]
    report = release.failure_report(
        {"ready": True},
        host="h",
        unit="u",
        release_id="r2",
        previous_release_id="r1",
        attempts=[attempt],
        target="r1",
        rollback={"ready": True, "probe": {"completion_tokens": 8, "latency_s": 0.1}},
    )
    message = release.failure_message(report)
    assert "record_failed" in message and "no space left to record" in message and "serves again" in message


def test_another_record_error_is_named():
    failure_class, reason, _hint = release.record_failure(
        {"errno": "EACCES", "strerror": "Permission denied", "path": "/s/x"}, state_dir="/s"
    )
    assert failure_class == "record_failed" and "(/s/x: Permission denied)" in reason


# -- the readiness job of an interrupted run ----------------------------------------------------------
WRAPPER = ["/usr/bin/python3", "/root/.ansible/tmp/ansible-tmp-1-2/AnsiballZ_async_wrapper.py", "j123", "960"]
WRAPPER += [
    "/root/.ansible/tmp/ansible-tmp-1-2/AnsiballZ_sglang_readiness.py",
    "/root/.ansible/tmp/ansible-tmp-1-2/args",
]


def test_an_async_readiness_job_records_its_group_job_id_and_temp_dir():
    job = release.readiness_job(pid=500, start="b:77", pgid=499, parent_argv=WRAPPER, async_dir="/root/.ansible_async")
    assert job == {
        "pid": 500,
        "start": "b:77",
        "pgid": 499,
        "jid": "j123",
        "async_dir": "/root/.ansible_async",
        "tmpdir": "/root/.ansible/tmp/ansible-tmp-1-2",
    }
    plain = release.readiness_job(pid=500, start="b:77", pgid=1, parent_argv=["/bin/sh"], async_dir="/x")
    assert (plain["pgid"], plain["jid"], plain["tmpdir"]) == (0, "", "")


def test_a_live_job_is_ended_by_its_group_and_its_leftovers_removed():
    job = release.readiness_job(pid=500, start="b:77", pgid=499, parent_argv=WRAPPER, async_dir="/root/.ansible_async")
    kill, pgid, leftovers, reason = release.reap_plan(job, start_now="b:77")
    assert (kill, pgid) == (True, 499)
    assert leftovers == ["/root/.ansible_async/j123.*", "/root/.ansible/tmp/ansible-tmp-1-2"]
    assert "interrupted run" in reason and "ended" in reason


def test_a_reused_pid_is_never_signalled():
    job = release.readiness_job(pid=500, start="b:77", pgid=499, parent_argv=WRAPPER, async_dir="/a")
    kill, pgid, leftovers, _reason = release.reap_plan(job, start_now="b:99")
    assert (kill, pgid) == (False, 0) and leftovers  # still cleaned
    assert release.reap_plan(job, start_now="")[0] is False
    assert release.reap_plan(None, start_now="b:77") == (False, 0, [], "")


# -- what interrupted runs left (issue 35) -----------------------------------------------------------------
def test_only_the_results_of_this_collections_readiness_job_are_ours():
    job = "/opt/sglang/state/readiness.job"
    assert release.is_our_async_result({"invocation": {"module_args": {"job_file": job}}}, job_file=job)
    assert not release.is_our_async_result({"invocation": {"module_args": {"job_file": "/x.job"}}}, job_file=job)
    assert not release.is_our_async_result({"started": 1, "finished": 0}, job_file=job)
    assert not release.is_our_async_result(["not", "a", "result"], job_file=job)
    assert not release.is_our_async_result({"invocation": {"module_args": {"job_file": ""}}}, job_file="")


def test_the_async_results_directory_follows_ansible_async_dir_and_home():
    assert release.async_results_dir({"HOME": "/root"}) == "/root/.ansible_async"
    assert release.async_results_dir({"HOME": "/home/a", "ANSIBLE_ASYNC_DIR": "~/async"}) == "/home/a/async"
    assert release.async_results_dir({"ANSIBLE_ASYNC_DIR": "/var/async"}) == "/var/async"


def test_a_temporary_directory_is_removed_only_when_ours_old_unused_and_not_the_askers():
    now = 10_000.0
    tmp = "/root/.ansible/tmp/"
    candidates = [
        (tmp + "ansible-tmp-1", now - 3600, True),  # an interrupted run's: removed
        (tmp + "ansible-tmp-2", now - 3600, False),  # another tool's
        (tmp + "ansible-tmp-3", now - 10, True),  # being set up by a task right now
        (tmp + "ansible-tmp-4", now - 3600, True),  # an async job still running from it
        (tmp + "ansible-tmp-5", now - 3600, True),  # the asking task's own
        (tmp + "ansible-tmp-6", None, True),  # gone meanwhile
        (tmp + "other-7", now - 3600, True),  # not Ansible's naming
    ]
    live = ["/usr/bin/python3 %sansible-tmp-4/AnsiballZ_sglang_readiness.py" % tmp, "sleep 30"]
    found = release.leftover_tmp_dirs(candidates, now=now, live_cmdlines=live, own=tmp + "ansible-tmp-5")
    assert found == [tmp + "ansible-tmp-1"]
    assert release.leftover_tmp_dirs(candidates[:1], now=now, live_cmdlines=[], min_age_s=7200) == []


def test_an_unknown_start_time_is_said_and_decides_no_file_drift():
    now = seen_without_environ(started=None)
    assert now["started_at"] is None and "started_at" in now["unreadable"]
    record = recorded(seen_without_environ())
    changed = {ENV_FILE: STARTED + 30}
    assert release.drift_reasons(record, now, release_id="r1", changed_at=changed, current_changed_at=STARTED) == []


# -- the restored release's configuration (issue 35) -----------------------------------------------------
def test_the_api_key_is_read_from_the_config_file_as_the_role_renders_it():
    rendered = '# Ansible managed\n# --config file of sglang.service\napi-key: "lab-only-not-a-secret"\n'
    assert release.config_api_key(rendered) == "lab-only-not-a-secret"
    assert release.config_api_key('api-key: "a\\"b\\u00e9"\n') == 'a"b\u00e9'  # to_json's escapes
    assert release.config_api_key("# Ansible managed\n{}\n") == ""  # a server without a key
    assert release.config_api_key("api-key: 'it''s'\n") == "it's"
    assert release.config_api_key("") == ""


def test_a_config_api_key_that_is_not_a_string_is_an_error():
    with pytest.raises(ValueError, match="its api-key is not a double-quoted string"):
        release.config_api_key('api-key: "unterminated\n')
