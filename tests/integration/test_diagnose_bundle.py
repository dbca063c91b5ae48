"""playbooks/diagnose.yml on a lab host: a bundle without secrets, 0600 on the controller (issue 23.7).

One lab host (a podman container with systemd, never deployed to) gets what a deploy leaves for the
bundle to read: the --config file with an API key, the environment file with a token, and a unit named
like the service whose process logs sglang's start line (``server_args=ServerArgs(... api_key='<key>'
...)``, as sglang 0.5.17 does) and carries a marker on its command line. diagnose.yml runs once and:

- the bundle is mode 0600 in a directory the play created 0700;
- config.redacted.yaml is valid YAML with its key name kept and the value ``<redacted>``
  (the old regex wrote ``\\1: <redacted>``), the environment file keeps its names;
- neither secret appears anywhere in the bundle, the journal's start line included;
- the journal holds the last ``sglang_diagnose_starts`` starts of the unit's five (issue 35).

The same host pins what docs/service.md says of ProtectProc=invisible there: the unit's process shares
PID 1's mount namespace (systemd sets up none in the container), and user nobody reads its command line
but not its environment.
"""

import os
import pathlib
import stat
import subprocess
import tarfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "specdec-diagb-"
CONTAINER = PREFIX + "lab1"
API_KEY = "sk-diagnose-bundle-7f3a9c"
TOKEN = "hf_diagnose_bundle_5e21"
MARKER = "--argv-marker=visible-to-everyone"
STARTS, KEEP = 5, 2  # the unit's starts before diagnose runs, and sglang_diagnose_starts
UNIT = f"""[Unit]
Description=stand-in for the SGLang unit (diagnose bundle test)

[Service]
User=svcdiag
EnvironmentFile=/etc/sglang/sglang.env
ExecStart=/usr/bin/python3 -c "import time; print(\\"server_args=ServerArgs(model_path='/m', api_key='{API_KEY}', port=30000)\\", flush=True); time.sleep(100000)" {MARKER}
ProtectProc=invisible
ProtectSystem=strict
PrivateTmp=true
"""  # noqa: E501
SETUP = f"""set -e
useradd -r -M -s /usr/sbin/nologin svcdiag
mkdir -p /etc/sglang
printf '# Ansible managed\\napi-key: "{API_KEY}"\\n' > /etc/sglang/sglang.yaml
printf 'HOME="/var/lib/sglang"\\nHF_TOKEN="{TOKEN}"\\n' > /etc/sglang/sglang.env
chmod 600 /etc/sglang/sglang.yaml /etc/sglang/sglang.env
cat > /etc/systemd/system/sglang.service
systemctl daemon-reload
systemctl start sglang.service
for i in $(seq 1 50); do journalctl -u sglang.service --no-pager | grep -q server_args= && break; sleep 0.2; done
# STARTS starts in all: the bundle keeps the last sglang_diagnose_starts of them.
for n in $(seq 2 {STARTS}); do
  systemctl restart sglang.service
  for i in $(seq 1 50); do
    [ "$(journalctl -u sglang.service --no-pager -o cat | grep -c server_args=)" -ge "$n" ] && break; sleep 0.2
  done
done
"""


def env():
    e = dict(os.environ)
    e.update(
        CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"),
        SPECDEC_LAB_PREFIX=PREFIX,
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="1",
    )
    return e


def sh(argv, stdin=None, timeout=600, check=True):
    proc = subprocess.run(
        argv, cwd=REPO, env=env(), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def in_lab(script, stdin=None, check=True):
    return sh(["podman", "exec", "-i", CONTAINER, "sh", "-c", script], stdin=stdin, check=check)


@pytest.fixture(scope="module")
def lab():
    lab_bin = str(REPO / "lab" / "bin" / "lab")
    sh([lab_bin, "down"], timeout=120, check=False)
    sh([lab_bin, "up", "1"])
    try:
        in_lab(SETUP, stdin=UNIT)
        yield CONTAINER
    finally:
        sh([lab_bin, "down"], timeout=120, check=False)


@pytest.fixture(scope="module")
def bundle(lab, tmp_path_factory):
    """Run diagnose.yml once into a directory that does not exist yet; the bundle's path and its files."""
    base = tmp_path_factory.mktemp("diagnose")
    bundle_dir = base / "bundles"
    proc = sh(
        [
            "ansible-playbook",
            "playbooks/diagnose.yml",
            "-l",
            "lab1",
            "-e",
            f"sglang_diagnose_dir={bundle_dir}",
            "-e",
            f"sglang_diagnose_starts={KEEP}",
        ]
    )
    archives = sorted(bundle_dir.glob("lab1-*.tar.gz"))
    assert len(archives) == 1, proc.stdout[-3000:]
    files = {}
    with tarfile.open(archives[0]) as tar:
        for member in tar.getmembers():
            if member.isfile():
                files[pathlib.PurePath(member.name).name] = tar.extractfile(member).read().decode()
    return {"dir": bundle_dir, "archive": archives[0], "files": files, "out": proc.stdout + proc.stderr}


def test_the_bundle_is_0600_in_a_directory_created_0700(bundle):
    assert stat.S_IMODE(bundle["archive"].stat().st_mode) == 0o600
    assert stat.S_IMODE(bundle["dir"].stat().st_mode) == 0o700


def test_the_redacted_config_is_valid_yaml_with_the_key_name_kept(bundle):
    text = bundle["files"]["config.redacted.yaml"]
    assert yaml.safe_load(text) == {"api-key": "<redacted>"}, text
    assert "\\1" not in text


def test_the_redacted_environment_keeps_every_name(bundle):
    lines = bundle["files"]["environment.redacted"].splitlines()
    assert 'HOME="/var/lib/sglang"' in lines and 'HF_TOKEN="<redacted>"' in lines


def test_no_secret_anywhere_in_the_bundle_the_journal_included(bundle):
    leaks = [name for name, text in bundle["files"].items() if API_KEY in text or TOKEN in text]
    assert leaks == []
    assert "api_key='<redacted>'" in bundle["files"]["journal.log"], bundle["files"]["journal.log"][-2000:]
    assert API_KEY not in bundle["out"] and TOKEN not in bundle["out"]


def test_the_journal_holds_the_last_sglang_diagnose_starts_starts(bundle):
    """Issue 35: the lab's journal has no "unit starting" messages for the unit; starts are its invocations."""
    starts = bundle["files"]["journal.log"].count("server_args=ServerArgs(")
    assert starts == KEEP, bundle["files"]["journal.log"][-3000:]


def test_protectproc_invisible_in_the_lab_hides_nothing_from_other_users(lab):
    """docs/service.md: in the lab systemd gives the unit no mount namespace; nobody reads its argv, not its environ."""
    pid = in_lab("systemctl show -p MainPID --value sglang.service").stdout.strip()
    assert pid not in ("", "0")
    # Root in the container lacks CAP_SYS_PTRACE (no /proc/<pid>/ns/mnt of another user): compare the mounts.
    same = in_lab(f"cmp /proc/1/mountinfo /proc/{pid}/mountinfo", check=False)
    assert same.returncode == 0, "the unit now has its own mounts: re-measure ProtectProc and update docs/service.md"
    as_nobody = "setpriv --reuid=nobody --regid=nogroup --clear-groups"
    cmdline = in_lab(f"{as_nobody} cat /proc/{pid}/cmdline").stdout
    assert MARKER in cmdline.split("\0")
    environ = in_lab(f"{as_nobody} cat /proc/{pid}/environ", check=False)
    assert environ.returncode != 0 and "Permission denied" in environ.stderr
    assert TOKEN not in environ.stdout


def test_protectproc_invisible_in_the_lab_does_not_hide_other_users_from_the_unit(lab):
    """With hidepid=invisible a unit of user svcdiag would see its own processes only; in the lab it sees PID 1's."""
    seen = in_lab(
        "systemd-run --wait --pipe -q -p User=svcdiag -p ProtectProc=invisible -p NoNewPrivileges=true"
        " sh -c 'cat /proc/1/comm; ls /proc | grep -c \"^[0-9]\"' < /dev/null"
    ).stdout.split()
    assert seen[0] == "systemd" and int(seen[1]) > 2, seen
