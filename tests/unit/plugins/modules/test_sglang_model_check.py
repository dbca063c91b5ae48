"""sglang_model_check: fails with model_integrity naming the file; records a manifest once."""

import json
import os

from ansible_collections.specdec.sglang.plugins.module_utils._host import model_integrity as mi
from ansible_collections.specdec.sglang.plugins.modules import sglang_model_check
from support.module_run import run_main, set_module_args


def write_model(root, shards=2):
    root.mkdir()
    (root / "config.json").write_text("{}")
    (root / "tokenizer.json").write_text("{}")
    weight_map = {}
    for i in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (i, shards)
        head, n = mi.encode_header([("w%d" % i, "F16", [3, 5])])
        (root / name).write_bytes(head + b"\0" * n)
        weight_map["w%d" % i] = name
    (root / mi.INDEX).write_text(json.dumps({"weight_map": weight_map}))
    return root


def run(monkeypatch, capsys, **params):
    set_module_args(monkeypatch, params)
    return run_main(sglang_model_check.main, capsys)


def test_a_truncated_shard_fails_with_the_class_and_the_file(tmp_path, monkeypatch, capsys):
    model = write_model(tmp_path / "target")
    shard = model / "model-00002-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-7])
    out = run(monkeypatch, capsys, path=str(model), name="sglang_service_model_path")
    assert out["failed"] is True
    assert out["failure_class"] == "model_integrity"
    assert out["file"] == str(shard)
    assert str(shard) in out["msg"] and "sglang_service_model_path" in out["msg"]
    assert "cut short by 7 bytes" in out["msg"]
    assert out["hint"]


def test_record_writes_the_manifest_once_and_check_then_compares_digests(tmp_path, monkeypatch, capsys):
    model = write_model(tmp_path / "target")
    manifests = tmp_path / "manifests"
    out = run(monkeypatch, capsys, path=str(model), sha256=True, manifest_dir=str(manifests), state="record")
    assert out["changed"] is True and out["ok"] is True
    path = manifests / mi.manifest_name(str(model))
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    recorded = json.loads(path.read_text())
    assert set(recorded["files"]) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    again = run(monkeypatch, capsys, path=str(model), sha256=True, manifest_dir=str(manifests), state="record")
    assert again["changed"] is False
    shard = model / "model-00001-of-00002.safetensors"
    data = bytearray(shard.read_bytes())
    data[-1] = 1
    shard.write_bytes(bytes(data))
    out = run(monkeypatch, capsys, path=str(model), sha256=True, manifest_dir=str(manifests))
    assert out["failed"] is True and out["file"] == str(shard)
    assert "the bytes changed" in out["problem"]


def test_a_required_manifest_that_was_never_recorded_fails(tmp_path, monkeypatch, capsys):
    model = write_model(tmp_path / "target")
    out = run(monkeypatch, capsys, path=str(model), manifest_dir=str(tmp_path / "m"), manifest_required=True)
    assert out["failed"] is True and out["failure_class"] == "model_integrity"
    assert "manifest_required" in out["problem"]
