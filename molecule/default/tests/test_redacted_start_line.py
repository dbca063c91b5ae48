"""The redact-server-args set on the deployed host: the release runs its result, the start line is redacted.

Real sglang logs its server args, API key included, at every start; the deploy plan applies the runtime's
``redact-server-args-<version>`` set for every request, so the line shows ``<redacted>``. The engine
simulator (TEST DOUBLE) behaves like sglang here: it reads the engine.py of the sglang installed beside it
in the release venv and logs the key in clear unless that file carries the patch. This scenario's deploy
has ``sglang_service_api_key`` set (inventory/group_vars/lab); test_default.py checks the whole journal
holds no key. Runs after test_default.py (file order), before the checks that redeploy.

- the release's engine.py is the set's result (the plan chose the set, sglang_patches applied it);
- every start line in the unit's journal shows the key as ``'<redacted>'`` (0.5.17 and 0.5.23 format it differently);
- the control: the same simulator of the same release venv, beside the pristine engine.py sglang_patches
  backed up, logs the key in clear (the leak the set closes; its output is captured, never journaled).
"""

import hashlib
import json
import pathlib

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
VERSION = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())[
    "sglang_runtime_sglang_version"
]
SET_NAME = f"redact-server-args-{VERSION}"
SET = yaml.safe_load((REPO / "patchsets" / SET_NAME / "patchset.yml").read_text())
ENGINE = "sglang/srt/entrypoints/engine.py"


def release_file(lab_host, path):
    """A file of the current release's site-packages (glob: the venv's python version)."""
    script = f"import glob; print(glob.glob('/opt/sglang/current/venv/lib/python3*/site-packages/{path}')[0])"
    return lab_host.check_output("python3 -c %s", script).strip()


def sha256(lab_host, path):
    return lab_host.check_output("sha256sum %s", path).split()[0]


def test_the_plan_chose_the_set_and_the_release_runs_its_result(lab_host):
    release = json.loads(lab_host.file("/opt/sglang/current/release.json").content_string)
    assert SET_NAME in [s["dir"] for s in release["inputs"]["patch_sets"]], release["inputs"]["patch_sets"]
    digest = sha256(lab_host, release_file(lab_host, ENGINE))
    assert digest == SET["files"][0]["result_sha256"]
    assert digest != hashlib.sha256(b"").hexdigest()


def test_every_start_line_in_the_journal_is_redacted(lab_host):
    unit = lab_host.check_output("journalctl -u sglang.service --no-pager -o cat")
    lines = [line for line in unit.splitlines() if "server_args=" in line]
    assert lines, unit[-3000:]
    assert all("'<redacted>'" in line for line in lines), lines[-1][:400]


def test_the_same_simulator_beside_the_pristine_engine_py_logs_the_key(lab_host, key):
    """The control: the backup sglang_patches kept of the real engine.py, on a path of its own."""
    backup = lab_host.check_output("ls /opt/sglang/current/patch-backups/%s/files/%s", SET_NAME, ENGINE).split()[0]
    assert sha256(lab_host, backup) == SET["files"][0]["base_sha256"]
    out = lab_host.check_output(
        "set -e; d=$(mktemp -d); mkdir -p $d/sglang/srt/entrypoints; : >$d/sglang/__init__.py; "
        "cp %s $d/sglang/srt/entrypoints/engine.py; "
        "PYTHONPATH=$d SGLANG_SIM_LOAD_S=60 timeout 8 /opt/sglang/current/venv/bin/sglang-engine-simulator "
        "--config /etc/sglang/sglang.yaml --model-path /models/none --port 30999 2>&1 | grep -F server_args= || true;"
        " rm -rf $d",
        backup,
    )
    assert "server_args=" in out, out
    assert key in out and "<redacted>" not in out, out  # the leak, with the pristine file
