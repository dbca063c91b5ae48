"""The sglang_readiness module wrapper: argument spec, exit / fail data, check mode, no secret leaks."""

import io
import json
import subprocess
import sys
import threading
import urllib.error

import pytest
from ansible.module_utils import basic
from ansible_collections.specdec.sglang.plugins.modules import sglang_readiness
from support.module_run import run_main, set_module_args

RUNNING = (
    "Id=sglang.service\nLoadState=loaded\nActiveState=active\nSubState=running\nResult=success\nNRestarts=0\n"
    "MainPID=4242\nExecMainPID=4242\nExecMainStatus=0\nExecMainCode=0\nInvocationID=inv1\n"
)
FAILED = RUNNING.replace("ActiveState=active", "ActiveState=failed").replace("SubState=running", "SubState=failed")
OOM = (
    'Traceback (most recent call last):\n  File "x.py", line 97, in __post_init__\n'
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"
)
GENERATED = {
    "text": "hi",
    "output_ids": [1, 2],
    "meta_info": {
        "finish_reason": {"type": "length"},
        "completion_tokens": 2,
        "spec_verify_ct": 1,
        "spec_accept_length": 2.0,
    },
}


class Response:
    def __init__(self, body):
        self.status = 200
        self._body = json.dumps(body).encode()

    def read(self):
        return self._body


def fake_open_url(routes, seen):
    def open_url(url, data=None, headers=None, method=None, timeout=None, **kwargs):
        path = "/" + url.split("://", 1)[1].split("/", 1)[1]
        seen.append((method, path, dict(headers or {})))
        answer = routes.get((method, path))
        if answer is None:
            raise urllib.error.HTTPError(url, 404, "nf", {}, io.BytesIO(b"{}"))
        if isinstance(answer, int):
            raise urllib.error.HTTPError(url, answer, "err", {}, io.BytesIO(b"{}"))
        return Response(answer)

    return open_url


def run(monkeypatch, capsys, systemctl=RUNNING, journal="", routes=None, **params):
    params.setdefault("base_url", "http://127.0.0.1:30000")  # required: the service role passes its host and port
    set_module_args(monkeypatch, params)
    commands = []

    def run_command(self, argv, **kwargs):
        commands.append(argv)
        if argv[0] == "systemctl":
            return (0, systemctl, "") if systemctl is not None else (1, "", "System has not been booted with systemd")
        return 0, journal, ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    seen = []
    opener = fake_open_url(
        routes
        if routes is not None
        else {
            ("GET", "/health"): {},
            ("POST", "/generate"): GENERATED,
            ("GET", "/server_info"): {"version": "0.5.23", "speculative_algorithm": "DFLASH"},
        },
        seen,
    )
    out = run_main(lambda: sglang_readiness.run_module(sglang_readiness.build_module(), open_url_func=opener), capsys)
    out["_commands"] = commands
    out["_http"] = seen
    return out


def test_the_argument_spec_is_never_mutated_by_a_run(monkeypatch, capsys):
    before = json.dumps(sglang_readiness.ARGUMENT_SPEC, sort_keys=True, default=str)
    run(monkeypatch, capsys, unit="sglang.service", poll_interval=0.05)
    assert json.dumps(sglang_readiness.ARGUMENT_SPEC, sort_keys=True, default=str) == before


def test_ready_service_exits_ok_unchanged_with_the_documented_keys(monkeypatch, capsys):
    out = run(monkeypatch, capsys, unit="sglang.service", poll_interval=0.05, expect_speculative_algorithm="DFLASH")
    assert out.get("failed") is not True
    assert out["ready"] is True and out["changed"] is False and out["phase"] == "ready"
    for key in (
        "failure_class",
        "reason",
        "hint",
        "elapsed_s",
        "time_to_ready_s",
        "unit",
        "probe",
        "server",
        "traceback",
        "exception_line",
        "journal",
        "progress",
        "notes",
        "time_to_ready_from",
    ):
        assert key in out
    assert out["unit"]["active_state"] == "active"
    # Nothing deprecated: no result key named warnings unless module.warn() put it there.
    assert "warnings" not in out, out.get("warnings")
    assert out["_commands"][0][:3] == ["systemctl", "show", "sglang.service"]


def test_speculative_deploy_needs_evidence_from_the_probe_answer(monkeypatch, capsys):
    """server_info's speculative_algorithm only echoes the flag: a probe answer without counters fails."""
    plain = {
        "text": "hi",
        "output_ids": [1, 2],
        "meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": 2},
    }
    routes = {
        ("GET", "/health"): {},
        ("POST", "/generate"): plain,
        ("GET", "/server_info"): {"version": "0.5.17", "speculative_algorithm": "DFLASH"},
    }
    out = run(
        monkeypatch,
        capsys,
        routes=routes,
        unit="sglang.service",
        poll_interval=0.05,
        expect_speculative_algorithm="DFLASH",
    )
    assert out["failed"] is True and out["failure_class"] == "spec_mismatch"
    assert "shows no speculative decoding" in out["reason"]


def test_notes_become_ansible_warnings_not_a_result_key(monkeypatch, capsys):
    routes = {
        ("GET", "/health"): {},
        ("POST", "/generate"): {
            "output_ids": [1],
            "meta_info": {"finish_reason": {"type": "length"}, "completion_tokens": 1},
        },
        ("GET", "/server_info"): {"version": "0.5.17"},
    }
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    out = run(monkeypatch, capsys, routes=routes, unit="sglang.service", poll_interval=0.05, min_accept_length=1.0)
    assert out["ready"] is True
    assert any("min_accept_length not checked" in n for n in out["notes"])
    assert warned == out["notes"]  # module.warn(), once per note (Ansible dedupes repeats per process)


def test_failed_unit_fails_the_task_with_class_and_traceback(monkeypatch, capsys):
    out = run(monkeypatch, capsys, systemctl=FAILED, journal=OOM, unit="sglang.service", poll_interval=0.05)
    assert out["failed"] is True and out["ready"] is False
    assert out["failure_class"] == "oom_mem_fraction"
    assert out["msg"].startswith("sglang not ready: oom_mem_fraction")
    assert out["exception_line"].startswith("RuntimeError: Not enough memory")
    assert out["elapsed_s"] < 3
    assert any(c[0] == "journalctl" and "_SYSTEMD_INVOCATION_ID=inv1" in c for c in out["_commands"])


def test_api_key_is_sent_as_bearer_and_masked_everywhere(monkeypatch, capsys):
    secret = "sk-abcdef123456"
    out = run(monkeypatch, capsys, unit="sglang.service", poll_interval=0.05, api_key=secret)
    assert out["ready"] is True
    assert all(h.get("Authorization") == "Bearer " + secret for _, _, h in out["_http"])
    visible = {k: v for k, v in out.items() if not k.startswith("_")}
    assert secret not in json.dumps(visible)


def test_api_key_from_the_restored_config_file_replaces_the_given_key(monkeypatch, capsys, tmp_path):
    """Issue 35: the rollback verifies the restored release with its own key, not the failed deploy's."""
    config = tmp_path / "sglang.yaml"
    config.write_text('# Ansible managed\napi-key: "sk-restored-0987"\n')
    given = {"unit": "sglang.service", "poll_interval": 0.05, "api_key": "sk-new-1234"}
    out = run(monkeypatch, capsys, api_key_from=str(config), **given)
    assert out["ready"] is True
    assert all(h.get("Authorization") == "Bearer sk-restored-0987" for _, _, h in out["_http"])
    assert "sk-restored-0987" not in json.dumps({k: v for k, v in out.items() if not k.startswith("_")})
    none = run(monkeypatch, capsys, api_key_from=str(tmp_path / "absent.yaml"), **given)
    assert none["ready"] is True and all("Authorization" not in h for _, _, h in none["_http"])


def test_check_mode_reports_without_generating(monkeypatch, capsys):
    out = run(monkeypatch, capsys, unit="sglang.service", _ansible_check_mode=True)
    assert out.get("failed") is not True and out["changed"] is False
    assert out["ready"] is False and out["phase"] == "up"
    assert [p for m, p, _ in out["_http"] if m == "POST"] == []


def test_probe_options_reach_the_generation(monkeypatch, capsys):
    routes = {("GET", "/health"): {}, ("POST", "/generate"): GENERATED, ("GET", "/server_info"): {}}
    out = run(
        monkeypatch,
        capsys,
        routes=routes,
        unit="u",
        poll_interval=0.05,
        probe={"expect_regex": "^nope$", "max_new_tokens": 4},
    )
    assert out["failure_class"] == "probe_failed" and out["probe"]["error"] == "regex"


def test_without_systemd_the_error_names_the_alternative(monkeypatch, capsys):
    out = run(monkeypatch, capsys, systemctl=None, unit="sglang.service")
    assert out["failed"] is True and "pid/pidfile" in out["msg"]


def test_pid_mode_watches_a_process(monkeypatch, capsys, tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("Load weight begin.\n")
    out = run(monkeypatch, capsys, pid=2**22 + 12345, log_file=str(log), poll_interval=0.05)
    assert out["failed"] is True and out["failure_class"] == "crashed_on_start"
    assert out["process"]["alive"] is False and out["unit"] == {}
    assert out["progress"] == "Load weight begin."


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"unit": "u", "pid": 1}, "mutually exclusive"),
        ({}, "one of the following is required"),
        ({"unit": "u", "startup_timeout": 0}, "startup_timeout must be > 0"),
        ({"unit": "u", "poll_interval": 0}, "poll_interval must be in (0, 60]"),
        ({"unit": "u", "probe": {"max_new_tokens": 0}}, "probe.max_new_tokens must be >= 1"),
        ({"unit": "u", "base_url": "127.0.0.1:30000"}, "base_url must start with http"),
        ({"unit": "u", "probe": {"api": "grpc"}}, "value of api must be one of"),
    ],
)
def test_bad_parameters_fail_with_a_message(monkeypatch, capsys, params, message):
    out = run(monkeypatch, capsys, **params)
    assert out["failed"] is True and message in out["msg"]


def test_a_death_ends_the_wait_at_once_not_at_the_next_poll(monkeypatch, capsys, tmp_path):
    """The loop sleeps on the process's pidfd: with a 10 s poll interval the exit is still judged at once."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.8)"])
    threading.Thread(target=child.wait, daemon=True).start()
    log = tmp_path / "sglang.log"
    log.write_text("Load weight begin.\n")
    out = run(monkeypatch, capsys, routes={("GET", "/health"): 503}, pid=child.pid, log_file=str(log), poll_interval=10)
    assert out["failure_class"] == "crashed_on_start" and out["phase"] == "failed"
    assert out["elapsed_s"] < 3, out["elapsed_s"]


def test_the_running_readiness_job_is_recorded_for_the_next_run(tmp_path):
    """job_file: this process, its start token, 0600 and atomic; a run outside async_wrapper has no async job."""
    import json  # noqa: PLC0415
    import os  # noqa: PLC0415
    import stat  # noqa: PLC0415

    from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock  # noqa: PLC0415
    from ansible_collections.specdec.sglang.plugins.modules import sglang_readiness as readiness_module  # noqa: PLC0415

    path = tmp_path / "readiness.job"
    job = readiness_module.write_job(str(path))
    assert json.loads(path.read_text()) == job
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and sorted(os.listdir(tmp_path)) == ["readiness.job"]
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert job["pid"] == os.getpid()
    assert job["start"] == host_lock.process_start_token(boot, open("/proc/self/stat").read())
    assert (job["pgid"], job["jid"], job["tmpdir"]) == (0, "", "")
