"""The default scenario: a full deploy on a lab host, then an idempotence run.

Runs after molecule's idempotence step, so every check also holds after the second deploy.
"""

import json

import pytest

UNIT = "sglang.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
ENV_PATH = "/etc/sglang/sglang.env"

HARDENING = [
    "NoNewPrivileges=true",
    "ProtectSystem=strict",
    "ReadWritePaths=/var/lib/sglang",
    "ReadWritePaths=/var/cache/sglang",
    "PrivateTmp=true",
    "ProtectHome=true",
    "DevicePolicy=closed",
    "DeviceAllow=char-nvidia* rw",
    "CapabilityBoundingSet=",
    "Restart=on-failure",
    "StartLimitBurst=3",
    "TimeoutStartSec=120",
    "LimitNOFILE=16384",
]


@pytest.fixture(scope="module")
def hostvars(host):
    return host.ansible.get_variables()


def test_service_user_is_a_system_user_without_login(host):
    user = host.user("sglang")
    assert user.exists
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"
    assert user.group == "sglang"


def test_unit_runs_the_current_release_and_carries_the_hardening_lines(host):
    unit = host.file(UNIT_PATH)
    assert unit.user == "root" and unit.mode == 0o644
    lines = unit.content_string.splitlines()
    assert "ExecStart=/opt/sglang/current/venv/bin/sglang-engine-simulator \\" in lines
    for directive in HARDENING:
        assert directive in lines, directive
    # the key itself never appears in the unit, only the variable reference
    assert "    --api-key ${SGLANG_API_KEY}" in lines


def test_unit_file_is_clean_for_systemd_analyze_verify(host):
    result = host.run(f"systemd-analyze verify {UNIT_PATH}")
    assert result.rc == 0
    assert result.stderr.strip() == ""


def test_environment_file_is_root_only_and_holds_the_key(host, hostvars):
    env = host.file(ENV_PATH)
    assert env.user == "root" and env.group == "root"
    assert env.mode == 0o600
    assert f'SGLANG_API_KEY="{hostvars["sglang_service_api_key"]}"' in env.content_string


def test_service_is_active_enabled_and_listens_on_loopback(host):
    service = host.service("sglang")
    assert service.is_running
    assert service.is_enabled
    assert host.socket("tcp://127.0.0.1:30000").is_listening


def test_a_real_generation_is_answered_on_the_port(host, hostvars):
    body = json.dumps({"text": "Say hi.", "sampling_params": {"max_new_tokens": 8, "temperature": 0}})
    out = host.check_output(
        "curl -sS --max-time 20 -H 'Content-Type: application/json' -H 'Authorization: Bearer %s' -d %s %s",
        hostvars["sglang_service_api_key"],
        body,
        "http://127.0.0.1:30000/generate",
    )
    answer = json.loads(out)
    assert answer["meta_info"]["completion_tokens"] == 8
    assert answer["meta_info"]["finish_reason"]["type"] != "abort"


def test_generation_without_the_api_key_is_refused(host):
    status = host.check_output(
        "curl -s -o /dev/null -w '%%{http_code}' --max-time 20 -H 'Content-Type: application/json' "
        "-d '{\"text\": \"hi\"}' http://127.0.0.1:30000/generate"
    )
    assert status == "401"


def test_second_deploy_did_not_restart_the_service(host):
    first = host.file("/var/tmp/molecule-first-main-pid").content_string.strip()
    now = host.check_output(f"systemctl show --property=MainPID --value {UNIT}")
    restarts = host.check_output(f"systemctl show --property=NRestarts --value {UNIT}")
    assert first not in ("", "0")
    assert now == first
    assert restarts == "0"


def test_current_points_at_the_recorded_last_good_release(host):
    current = host.file("/opt/sglang/current")
    assert current.is_symlink
    record = json.loads(host.file("/opt/sglang/state/last_good/deploy.json").content_string)
    assert current.linked_to == f"/opt/sglang/releases/{record['release_id']}"
    assert record["envelope"] == "full"
    assert host.file(f"/opt/sglang/releases/{record['release_id']}/venv/bin/sglang-engine-simulator").exists
