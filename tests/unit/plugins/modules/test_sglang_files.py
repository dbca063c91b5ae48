"""The sglang_files module through its entry point, on files under tmp_path: content written only where it
differs, atomically and with its mode from the start; directories created with their parents; modes put
right on entries whose content is right; check mode changes nothing; diff mode shows the text."""

import os
import stat

from ansible_collections.specdec.sglang.plugins.modules import sglang_files
from support.module_run import run_main, set_module_args

ME = str(os.getuid())
MY_GROUP = str(os.getgid())


def put(monkeypatch, capsys, files, **flags):
    for item in files:
        item.setdefault("owner", ME)
        item.setdefault("group", MY_GROUP)
    set_module_args(monkeypatch, {"files": files, **flags})
    return run_main(sglang_files.main, capsys)


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_directories_and_files_are_created_in_order(monkeypatch, capsys, tmp_path):
    base = tmp_path / "a" / "b"
    out = put(
        monkeypatch,
        capsys,
        [
            {"path": str(base), "state": "directory", "mode": "0700"},
            {"path": str(base / "secret.env"), "content": "KEY=1\n", "mode": "0600"},
            {"path": str(base / "unit.service"), "content": "[Unit]\n", "mode": "0644"},
        ],
    )
    assert out["changed"] and out["changed_paths"] == [str(base), str(base / "secret.env"), str(base / "unit.service")]
    assert [entry["action"] for entry in out["files"]] == ["create", "create", "create"]
    assert mode(base) == 0o700 and (tmp_path / "a").is_dir()
    assert (base / "secret.env").read_text() == "KEY=1\n" and mode(base / "secret.env") == 0o600
    assert mode(base / "unit.service") == 0o644
    assert sorted(os.listdir(base)) == ["secret.env", "unit.service"]  # no temporary file left


def test_a_second_run_changes_nothing(monkeypatch, capsys, tmp_path):
    files = [{"path": str(tmp_path / "f"), "content": "one\n", "mode": "0640"}]
    put(monkeypatch, capsys, [dict(item) for item in files])
    again = put(monkeypatch, capsys, [dict(item) for item in files])
    assert not again["changed"] and again["changed_paths"] == [] and again["files"][0]["action"] == "keep"


def test_only_the_file_that_differs_is_rewritten(monkeypatch, capsys, tmp_path):
    same, other = tmp_path / "same", tmp_path / "other"
    same.write_text("keep\n")
    other.write_text("old\n")
    os.chmod(same, 0o644)
    os.chmod(other, 0o644)
    inode = same.stat().st_ino
    out = put(
        monkeypatch,
        capsys,
        [
            {"path": str(same), "content": "keep\n", "mode": "0644"},
            {"path": str(other), "content": "new\n", "mode": "0644"},
        ],
    )
    assert out["changed_paths"] == [str(other)]
    assert same.stat().st_ino == inode  # not rewritten
    assert other.read_text() == "new\n"


def test_a_file_with_the_right_content_and_a_wrong_mode_is_put_right(monkeypatch, capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}\n")
    os.chmod(path, 0o644)
    out = put(monkeypatch, capsys, [{"path": str(path), "content": "{}\n", "mode": "0600"}])
    assert out["changed"] and out["files"][0] == {"path": str(path), "action": "keep", "changed": True}
    assert mode(path) == 0o600


def test_check_mode_reports_and_changes_nothing(monkeypatch, capsys, tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    out = put(
        monkeypatch,
        capsys,
        [
            {"path": str(tmp_path / "newdir"), "state": "directory", "mode": "0755"},
            {"path": str(path), "content": "new\n", "mode": "0644"},
        ],
        _ansible_check_mode=True,
    )
    assert out["changed"] and [entry["action"] for entry in out["files"]] == ["create", "replace"]
    assert path.read_text() == "old\n" and not (tmp_path / "newdir").exists()


def test_diff_mode_shows_the_text_before_and_after(monkeypatch, capsys, tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    out = put(monkeypatch, capsys, [{"path": str(path), "content": "new\n", "mode": "0644"}], _ansible_diff=True)
    assert out["diff"] == [{"before_header": str(path), "after_header": str(path), "before": "old\n", "after": "new\n"}]


def test_src_or_template_left_unresolved_is_refused(monkeypatch, capsys, tmp_path):
    out = put(monkeypatch, capsys, [{"path": str(tmp_path / "f"), "src": "f.txt", "content": "x", "mode": "0644"}])
    assert out["failed"] and "read on the controller (the action plugin)" in out["msg"]
    assert not (tmp_path / "f").exists()


def test_a_file_in_a_missing_directory_fails_naming_it(monkeypatch, capsys, tmp_path):
    path = tmp_path / "missing" / "f"
    out = put(monkeypatch, capsys, [{"path": str(path), "content": "x\n", "mode": "0644"}])
    assert out["failed"] and out["msg"].startswith("sglang_files: cannot write %s" % path)


def test_a_directory_where_a_file_belongs_is_refused(monkeypatch, capsys, tmp_path):
    (tmp_path / "d").mkdir()
    out = put(monkeypatch, capsys, [{"path": str(tmp_path / "d"), "content": "x\n", "mode": "0644"}])
    assert out["failed"] and out["msg"] == "sglang_files: %s is a directory, not a file" % (tmp_path / "d")
