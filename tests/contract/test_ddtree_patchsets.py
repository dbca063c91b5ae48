# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Contract: the DDTree patch sets against the real sglang wheels they were made for.

ddtree-0.5.17 needs the 0.5.17 tree, ddtree-0.5.23 the 0.5.23 tree (the tier's `sglang_tree`
fixture fetches either). Each set: base checksums and diffs against the wheel, apply into a copy of the
touched files, compile-mode verify (every define in the patched syntax trees), revert byte-identical.
"""

import hashlib
import pathlib
import shutil
import subprocess
import sys

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils import patchset as ps

REPO = pathlib.Path(__file__).resolve().parents[2]
PY = sys.executable


@pytest.fixture(scope="session")
def sglang_0_5_17_tree(sglang_tree) -> pathlib.Path:
    return sglang_tree("0.5.17")


@pytest.fixture(params=["0.5.17", "0.5.23"])
def case(request, sglang_source_tree):
    version = request.param
    tree = request.getfixturevalue("sglang_0_5_17_tree") if version == "0.5.17" else sglang_source_tree
    set_dir = REPO / "patchsets" / ("ddtree-" + version)
    return version, tree, set_dir, yaml.safe_load((set_dir / "patchset.yml").read_text())


def _site(tmp_path, tree, manifest):
    root = tmp_path / "site-packages"
    for entry in manifest["files"]:
        src = tree / entry["path"]
        if src.is_file():
            (root / entry["path"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, root / entry["path"])
    dist = next(tree.glob("sglang-*.dist-info"))
    (root / dist.name).mkdir(parents=True)
    shutil.copy2(dist / "METADATA", root / dist.name / "METADATA")
    return root


def test_the_set_matches_its_wheel(case):
    version, tree, set_dir, manifest = case
    assert manifest["sglang_version"] == version
    report = ps.validate(str(set_dir), manifest, source_tree=str(tree))
    assert {row["base"] for row in report["files"]} == {"ok"}
    created = {e["path"] for e in manifest["files"] if e["base_sha256"] is None}
    assert "sglang/srt/speculative/ddtree_utils.py" in created
    assert ("sglang/srt/speculative/ddtree_worker.py" in created) == (version == "0.5.17")


def test_apply_verify_revert_on_the_real_files(case, tmp_path):
    _version, tree, set_dir, manifest = case
    site = _site(tmp_path, tree, manifest)
    before = {e["path"]: (site / e["path"]).read_bytes() for e in manifest["files"] if e["base_sha256"]}
    backup = tmp_path / "backup"
    assert ps.apply(str(set_dir), str(site), str(backup), manifest, PY)["changed"] is True
    for entry in manifest["files"]:
        assert hashlib.sha256((site / entry["path"]).read_bytes()).hexdigest() == entry["result_sha256"]
    report = ps.verify(str(site), manifest, PY, mode="compile")
    assert report["errors"] == [], report["errors"]
    assert "sglang.srt.arg_groups.speculative_hook:_handle_ddtree" in manifest["verify"]["defines"]
    ps.revert(str(site), str(backup), manifest, PY)
    assert {p: (site / p).read_bytes() for p in before} == before
    assert not (site / "sglang/srt/speculative/ddtree_utils.py").exists()


def test_every_dflash_string_check_of_0_5_17_knows_ddtree(sglang_0_5_17_tree, tmp_path):
    """Every `"DFLASH"` literal of the pristine 0.5.17 tree, and where the patched file now stands."""
    set_dir = REPO / "patchsets" / "ddtree-0.5.17"
    manifest = yaml.safe_load((set_dir / "patchset.yml").read_text())
    hits = subprocess.run(
        ["grep", "-rln", '"DFLASH"', "--include=*.py", "sglang/srt"],
        cwd=sglang_0_5_17_tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # Left refusing DDTREE on purpose (docs/patchsets.md): replayssm ragged verify and the KDA check.
    refused = {"sglang/srt/mem_cache/kv_cache_configurator.py"}
    patched = {e["path"] for e in manifest["files"]}
    assert set(hits) - refused <= patched
    site = _site(tmp_path, sglang_0_5_17_tree, manifest)
    ps.apply(str(set_dir), str(site), str(tmp_path / "b"), manifest, PY)
    for rel in set(hits) - refused:
        text = (site / rel).read_text()
        assert "DDTREE" in text, rel


def test_porting_the_0_5_17_set_to_0_5_23_is_refused_by_hunk(sglang_source_tree, tmp_path):
    src = REPO / "patchsets" / "ddtree-0.5.17"
    proc = subprocess.run(
        [
            PY,
            str(REPO / "scripts" / "make-patchset"),
            "--port",
            str(src),
            "--base-tree",
            str(sglang_source_tree),
            "--out",
            str(tmp_path / "port"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "does not carry over" in proc.stderr and "matches nowhere" in proc.stderr
