"""The sglang_uv module wrapper: check mode writes nothing; a failed step is the module's failure."""

from ansible_collections.specdec.sglang.plugins.modules import sglang_uv
from support.module_run import run_main, set_module_args


def run(monkeypatch, capsys, **params):
    set_module_args(monkeypatch, params)
    return run_main(sglang_uv.main, capsys)


def test_check_mode_on_a_fresh_host_reports_a_change_and_writes_nothing(monkeypatch, capsys, tmp_path):
    tool = tmp_path / "tools" / "uv-0.9.5"
    out = run(monkeypatch, capsys, tool_dir=str(tool), version="0.9.5", _ansible_check_mode=True)
    assert out["changed"] is True and out["installed"] is False
    assert out["uv"] == str(tool / "bin" / "uv")
    assert not (tmp_path / "tools").exists()


def test_a_venv_that_cannot_be_made_fails_naming_it(monkeypatch, capsys, tmp_path):
    tool = tmp_path / "tools" / "uv-0.9.5"
    out = run(monkeypatch, capsys, tool_dir=str(tool), version="0.9.5", python=str(tmp_path / "no-python"))
    assert out["failed"] is True
    assert out["msg"].startswith("creating the uv tool venv %s failed (rc 127): " % tool)
    assert "No such file or directory" in out["msg"]
    assert (tmp_path / "tools").is_dir()
