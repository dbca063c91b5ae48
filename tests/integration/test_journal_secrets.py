"""The whole journal of a lab host holds no API key after a deploy with sglang_service_api_key set.

Real sglang logs its server args, API key included, at every start; the redact-server-args set of the
runtime's sglang version (chosen by the deploy plan for every request) makes that line show
``<redacted>``. The engine simulator behaves like real sglang here: it reads the engine.py of the sglang
installed beside it in the release venv and logs the key in clear unless that file carries the patch
(lab/engine-simulator/src/sglang_engine_simulator/server_args_log.py).

One private lab host (prefix specdec-secrets-), the lab's own recipe:
``lab/bin/lab up 1 && ansible-playbook lab/playbooks/lab.yml -l lab1 && ansible-playbook deploy.yml -l lab1``
with the lab's inventory (sglang_service_api_key set in inventory/group_vars/lab/service.yml). Then:

- the release's sglang engine.py is the set's result (the plan chose it, sglang_patches applied it);
- the unit's start line is there with ``api_key='<redacted>'``, and the whole journal holds no key;
- the control: the same simulator of the same release venv, beside the pristine engine.py sglang_patches
  backed up, logs the key in clear (the leak the set closes; its output is captured, never journaled).
"""

import hashlib
import json
import pathlib

import pytest
import yaml
from private_lab import PrivateLab

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB = PrivateLab("specdec-secrets-")
sh, on_host = LAB.sh, LAB.on_host
SERVICE_VARS = yaml.safe_load((REPO / "inventory" / "group_vars" / "lab" / "service.yml").read_text())
KEY = SERVICE_VARS["sglang_service_api_key"]
VERSION = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())[
    "sglang_runtime_sglang_version"
]
SET = yaml.safe_load((REPO / "patchsets" / f"redact-server-args-{VERSION}" / "patchset.yml").read_text())
ENGINE = "sglang/srt/entrypoints/engine.py"


@pytest.fixture(scope="module")
def deployed():
    """A lab host deployed with the lab's inventory (API key set); the deploy's output."""
    LAB.up()
    try:
        sh(["ansible-playbook", "lab/playbooks/lab.yml", "-l", "lab1"])
        deploy = sh(["ansible-playbook", "deploy.yml", "-l", "lab1"], timeout=1500)
        yield deploy.stdout
    finally:
        LAB.down()


def release_file(path):
    """A file of the current release's site-packages (glob: the venv's python version)."""
    script = f"import glob, sys; print(glob.glob('/opt/sglang/current/venv/lib/python3*/site-packages/{path}')[0])"
    return on_host(f"python3 -c {json.dumps(script)}").stdout.strip()


def test_the_plan_chose_the_set_and_the_release_runs_its_result(deployed):
    assert f"redact-server-args-{VERSION}" in deployed
    engine = release_file(ENGINE)
    digest = on_host(f"sha256sum {engine}").stdout.split()[0]
    assert digest == SET["files"][0]["result_sha256"]
    assert hashlib.sha256(b"").hexdigest() != digest


def test_the_whole_journal_holds_no_key_and_the_start_line_is_redacted(deployed):
    unit = on_host("journalctl -u sglang.service --no-pager -o cat").stdout
    lines = [line for line in unit.splitlines() if "server_args=ServerArgs(" in line]
    assert lines, unit[-3000:]
    assert all("api_key='<redacted>'" in line for line in lines), lines[-1][:400]
    journal = on_host("journalctl --no-pager -o cat", timeout=300).stdout
    assert len(journal.splitlines()) > 100
    assert KEY not in journal


def test_the_same_simulator_beside_the_pristine_engine_py_logs_the_key(deployed):
    """The control: the backup sglang_patches kept of the real engine.py, on a path of its own."""
    backup = on_host(
        "ls /opt/sglang/current/patch-backups/redact-server-args-*/files/" + ENGINE,
    ).stdout.split()[0]
    digest = on_host(f"sha256sum {backup}").stdout.split()[0]
    assert digest == SET["files"][0]["base_sha256"]
    out = on_host(
        "set -e; d=$(mktemp -d); mkdir -p $d/sglang/srt/entrypoints; : >$d/sglang/__init__.py; "
        f"cp {backup} $d/sglang/srt/entrypoints/engine.py; "
        "PYTHONPATH=$d /opt/sglang/current/venv/bin/python -c 'import importlib.util as u; "
        'print("sglang found in", u.find_spec("sglang").submodule_search_locations)\'; '
        "PYTHONPATH=$d SGLANG_SIM_LOAD_S=60 timeout 8 /opt/sglang/current/venv/bin/sglang-engine-simulator "
        "--config /etc/sglang/sglang.yaml --model-path /models/none --port 30999 2>&1 | grep -F server_args= || true;"
        " rm -rf $d",
        timeout=60,
    ).stdout
    assert "server_args=ServerArgs(" in out, out
    assert f"api_key={KEY!r}" in out, out  # the leak, with the pristine file (and where sglang was found)
