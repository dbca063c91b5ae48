"""model_integrity: a model directory's weights are whole (config, tokenizer, shards, headers, sizes, sha256)."""

import hashlib
import json
import struct

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._host import model_integrity as mi


class MemFiles:
    """An in-memory model directory with the methods of model_integrity.Files."""

    def __init__(self, root, contents):
        self.root = root
        self.contents = dict(contents)
        self.hashed = []

    def listdir(self, path):
        assert path == self.root
        return sorted(self.contents)

    def isdir(self, path):
        return path == self.root

    def size(self, path):
        data = self.contents.get(path[len(self.root) + 1 :])
        return None if data is None else len(data)

    def read_head(self, path, offset, length):
        return self.contents[path[len(self.root) + 1 :]][offset : offset + length]

    def read_text(self, path):
        return self.contents[path[len(self.root) + 1 :]].decode("utf-8")

    def sha256(self, path):
        self.hashed.append(path)
        return hashlib.sha256(self.contents[path[len(self.root) + 1 :]]).hexdigest()


def shard(tensors):
    head, data_len = mi.encode_header(tensors)
    return head + b"\x01" * data_len


def good_model(shards=2, tokenizer=True):
    contents = {"config.json": b'{"architectures": ["Qwen3ForCausalLM"]}'}
    if tokenizer:
        contents["tokenizer.json"] = b"{}"
    weight_map = {}
    for i in range(1, shards + 1):
        name = "model-%05d-of-%05d.safetensors" % (i, shards)
        contents[name] = shard([("layer.%d.w" % i, "BF16", [4, 8]), ("layer.%d.b" % i, "F32", [8])])
        weight_map["layer.%d.w" % i] = name
        weight_map["layer.%d.b" % i] = name
    contents[mi.INDEX] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return contents


def check(contents, **kwargs):
    files = MemFiles("/models/target", contents)
    return mi.check_directory("/models/target", files=files, **kwargs), files


def failure(contents, **kwargs):
    with pytest.raises(mi.IntegrityError) as info:
        check(contents, **kwargs)
    return info.value


def test_a_good_model_passes_with_every_shard_and_tensor_counted():
    summary, files = check(good_model(3))
    assert summary["shards"] == 3
    assert summary["tensors"] == 6
    assert summary["bytes"] == sum(len(v) for k, v in good_model(3).items() if k.endswith(".safetensors"))
    assert files.hashed == []  # no sha256 unless asked
    assert summary["sha256_checked"] is False


def test_a_truncated_shard_is_named_with_the_missing_bytes():
    contents = good_model(2)
    name = "model-00002-of-00002.safetensors"
    contents[name] = contents[name][:-5]
    err = failure(contents)
    assert err.path == "/models/target/" + name
    assert "cut short by 5 bytes" in err.problem


def test_a_shard_cut_inside_its_header_is_named():
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] = contents[name][:20]
    err = failure(contents)
    assert err.path.endswith(name)
    assert "cut short" in err.problem


def test_trailing_bytes_after_the_data_are_refused():
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] += b"\0" * 3
    assert "3 trailing bytes" in failure(contents).problem


def test_a_shard_the_index_names_but_the_directory_lacks_is_named():
    contents = good_model(3)
    del contents["model-00002-of-00003.safetensors"]
    err = failure(contents)
    assert err.path == "/models/target/model-00002-of-00003.safetensors"
    assert "1 of 3 shards missing" in err.problem


def test_a_header_that_is_not_json_is_refused():
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] = struct.pack("<Q", 8) + b"not json" + b"\0" * 16
    err = failure(contents)
    assert err.path.endswith(name)
    assert "not JSON" in err.problem


def test_a_header_length_beyond_any_header_is_refused():
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] = struct.pack("<Q", 2**40) + b"{}"
    assert "not a safetensors header length" in failure(contents).problem


def test_overlapping_or_gapped_tensors_are_refused():
    a = {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}
    b = {"dtype": "U8", "shape": [4], "data_offsets": [6, 10]}
    raw = json.dumps({"a": a, "b": b}).encode()
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] = struct.pack("<Q", len(raw)) + raw + b"\0" * 10
    assert "leave a gap" in failure(contents).problem


def test_a_tensor_whose_range_does_not_match_its_shape_is_refused():
    raw = json.dumps({"a": {"dtype": "BF16", "shape": [4], "data_offsets": [0, 4]}}).encode()
    contents = good_model(1)
    name = "model-00001-of-00001.safetensors"
    contents[name] = struct.pack("<Q", len(raw)) + raw + b"\0" * 4
    assert "needs 8 bytes" in failure(contents).problem


def test_missing_config_and_missing_tokenizer_are_named():
    contents = good_model(1)
    del contents["config.json"]
    assert failure(contents).path == "/models/target/config.json"
    contents = good_model(1, tokenizer=False)
    err = failure(contents)
    assert "no tokenizer" in err.problem
    # a draft model has no tokenizer of its own
    summary, _ = check(contents, require_tokenizer=False)
    assert summary["shards"] == 1


def test_a_directory_without_index_checks_every_safetensors_file():
    contents = good_model(2)
    del contents[mi.INDEX]
    contents["model-00002-of-00002.safetensors"] = contents["model-00002-of-00002.safetensors"][:-1]
    assert failure(contents).path.endswith("model-00002-of-00002.safetensors")


def test_a_directory_without_weights_is_refused():
    err = failure({"config.json": b"{}", "tokenizer.json": b"{}"})
    assert "no safetensors weights" in err.problem


def test_the_recorded_manifest_catches_changed_bytes_only_with_sha256():
    contents = good_model(2)
    summary, files = check(contents, sha256=True)
    assert len(files.hashed) == 2
    manifest = mi.manifest_of(summary)
    name = "model-00001-of-00002.safetensors"
    same_size = bytearray(contents[name])
    same_size[-1] ^= 0xFF
    contents[name] = bytes(same_size)
    # headers and sizes are whole: without sha256 this passes
    ok, _ = check(contents, manifest=manifest)
    assert ok["sha256_checked"] is False
    err = failure(contents, manifest=manifest, sha256=True)
    assert err.path.endswith(name)
    assert "the bytes changed" in err.problem


def test_a_manifest_names_a_shard_that_is_gone_or_new():
    contents = good_model(2)
    summary, _ = check(contents)
    manifest = mi.manifest_of(summary)
    manifest["files"]["model-00003-of-00002.safetensors"] = {"size": 1}
    assert "no longer a weight file" in failure(contents, manifest=manifest).problem


def test_the_real_files_class_reads_a_written_model(tmp_path):
    for name, data in good_model(2).items():
        (tmp_path / name).write_bytes(data)
    summary = mi.check_directory(str(tmp_path), sha256=True)
    assert summary["shards"] == 2 and summary["sha256_checked"] is False
    assert all(len(v["sha256"]) == 64 for v in summary["files"].values())
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(b"\0" * 4)
    with pytest.raises(mi.IntegrityError, match="too short"):
        mi.check_directory(str(tmp_path))


def test_manifest_names_are_plain_file_names():
    assert mi.manifest_name("/models/Qwen3.6-27B/") == "models_Qwen3.6-27B.sha256.json"
