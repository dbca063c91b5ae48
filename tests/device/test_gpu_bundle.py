# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The offline GPU bundle without network: the lock's format, the manifest agreeing with it, and
scripts/gpu-bundle's slimming and packing being byte-for-byte reproducible."""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import pathlib
import re
import zipfile

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
LOCK = REPO / "requirements" / "gpu-bundle.lock"
MANIFEST = REPO / "inventory" / "manifests" / "sglang-0.5.17-cu130.yml"


def _load_script():
    loader = importlib.machinery.SourceFileLoader("gpu_bundle", str(REPO / "scripts" / "gpu-bundle"))
    spec = importlib.util.spec_from_loader("gpu_bundle", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


gpu_bundle = _load_script()
ENTRIES = gpu_bundle.parse_lock(LOCK.read_text(encoding="utf-8"))
SHA = "a" * 64


def test_the_lock_parses_with_both_groups_and_every_bundled_hash():
    groups = {e["group"] for e in ENTRIES}
    assert groups == {"wheelhouse", "controller"}
    assert all(e["bundled"] != "-" for e in ENTRIES), "run scripts/gpu-bundle --update-lock"
    names = {e["name"] for e in ENTRIES if e["group"] == "wheelhouse"}
    assert {"sglang", "sglang-kernel", "flashinfer-python", "xgrammar", "apache-tvm-ffi"} <= names
    assert {e["name"] for e in ENTRIES if e["group"] == "controller"} >= {"ansible-core", "cryptography"}
    sglang = next(e for e in ENTRIES if e["name"] == "sglang")
    assert sglang["version"] == "0.5.17" and "cp312" in sglang["file"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("wheelhouse sglang 0.5.17 sglang-0.5.17-cp312-cp312-x.whl sha256=abc bundled=-", "not '<group>"),
        ("server sglang 0.5.17 sglang-0.5.17-cp312-cp312-x.whl sha256=%s bundled=-" % SHA, "group 'server'"),
        ("wheelhouse sglang 0.5.18 sglang-0.5.17-cp312-cp312-x.whl sha256=%s bundled=-" % SHA, "is not sglang 0.5.18"),
        ("wheelhouse sglang 0.5.17 sglang-0.5.17.whl sha256=%s bundled=-" % SHA, "is not sglang 0.5.17"),
    ],
)
def test_malformed_lock_lines_are_refused_naming_the_line(line, message):
    with pytest.raises(ValueError, match="line 2: .*" + re.escape(message)):
        gpu_bundle.parse_lock("# header\n" + line + "\n")


def test_a_wheel_listed_twice_in_a_group_is_refused():
    line = "wheelhouse dill 0.4.1 dill-0.4.1-py3-none-any.whl sha256=%s bundled=%s\n" % (SHA, SHA)
    with pytest.raises(ValueError, match="listed twice"):
        gpu_bundle.parse_lock(line + line)
    assert len(gpu_bundle.parse_lock(line + line.replace("wheelhouse", "controller"))) == 2


def test_an_empty_lock_is_refused():
    with pytest.raises(ValueError, match="no wheels"):
        gpu_bundle.parse_lock("# nothing\n")


def test_the_runtime_manifest_uses_exactly_the_bundled_wheels():
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    lock = {e["name"]: e for e in ENTRIES if e["group"] == "wheelhouse"}
    wheelhouse = [m for m in data["sglang_runtime_manifest"] if m["source"] == "wheelhouse"]
    assert {m["name"] for m in wheelhouse} == set(lock) - {"sglang"}
    for entry in wheelhouse:
        locked = lock[entry["name"]]
        assert entry["version"] == locked["version"], entry["name"]
        assert entry["wheel"].rsplit("/", 1)[-1] == locked["file"], entry["name"]
        assert entry["sha256"] == locked["bundled"], entry["name"]
    sglang = data["sglang_runtime_sglang"]
    assert sglang["version"] == "0.5.17" and sglang["no_deps"] is True
    assert sglang["wheel"].rsplit("/", 1)[-1] == lock["sglang"]["file"]
    assert sglang["sha256"] == lock["sglang"]["bundled"]
    reference = [m for m in data["sglang_runtime_manifest"] if m["source"] == "reference_venv"]
    torch = next(m for m in reference if m["name"] == "torch")
    assert torch["version"] == "2.11.0" and torch["local"] == "cu130"
    assert not {m["name"] for m in reference} & set(lock), "a package comes from two sources"


def _wheel(path, members):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        record = []
        for name, data in members.items():
            zf.writestr(name, data)
            digest = hashlib.sha256(data).hexdigest()
            record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
        record.append("demo-1.0.dist-info/RECORD,,")
        zf.writestr("demo-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_slimming_drops_members_and_their_record_lines_reproducibly(tmp_path):
    src = tmp_path / "demo-1.0-py3-none-any.whl"
    _wheel(
        src,
        {
            "sgl_kernel/__init__.py": b"x = 1\n",
            "sgl_kernel/sm90/common_ops.abi3.so": b"\x7fELF keep",
            "sgl_kernel/flash_ops.abi3.so": b"\x7fELF drop",
            "sgl_kernel/sm100/common_ops.abi3.so": b"\x7fELF drop",
        },
    )
    out1, out2 = tmp_path / "a.whl", tmp_path / "b.whl"
    dropped = gpu_bundle.rewrite_wheel(str(src), str(out1), gpu_bundle.slim_patterns("sglang-kernel"))
    gpu_bundle.rewrite_wheel(str(src), str(out2), gpu_bundle.slim_patterns("sglang-kernel"))
    assert sorted(dropped) == ["sgl_kernel/flash_ops.abi3.so", "sgl_kernel/sm100/common_ops.abi3.so"]
    assert out1.read_bytes() == out2.read_bytes()
    with zipfile.ZipFile(out1) as zf:
        names = zf.namelist()
        record = zf.read("demo-1.0.dist-info/RECORD").decode()
        assert all(info.compress_type == zipfile.ZIP_STORED for info in zf.infolist())
        assert all(info.date_time == (1980, 1, 1, 0, 0, 0) for info in zf.infolist())
    assert "sgl_kernel/sm90/common_ops.abi3.so" in names and "sgl_kernel/flash_ops.abi3.so" not in names
    assert "flash_ops" not in record and "sm100" not in record and "sm90/common_ops" in record


def test_the_archive_is_the_same_bytes_every_time(tmp_path):
    a = tmp_path / "one.whl"
    a.write_bytes(b"wheel one")
    b = tmp_path / "two.whl"
    b.write_bytes(b"wheel two")
    files = [("wheelhouse/two.whl", str(b)), ("controller/one.whl", str(a))]
    gpu_bundle.pack(files, str(tmp_path / "x.tar.xz"))
    os.utime(a, (1, 1))  # mtimes never reach the archive
    gpu_bundle.pack(list(reversed(files)), str(tmp_path / "y.tar.xz"))
    assert (tmp_path / "x.tar.xz").read_bytes() == (tmp_path / "y.tar.xz").read_bytes()


def test_only_the_two_large_wheels_are_slimmed():
    assert set(gpu_bundle.SLIM) == {"sglang-kernel", "xgrammar"}
    assert gpu_bundle.slim_patterns("dill") == ()


def test_lean_leaves_out_flashinfers_jit_headers_and_sglangs_diffusion_runtime_only_when_asked():
    assert gpu_bundle.slim_patterns("flashinfer-python") == () and gpu_bundle.slim_patterns("sglang") == ()
    lean = gpu_bundle.slim_patterns("flashinfer-python", lean=True)
    assert lean == ("flashinfer/data/cutlass/*", "flashinfer/data/cccl/*")
    assert gpu_bundle.slim_patterns("sglang", lean=True) == ("sglang/multimodal_gen/*", "sglang/srt/grpc/_core.*")
    assert gpu_bundle.slim_patterns("xgrammar", lean=True) == gpu_bundle.slim_patterns("xgrammar")
    assert gpu_bundle.LEAN_ARCHIVE != gpu_bundle.ARCHIVE
    lock = gpu_bundle.parse_lock(open(gpu_bundle.LOCK, encoding="utf-8").read())
    assert gpu_bundle.LEAN_SKIP <= {(e["group"], e["name"]) for e in lock}  # names the lock still has
