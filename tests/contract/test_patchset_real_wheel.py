"""Contract: the ddtree-spec-info patch set of this collection against the real sglang 0.5.23 wheel.

spec_info.py imports torch and other sglang modules, so it cannot be imported as it ships without a
GPU venv. The tests prove DDTREE two ways: the verify step's syntax-tree check (compile mode, what a
host without torch runs), and a real import of the patched module in a subprocess where torch and two
sglang modules it imports at top level (and sglang/__init__.py) are replaced by small
stubs; spec_info.py and spec_registry.py stay the real files (import mode, what a GPU venv runs).
"""

import base64
import hashlib
import json
import os
import pathlib
import py_compile
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps

REPO = pathlib.Path(__file__).resolve().parents[2]
SET_DIR = REPO / "patchsets" / "ddtree-spec-info"
SPEC_INFO = "sglang/srt/speculative/spec_info.py"
PY = sys.executable
STUBS = {
    "sglang/__init__.py": "",  # the real one imports sglang.srt.environ and more
    "torch/__init__.py": "class device: pass\nclass Tensor: pass\n",
    "sglang/srt/arg_groups/overrides.py": "def resolving_view(x):\n    return x\n",
    "sglang/srt/runtime_context.py": "def get_spec():\n    return None\n",
}


def sha(data):
    return hashlib.sha256(data).hexdigest()


def record_sha(tree, rel):
    """The checksum the wheel's RECORD holds for `rel` (urlsafe base64 sha256)."""
    record = next(tree.glob("sglang-*.dist-info")) / "RECORD"
    for line in record.read_text().splitlines():
        path, digest, _size = line.rsplit(",", 2)
        if path == rel:
            algo, b64 = digest.split("=", 1)
            assert algo == "sha256"
            return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    raise KeyError(rel)


@pytest.fixture
def manifest():
    return yaml.safe_load((SET_DIR / "patchset.yml").read_text())


@pytest.fixture
def site(tmp_path, sglang_source_tree):
    """A site-packages holding the real sglang 0.5.23 files the set touches, its __init__ and dist-info."""
    root = tmp_path / "site-packages"
    for rel in ("sglang/__init__.py", "sglang/srt/speculative/spec_info.py", "sglang/srt/speculative/spec_registry.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(sglang_source_tree / rel, root / rel)
    dist = next(sglang_source_tree.glob("sglang-*.dist-info"))
    (root / dist.name).mkdir()
    for name in ("METADATA", "RECORD"):
        shutil.copy2(dist / name, root / dist.name / name)
    return root


@pytest.fixture
def backup(tmp_path):
    return tmp_path / "release" / "patch-backups" / "ddtree-spec-info"


def apply(site, backup, manifest, src=SET_DIR, **kw):
    return ps.apply(str(src), str(site), str(backup), manifest, PY, **kw)


def revert(site, backup, manifest, **kw):
    return ps.revert(str(site), str(backup), manifest, PY, **kw)


def test_committed_set_matches_the_real_0_5_23_wheel(manifest, sglang_source_tree):
    (entry,) = manifest["files"]
    assert manifest["sglang_version"] == "0.5.23"
    assert entry["path"] == SPEC_INFO
    assert entry["base_sha256"] == record_sha(sglang_source_tree, SPEC_INFO)
    report = ps.validate(str(SET_DIR), manifest, source_tree=str(sglang_source_tree))
    assert report["files"] == [{"path": SPEC_INFO, "source": "diff", "base": "ok"}]


def test_apply_reaches_result_checksum_and_backs_up_original(site, backup, manifest, sglang_source_tree):
    original = (site / SPEC_INFO).read_bytes()
    result = apply(site, backup, manifest)
    assert result["changed"] is True
    (row,) = result["files"]
    assert row == {
        "path": SPEC_INFO,
        "action": "patch",
        "before_sha256": manifest["files"][0]["base_sha256"],
        "after_sha256": manifest["files"][0]["result_sha256"],
    }
    assert sha((site / SPEC_INFO).read_bytes()) == manifest["files"][0]["result_sha256"]
    assert (backup / "files" / SPEC_INFO).read_bytes() == original
    state = json.loads((backup / "state.json").read_text())
    assert state["backed_up"] == [SPEC_INFO]


def test_patched_spec_info_passes_compile_mode_verify_with_ddtree_in_its_syntax_tree(site, backup, manifest):
    apply(site, backup, manifest)
    report = ps.verify(str(site), manifest, PY, mode="compile")
    assert report["ok"], report["errors"]
    assert report["mode"] == "compile"
    assert report["defines"] == [
        "sglang.srt.speculative.spec_info:SpeculativeAlgorithm.DDTREE",
        "sglang.srt.speculative.spec_info:SpeculativeAlgorithm.is_ddtree",
    ]
    assert report["compiled"] == [str(site / SPEC_INFO)]


def test_pristine_spec_info_fails_the_ddtree_define_check(site, manifest):
    report = ps.verify(str(site), manifest, PY, mode="compile")
    assert not report["ok"]
    assert any("SpeculativeAlgorithm.DDTREE: not defined" in e for e in report["errors"])
    assert any("expected result_sha256" in e for e in report["errors"])


def _with_stubs(site):
    for rel, text in STUBS.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(text)


def test_patched_spec_info_imports_and_from_string_ddtree_works(site, backup, manifest):
    apply(site, backup, manifest)
    _with_stubs(site)
    code = (
        "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as S\n"
        "a = S.from_string('DDTREE')\n"
        "print(a.name, a.is_ddtree(), a.is_dflash(), a.is_dflash_family(), S.from_string('ddtree') is a,"
        " S.DFLASH.is_ddtree())\n"
    )
    proc = subprocess.run(
        [PY, "-c", code], cwd=site, capture_output=True, text=True, check=False, env={**os.environ, "PYTHONPATH": ""}
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["DDTREE", "True", "False", "True", "True", "False"]
    # The same module through the verify step in import mode.
    report = ps.verify(str(site), manifest, PY, mode="import")
    assert report["ok"], report["errors"]
    assert report["imported"] == ["sglang.srt.speculative.spec_info"]


def test_pristine_spec_info_rejects_ddtree(site):
    _with_stubs(site)
    code = "from sglang.srt.speculative.spec_info import SpeculativeAlgorithm as S\nS.from_string('DDTREE')\n"
    proc = subprocess.run([PY, "-c", code], cwd=site, capture_output=True, text=True, check=False)
    assert "Unknown speculative algorithm name: DDTREE" in proc.stderr


def test_import_mode_reports_a_module_that_does_not_import(site, backup, manifest):
    apply(site, backup, manifest)  # no torch stub: the import fails as it would in a venv without torch
    report = ps.verify(str(site), manifest, PY, mode="import")
    assert not report["ok"]
    assert any("import sglang.srt.speculative.spec_info: ModuleNotFoundError" in e for e in report["errors"])


def test_auto_verify_mode_picks_compile_without_torch_and_import_with_it(site):
    assert ps.resolve_verify_mode("auto", PY) == "compile"
    calls = []

    def torch_present(argv):
        calls.append(argv)
        return 0, "", ""

    assert ps.resolve_verify_mode("auto", "/venv/bin/python", torch_present) == "import"
    assert calls[0][0] == "/venv/bin/python"


def test_reapply_changes_nothing(site, backup, manifest):
    apply(site, backup, manifest)
    before = os.stat(site / SPEC_INFO)
    again = apply(site, backup, manifest)
    assert again["changed"] is False
    assert again["files"][0]["action"] == "none"
    assert again["compiled"] == [] and again["pycache_purged"] == []
    assert os.stat(site / SPEC_INFO).st_mtime_ns == before.st_mtime_ns


def test_revert_restores_byte_identical_original(site, backup, manifest, sglang_source_tree):
    pristine = (sglang_source_tree / SPEC_INFO).read_bytes()
    apply(site, backup, manifest)
    result = revert(site, backup, manifest)
    assert result["changed"] is True
    assert result["files"][0]["action"] == "restore"
    assert (site / SPEC_INFO).read_bytes() == pristine
    assert sha(pristine) == record_sha(sglang_source_tree, SPEC_INFO)
    assert revert(site, backup, manifest)["changed"] is False
    # and it applies again after a revert
    assert apply(site, backup, manifest)["changed"] is True
    assert ps.verify(str(site), manifest, PY, mode="compile")["ok"]


def test_base_mismatch_is_refused_naming_file_and_both_checksums(site, backup, manifest):
    target = site / SPEC_INFO
    target.write_bytes(target.read_bytes() + b"# local edit\n")
    tampered = target.read_bytes()
    entry = manifest["files"][0]
    with pytest.raises(ps.PatchsetError) as err:
        apply(site, backup, manifest)
    msg = err.value.msg
    assert SPEC_INFO in msg and entry["base_sha256"] in msg and sha(tampered) in msg
    assert err.value.data == {
        "file": SPEC_INFO,
        "expected_sha256": entry["base_sha256"],
        "result_sha256": entry["result_sha256"],
        "found_sha256": sha(tampered),
    }
    assert target.read_bytes() == tampered
    assert not backup.exists()


def test_other_sglang_version_is_refused_before_any_change(site, backup, manifest):
    meta = next(site.glob("sglang-*.dist-info")) / "METADATA"
    meta.write_text(meta.read_text().replace("Version: 0.5.23", "Version: 0.5.24", 1))
    with pytest.raises(ps.PatchsetError, match=r"targets sglang 0\.5\.23.*holds sglang 0\.5\.24"):
        apply(site, backup, manifest)
    assert not backup.exists()


def _overlay_set(tmp_path, site, manifest):
    """The same change as a whole-file overlay set, made by scripts/make-patchset from two trees."""
    patched = tmp_path / "patched"
    shutil.copytree(site, patched)
    apply(patched, tmp_path / "scratch-backup", manifest)
    out = tmp_path / "overlay-set"
    proc = subprocess.run(
        [PY, str(REPO / "scripts" / "make-patchset"), "--trees", str(site), str(patched), "--format", "overlay",
         "--only", "sglang/srt", "--out", str(out), "--name", "ddtree-overlay"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out, yaml.safe_load((out / "patchset.yml").read_text())


def test_maker_from_two_trees_gives_the_committed_checksums(tmp_path, site, manifest):
    _out, made = _overlay_set(tmp_path, site, manifest)
    (entry,) = made["files"]
    assert entry["overlay"] == "files/" + SPEC_INFO
    assert {k: entry[k] for k in ("path", "base_sha256", "result_sha256")} == {
        k: manifest["files"][0][k] for k in ("path", "base_sha256", "result_sha256")
    }
    assert made["sglang_version"] == "0.5.23"


def test_maker_from_a_diff_file_gives_the_committed_checksums(tmp_path, sglang_source_tree, manifest):
    out = tmp_path / "from-diff"
    proc = subprocess.run(
        [PY, str(REPO / "scripts" / "make-patchset"), "--diff", str(SET_DIR / "diffs" / "spec_info_py.patch"),
         "--base-tree", str(sglang_source_tree), "--out", str(out)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    made = yaml.safe_load((out / "patchset.yml").read_text())
    assert made["files"][0]["result_sha256"] == manifest["files"][0]["result_sha256"]
    assert (out / "diffs" / "spec_info_py.patch").read_bytes() == (
        SET_DIR / "diffs" / "spec_info_py.patch"
    ).read_bytes()


def test_corrupted_overlay_is_refused_before_any_change(tmp_path, site, backup, manifest):
    src, overlay_manifest = _overlay_set(tmp_path, site, manifest)
    overlay = src / "files" / SPEC_INFO
    overlay.write_bytes(overlay.read_bytes().replace(b"DDTREE = auto()", b"DDTREE = auto() "))
    original = (site / SPEC_INFO).read_bytes()
    with pytest.raises(ps.PatchsetError, match="the patch set is corrupt") as err:
        apply(site, backup, overlay_manifest, src=src)
    assert err.value.data["expected_sha256"] == overlay_manifest["files"][0]["result_sha256"]
    assert (site / SPEC_INFO).read_bytes() == original
    assert not backup.exists()
    with pytest.raises(ps.PatchsetError, match="the patch set is corrupt"):
        ps.validate(str(src), overlay_manifest)


def test_diff_that_does_not_apply_is_refused_before_any_change(tmp_path, site, backup, manifest):
    src = tmp_path / "set"
    shutil.copytree(SET_DIR, src)
    diff = src / "diffs" / "spec_info_py.patch"
    diff.write_bytes(diff.read_bytes().replace(b"     DFLASH = auto()\n", b"     DFLASH = auto()  # x\n", 1))
    with pytest.raises(ps.PatchsetError, match=r"does not apply: .*context does not match"):
        apply(site, backup, manifest, src=src)
    assert not backup.exists()


def test_stale_pycache_is_purged_and_regenerated(site, backup, manifest):
    source = site / SPEC_INFO
    cache = source.parent / "__pycache__"
    stale = pathlib.Path(py_compile.compile(str(source), doraise=True))
    stale_opt = cache / ("spec_info.%s.opt-1.pyc" % sys.implementation.cache_tag)
    shutil.copy2(stale, stale_opt)
    legacy = source.parent / "spec_info.pyc"
    shutil.copy2(stale, legacy)
    sibling = pathlib.Path(py_compile.compile(str(source.parent / "spec_registry.py"), doraise=True))
    sibling_bytes = sibling.read_bytes()
    stale_bytes = stale.read_bytes()

    result = apply(site, backup, manifest)

    assert set(result["pycache_purged"]) == {str(stale), str(stale_opt), str(legacy)}
    assert not stale_opt.exists() and not legacy.exists()
    fresh = stale.read_bytes()
    assert fresh != stale_bytes
    # pyc header: magic, flags, source mtime, source size — it describes the patched file
    assert int.from_bytes(fresh[12:16], "little") == source.stat().st_size
    assert result["compiled"] == [str(source)]
    assert sibling.read_bytes() == sibling_bytes


def test_check_mode_reports_without_writing(site, backup, manifest):
    original = (site / SPEC_INFO).read_bytes()
    result = apply(site, backup, manifest, check_mode=True)
    assert result["changed"] is True
    assert result["files"][0]["action"] == "patch"
    assert result["files"][0]["after_sha256"] == manifest["files"][0]["result_sha256"]
    assert (site / SPEC_INFO).read_bytes() == original
    assert not backup.exists()
    apply(site, backup, manifest)
    patched = (site / SPEC_INFO).read_bytes()
    reverted = revert(site, backup, manifest, check_mode=True)
    assert reverted["changed"] is True and reverted["files"][0]["action"] == "restore"
    assert (site / SPEC_INFO).read_bytes() == patched


def test_check_mode_still_refuses_a_base_mismatch(site, backup, manifest):
    (site / SPEC_INFO).write_bytes(b"something else\n")
    with pytest.raises(ps.PatchsetError, match="base checksum mismatch"):
        apply(site, backup, manifest, check_mode=True)


def test_revert_refuses_a_file_changed_after_apply(site, backup, manifest):
    apply(site, backup, manifest)
    (site / SPEC_INFO).write_bytes(b"edited by hand\n")
    with pytest.raises(ps.PatchsetError, match="cannot revert") as err:
        revert(site, backup, manifest)
    assert err.value.data["found_sha256"] == sha(b"edited by hand\n")


def test_revert_refuses_a_corrupt_backup(site, backup, manifest):
    apply(site, backup, manifest)
    (backup / "files" / SPEC_INFO).write_bytes(b"not the original\n")
    with pytest.raises(ps.PatchsetError, match=r"backup .* has sha256"):
        revert(site, backup, manifest)
    assert sha((site / SPEC_INFO).read_bytes()) == manifest["files"][0]["result_sha256"]


def test_new_file_is_created_then_removed_on_revert(tmp_path, site, backup, manifest):
    src = tmp_path / "newfile-set"
    content = b"DDTREE_DEFAULT_BUDGET = 64\n"
    (src / "files" / "sglang/srt/speculative").mkdir(parents=True)
    (src / "files" / "sglang/srt/speculative/ddtree_utils.py").write_bytes(content)
    rel = "sglang/srt/speculative/ddtree_utils.py"
    new_manifest = {
        "name": "new-file",
        "sglang_version": "0.5.23",
        "files": [{"path": rel, "base_sha256": None, "result_sha256": sha(content), "overlay": "files/" + rel}],
        "verify": {"defines": ["sglang.srt.speculative.ddtree_utils:DDTREE_DEFAULT_BUDGET"], "compile": True},
    }
    result = apply(site, backup, new_manifest, src=src)
    assert result["files"][0]["action"] == "create"
    assert (site / rel).read_bytes() == content
    assert ps.verify(str(site), new_manifest, PY, mode="compile")["ok"]
    result = revert(site, backup, new_manifest)
    assert result["files"][0]["action"] == "remove"
    assert not (site / rel).exists()
    assert ps.verify(str(site), new_manifest, PY, mode="compile", reverted=True)["ok"]


def test_validate_against_another_tree_reports_base_mismatch(tmp_path, site, manifest):
    (site / SPEC_INFO).write_bytes(b"# a different sglang\n")
    with pytest.raises(ps.PatchsetError, match="base checksum mismatch") as err:
        ps.validate(str(SET_DIR), manifest, source_tree=str(site))
    assert manifest["files"][0]["base_sha256"] in err.value.msg
    assert sha(b"# a different sglang\n") in err.value.msg


def test_failed_byte_compile_is_reported(site, backup, manifest):
    def failing(argv):
        return 1, "", "SyntaxError: boom"

    with pytest.raises(ps.PatchsetError, match=r"byte-compiling .* failed .*boom"):
        apply(site, backup, manifest, runner=failing)
