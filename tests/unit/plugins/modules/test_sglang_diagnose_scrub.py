"""The sglang_diagnose_scrub module: files of a bundle rewritten without secrets; values never in the result."""

import json

from ansible_collections.specdec.sglang.plugins.modules import sglang_diagnose_scrub
from support.module_run import run_main, set_module_args

KEY = "sk-module-test-0123"


def run(monkeypatch, capsys, **params):
    set_module_args(monkeypatch, params)
    return run_main(sglang_diagnose_scrub.main, capsys)


def bundle(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "sglang.yaml").write_text(f'# managed\napi-key: "{KEY}"\n')
    (tmp_path / "etc" / "sglang.env").write_text('HOME="/h"\nHF_TOKEN="hf_tok_42"\n')
    b = tmp_path / "bundle"
    b.mkdir()
    (b / "journal.log").write_text(f"server_args=ServerArgs(api_key='{KEY}', port=1)\nerror: bad key {KEY}\n")
    (b / "nvidia-smi.txt").write_text("no secret here\n")
    (b / "pip-freeze.txt").write_text("hf_tok_42 appears here\n")
    return b, [str(tmp_path / "etc" / "sglang.yaml"), str(tmp_path / "etc" / "sglang.env"), str(tmp_path / "none")]


def test_every_file_of_the_directory_is_scrubbed_and_the_values_stay_out_of_the_result(monkeypatch, capsys, tmp_path):
    b, secret_files = bundle(tmp_path)
    out = run(monkeypatch, capsys, paths=[str(b)], secret_files=secret_files)
    assert out["changed"] is True and out["redacted"] == 3 and out["secret_values"] == 2
    assert {f["path"].rsplit("/", 1)[1]: f["redacted"] for f in out["files"]} == {
        "journal.log": 2, "nvidia-smi.txt": 0, "pip-freeze.txt": 1,
    }  # fmt: skip
    journal = (b / "journal.log").read_text()
    assert journal == "server_args=ServerArgs(api_key='<redacted>', port=1)\nerror: bad key <redacted>\n"
    assert KEY not in json.dumps(out) and "hf_tok_42" not in json.dumps(out)
    assert (b / "nvidia-smi.txt").read_text() == "no secret here\n"


def test_check_mode_writes_nothing(monkeypatch, capsys, tmp_path):
    b, secret_files = bundle(tmp_path)
    out = run(monkeypatch, capsys, paths=[str(b / "journal.log")], secret_files=secret_files, _ansible_check_mode=True)
    assert out["changed"] is True and out["redacted"] == 2
    assert KEY in (b / "journal.log").read_text()
