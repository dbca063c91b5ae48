"""Contract: the sglang_patchset module applies and reverts the committed set on the real 0.5.23 file."""

import pathlib
import shutil
import sys

import pytest
from ansible_collections.specdec.sglang.plugins.modules import sglang_patchset
from support.module_run import run_main, set_module_args

REPO = pathlib.Path(__file__).resolve().parents[2]
SET_DIR = REPO / "patchsets" / "ddtree-spec-info"
SPEC_INFO = "sglang/srt/speculative/spec_info.py"


def run(monkeypatch, capsys, **params):
    set_module_args(monkeypatch, params)
    return run_main(sglang_patchset.main, capsys)


@pytest.fixture
def site(tmp_path, sglang_source_tree):
    root = tmp_path / "site-packages"
    (root / SPEC_INFO).parent.mkdir(parents=True)
    shutil.copy2(sglang_source_tree / SPEC_INFO, root / SPEC_INFO)
    return root


def test_validated_returns_the_manifest_for_later_tasks(monkeypatch, capsys, sglang_source_tree):
    out = run(monkeypatch, capsys, state="validated", src=str(SET_DIR), source_tree=str(sglang_source_tree))
    assert out["changed"] is False
    assert out["manifest"]["name"] == "ddtree-spec-info"
    assert out["files"][0]["base"] == "ok"


def test_apply_then_reapply_then_revert(monkeypatch, capsys, site, tmp_path):
    common = {
        "src": str(SET_DIR),
        "python": sys.executable,
        "site_packages": str(site),
        "backup_dir": str(tmp_path / "backup"),
    }
    first = run(monkeypatch, capsys, state="applied", **common)
    assert first["changed"] is True
    assert first["verify"]["ok"] is True and first["verify"]["mode"] == "compile"
    assert run(monkeypatch, capsys, state="applied", **common)["changed"] is False
    reverted = run(monkeypatch, capsys, state="reverted", **common)
    assert reverted["changed"] is True and reverted["files"][0]["action"] == "restore"
    assert reverted["verify"]["ok"] is True


def test_base_mismatch_fails_with_file_and_both_checksums(monkeypatch, capsys, site, tmp_path):
    (site / SPEC_INFO).write_bytes(b"tampered\n")
    out = run(
        monkeypatch, capsys, state="applied", src=str(SET_DIR), python=sys.executable,
        site_packages=str(site), backup_dir=str(tmp_path / "backup"),
    )  # fmt: skip
    assert out["failed"] is True
    assert out["file"] == SPEC_INFO
    assert out["expected_sha256"] in out["msg"] and out["found_sha256"] in out["msg"]
