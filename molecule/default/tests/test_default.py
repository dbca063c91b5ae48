"""The default scenario: a full deploy on a lab host, then molecule's idempotence run.

Runs after the idempotence step, so every check also holds after the second deploy. The host is
checked with testinfra's modules (``lab_host``: service, socket, file, user, process); ``lab`` holds
only what they cannot see (generations with the server's own key, the journal).
"""

import json

from scenario_fixtures import current, last_good, releases, unit_properties

UNIT_FILE = "/etc/systemd/system/sglang.service"
ENV_FILE = "/etc/sglang/sglang.env"
CONFIG_FILE = "/etc/sglang/sglang.yaml"

HARDENING = [
    "NoNewPrivileges=true",
    "ProtectSystem=strict",
    "ReadWritePaths=/var/lib/sglang",
    "ReadWritePaths=/var/cache/sglang",
    "PrivateTmp=true",
    "ProtectHome=true",
    "DevicePolicy=closed",
    "DeviceAllow=char-nvidia* rw",
    "ProtectProc=invisible",
    "CapabilityBoundingSet=",
    "Restart=on-failure",
    "StartLimitBurst=3",
    "TimeoutStartSec=120",
    "LimitNOFILE=16384",
]


def test_service_user_is_a_system_user_without_login(lab_host):
    user = lab_host.user("sglang")
    assert user.exists
    assert user.uid < 1000
    assert user.shell == "/usr/sbin/nologin"
    assert user.group == "sglang"


def test_unit_runs_the_current_release_and_carries_the_hardening_lines(lab_host):
    unit = lab_host.file(UNIT_FILE)
    assert (unit.user, unit.group, unit.mode) == ("root", "root", 0o644)
    lines = unit.content_string.splitlines()
    assert "ExecStart=/opt/sglang/current/venv/bin/sglang-engine-simulator \\" in lines
    for directive in HARDENING:
        assert directive in lines, directive
    assert "User=sglang" in lines
    # The key is read from the --config file, never written into the unit or passed as an argument.
    assert any(line.startswith('    --config "/etc/sglang/sglang.yaml"') for line in lines)
    assert "--api-key" not in unit.content_string
    # The role's default backends, the ones every GPU record ran (docs/runtime.md, "Backends per GPU class").
    assert any(line.startswith('    --attention-backend "triton"') for line in lines)
    assert any(line.startswith('    --sampling-backend "pytorch"') for line in lines)


def test_unit_file_is_clean_for_systemd_analyze_verify(lab_host):
    # testinfra's is_valid asserts that `systemd-analyze verify` prints nothing at all
    assert lab_host.service("sglang").is_valid


def test_systemd_security_exposure_stays_at_the_documented_level(lab_host):
    # docs/service.md records the exposure of the rendered unit; a change to the hardening
    # that raises it fails here.
    security = lab_host.check_output("systemd-analyze security --no-pager sglang.service")
    summary = [line for line in security.splitlines() if "Overall exposure level" in line]
    assert summary, security[-500:]
    exposure = float(summary[0].split(":")[1].split()[0])
    print(summary[0])
    assert exposure <= 3.5


def test_environment_file_is_root_only_and_holds_no_key(lab_host, key):
    env = lab_host.file(ENV_FILE)
    assert (env.user, env.group, env.mode) == ("root", "root", 0o600)
    assert key not in env.content_string


def test_config_file_holds_the_key_for_the_service_user_only(lab_host, lab, key):
    config = lab_host.file(CONFIG_FILE)
    assert (config.user, config.mode) == ("sglang", 0o600)
    assert config.contains("^api-key: ")
    # the key itself is compared on the host (lab_snapshot.py), so it never travels in a command
    assert lab["key_matches"] is True


def test_the_service_processes_run_as_the_service_user_and_never_show_the_key(lab_host, key):
    main_pid = int(unit_properties(lab_host)["MainPID"])
    main = lab_host.process.get(pid=main_pid)
    assert main.user == "sglang" and main.group == "sglang"
    assert "--config /etc/sglang/sglang.yaml" in main.args
    processes = lab_host.process.filter(user="sglang")
    assert main_pid in [p.pid for p in processes]
    assert [p.pid for p in processes if key in p.args] == []


def test_the_journal_never_shows_the_key(lab):
    assert lab["journal_lines"] > 0
    assert lab["key_in_journal"] is False


def test_service_is_active_enabled_and_listens_on_loopback_only(lab_host):
    service = lab_host.service("sglang")
    assert service.is_running
    assert service.is_enabled
    assert lab_host.socket("tcp://127.0.0.1:30000").is_listening
    # loopback only: no other address (0.0.0.0, ::, an interface's) listens on the port
    on_port = [s for s in lab_host.socket.get_listening_sockets() if s.rsplit(":", 1)[-1] == "30000"]
    assert on_port == ["tcp://127.0.0.1:30000"]


def test_a_real_generation_is_answered_on_the_port(lab):
    answer = lab["generate_with_key"]
    assert answer["status"] == 200
    assert answer["body"]["meta_info"]["completion_tokens"] == 8
    assert answer["body"]["meta_info"]["finish_reason"]["type"] != "abort"


def test_generation_without_the_api_key_is_refused(lab):
    assert lab["generate_without_key"]["status"] == 401


def test_second_deploy_did_not_restart_the_service(lab_host):
    first_main_pid = lab_host.file("/var/tmp/molecule-first-main-pid").content_string.strip()
    assert first_main_pid not in ("", "0")
    show = unit_properties(lab_host)
    assert show["MainPID"] == first_main_pid
    assert show["NRestarts"] == "0"


def test_current_points_at_the_recorded_last_good_release(lab_host):
    record = last_good(lab_host)
    assert current(lab_host) == f"/opt/sglang/releases/{record['release_id']}"
    assert record["envelope"] == "full"
    assert record["schema"] == 2
    # recorded as good only after the stability window and its second generation
    assert record["settle"]["ok"] is True
    assert record["settle"]["n_restarts"] == 0
    assert record["settle"]["stayed_up_s"] >= record["settle"]["settle_s"] > 0
    assert record["settle"]["second_probe"]["completion_tokens"] > 0
    assert record["release_id"] in releases(lab_host)


# Each .py under the release's site-packages: its bytecode for this Python, and whether that bytecode
# was compiled from the file as it is now (a timestamp pyc's header holds the source's mtime and size).
PYC_SURVEY = """
import importlib.util, json, pathlib, sysconfig
site = pathlib.Path(sysconfig.get_paths()["purelib"])
total, missing, stale = 0, [], []
for src in sorted(site.rglob("*.py")):
    total += 1
    pyc = pathlib.Path(importlib.util.cache_from_source(str(src)))
    if not pyc.exists():
        missing.append(str(src.relative_to(site)))
        continue
    head = pyc.read_bytes()[:16]
    if int.from_bytes(head[4:8], "little") == 0:
        st = src.stat()
        header = (int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little"))
        if header != (int(st.st_mtime) & 0xFFFFFFFF, st.st_size & 0xFFFFFFFF):
            stale.append(str(src.relative_to(site)))
print(json.dumps({"total": total, "missing": missing, "stale": stale}))
"""


def test_the_release_venv_is_byte_compiled_and_current_so_the_service_never_compiles(lab_host):
    # The unit cannot write __pycache__ into its release (ProtectSystem=strict): without bytecode there,
    # every start compiles the whole stack again. The patched files' bytecode is the patched source's.
    out = lab_host.check_output("/opt/sglang/current/venv/bin/python -c %s", PYC_SURVEY)  # testinfra quotes it
    survey = json.loads(out)
    assert survey["total"] > 1000  # sglang, the simulator and the overlay packages
    assert survey["missing"] == []
    assert survey["stale"] == []
