"""The sglang_host_lock module through its entry point, on a lock file under tmp_path: a 0600 file created
atomically with the holder in it, a second run refused naming the holder, a stale lock taken over with a
warning, only the holder's release removes it."""

import json
import os
import stat

from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock
from ansible_collections.specdec.sglang.plugins.modules import sglang_host_lock
from support.module_run import run_main, set_module_args


def lock(monkeypatch, capsys, path, run_id, **params):
    set_module_args(
        monkeypatch,
        {"path": str(path), "run_id": run_id, "owner": "ctl1", "controller_pid": 77, "play": "Deploy", **params},
    )
    return run_main(sglang_host_lock.main, capsys)


def test_the_lock_is_a_0600_file_naming_the_run(monkeypatch, capsys, tmp_path):
    path = tmp_path / "state" / "host.lock"
    out = lock(monkeypatch, capsys, path, "run-a")
    assert out["changed"] and out["action"] == "acquire"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    found = json.loads(path.read_text())
    assert (found["run_id"], found["owner"], found["controller_pid"], found["play"]) == ("run-a", "ctl1", 77, "Deploy")
    again = lock(monkeypatch, capsys, path, "run-a")
    assert not again["changed"] and again["action"] == "ours"


def test_a_second_run_is_refused_naming_the_holder(monkeypatch, capsys, tmp_path):
    path = tmp_path / "host.lock"
    lock(monkeypatch, capsys, path, "run-a")
    out = lock(monkeypatch, capsys, path, "run-b", timeout_s=1, poll_s=0.2)
    assert out["failed"] and out["action"] == "refuse" and out["failure_class"] == "host_locked"
    assert "run run-a of play 'Deploy' from ctl1 (controller pid 77)" in out["msg"]
    assert out["waited_s"] >= 1
    assert json.loads(path.read_text())["run_id"] == "run-a"


def test_a_stale_lock_is_taken_over_with_a_warning(monkeypatch, capsys, tmp_path):
    path = tmp_path / "host.lock"
    old = host_lock.make_record("run-old", owner="ctl0", controller_pid=1, play="Stop", started_at=100.0, boot_id="")
    path.write_text(host_lock.dumps(old))
    warned = []
    monkeypatch.setattr(sglang_host_lock.AnsibleModule, "warn", lambda self, text: warned.append(text))
    out = lock(monkeypatch, capsys, path, "run-b", max_age_s=60)
    assert out["changed"] and out["action"] == "take_over"
    assert "run-old" in out["reason"] and "maximum age" in out["reason"]
    assert warned == [out["reason"]]  # said, not only returned
    assert json.loads(path.read_text())["run_id"] == "run-b"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(tmp_path)) == ["host.lock"]


def test_only_the_holder_releases(monkeypatch, capsys, tmp_path):
    path = tmp_path / "host.lock"
    lock(monkeypatch, capsys, path, "run-a")
    kept = lock(monkeypatch, capsys, path, "run-b", state="released")
    assert not kept["changed"] and kept["action"] == "kept" and path.exists()
    released = lock(monkeypatch, capsys, path, "run-a", state="released")
    assert released["changed"] and not path.exists()
    gone = lock(monkeypatch, capsys, path, "run-a", state="released")
    assert not gone["changed"] and gone["reason"] == "no lock is held"
