"""The sglang_patchset module wrapper: parameters in, result data out, refusals as data."""

import pathlib
import sys

from ansible_collections.specdec.sglang.plugins.modules import sglang_patchset
from support.module_run import run_main, set_module_args

REPO = pathlib.Path(__file__).resolve().parents[4]
SET_DIR = REPO / "patchsets" / "ddtree-spec-info"
SPEC_INFO = "sglang/srt/speculative/spec_info.py"


def run(monkeypatch, capsys, **params):
    set_module_args(monkeypatch, params)
    return run_main(sglang_patchset.main, capsys)


def test_check_mode_without_a_venv_reports_a_change(monkeypatch, capsys, tmp_path):
    out = run(
        monkeypatch, capsys, state="applied", src=str(SET_DIR), venv=str(tmp_path / "no-venv"),
        backup_dir=str(tmp_path / "backup"), _ansible_check_mode=True,
    )  # fmt: skip
    assert out["changed"] is True
    assert "does not exist yet" in out["skipped_reason"]
    assert not (tmp_path / "backup").exists()


def test_missing_backup_dir_is_refused(monkeypatch, capsys):
    out = run(monkeypatch, capsys, state="reverted", src=str(SET_DIR), python=sys.executable)
    assert out["failed"] is True
    assert "backup_dir is required" in out["msg"]


def test_a_labelled_refusal_names_the_set(monkeypatch, capsys):
    label = "sglang_patches_sets[1]=/sets/ddtree (ddtree-spec-info)"
    out = run(monkeypatch, capsys, state="reverted", src=str(SET_DIR), python=sys.executable, label=label)
    assert out["failed"] is True
    assert out["msg"].startswith(label + ": backup_dir is required")
