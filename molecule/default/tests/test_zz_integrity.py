"""Weights integrity: a deploy onto a model with a truncated shard fails in preflight, naming the file.

Runs after test_default.py (file order): it deploys again, with sglang_service_model_path pointing at
a copy of the lab's target model whose second shard lost its last 100 bytes. The deploy must fail in
preflight with class model_integrity and the shard's path, and the running unit must be untouched
(same main PID and invocation, the unit file still pointing at the good model).
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

BROKEN = "/var/tmp/molecule-broken-target"
SHARD = BROKEN + "/model-00002-of-00002.safetensors"
REPO = pathlib.Path(__file__).resolve().parents[3]


def show(lab_host):
    out = lab_host.check_output("systemctl show --property=MainPID,InvocationID,NRestarts sglang.service")
    return dict(line.split("=", 1) for line in out.splitlines())


@pytest.fixture(scope="module")
def broken_deploy(host, lab_host):
    model = host.ansible.get_variables().get("sglang_service_model_path", "/models/Qwen3.6-27B")
    lab_host.check_output("rm -rf %s && cp -a %s %s && truncate -s -100 %s" % (BROKEN, model, BROKEN, SHARD))
    before = show(lab_host)
    unit_before = lab_host.file("/etc/systemd/system/sglang.service").content_string
    proc = subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            str(REPO / "playbooks" / "deploy.yml"),
            "-e",
            json.dumps({"sglang_service_model_path": BROKEN, "sglang_service_report_dir": ""}),
        ],
        cwd=str(REPO),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
    )
    after = show(lab_host)
    unit_after = lab_host.file("/etc/systemd/system/sglang.service").content_string
    lab_host.check_output("rm -rf %s" % BROKEN)
    return proc, before, after, unit_before, unit_after


def test_a_truncated_shard_fails_the_deploy_in_preflight_naming_the_file(broken_deploy):
    proc, *_ = broken_deploy
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "model_integrity: sglang_service_model_path=%s: %s" % (BROKEN, SHARD) in out, out[-3000:]
    assert "cut short by 100 bytes" in out
    assert "Check the weights of the model directories" in out
    # nothing after preflight ran: no release was built, no unit was rendered
    deploy_play = out.split("PLAY [Deploy]", 1)[1]
    assert "TASK [specdec.sglang.sglang_runtime" not in deploy_play
    assert "TASK [specdec.sglang.sglang_service" not in deploy_play


def test_the_running_unit_was_never_stopped_or_rewritten(broken_deploy):
    _, before, after, unit_before, unit_after = broken_deploy
    assert after == before
    assert unit_after == unit_before
    assert BROKEN not in unit_after


def test_the_first_good_deploy_recorded_the_sha256_manifest(lab_host):
    manifest = json.loads(
        lab_host.file("/opt/sglang/state/model-manifests/models_Qwen3.6-27B.sha256.json").content_string
    )
    assert sorted(manifest["files"]) == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert all(len(entry["sha256"]) == 64 for entry in manifest["files"].values())
    assert lab_host.file("/opt/sglang/state/model-manifests/models_Qwen3.6-27B.sha256.json").mode == 0o600
