# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""scripts/make-patchset: a multi-file set with a new file, made for one release and carried to another."""

import hashlib
import importlib.machinery
import importlib.util
import pathlib
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
MAKE = REPO / "scripts" / "make-patchset"

MOD = "".join("line %d\n" % i for i in range(1, 41))
OTHER = "".join("other %d\n" % i for i in range(1, 21))


def _tree(root, version, files):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    meta = root / ("sglang-%s.dist-info" % version) / "METADATA"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text("Metadata-Version: 2.1\nName: sglang\nVersion: %s\n\n" % version)
    return root


def _make(*args):
    return subprocess.run([sys.executable, str(MAKE), *map(str, args)], capture_output=True, text=True, check=False)


def _sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _edit(mod, other):
    return {
        "sglang/srt/mod.py": mod.replace("line 10\n", "line ten\n").replace("line 30\n", "line 30\nline 30b\n"),
        "sglang/srt/other.py": other.replace("other 3\n", "other three\n"),
        "sglang/srt/new_module.py": "NEW = 1\n",
    }


def test_a_set_made_for_one_release_is_carried_to_the_next(tmp_path):
    old = _tree(tmp_path / "old", "1.0", {"sglang/srt/mod.py": MOD, "sglang/srt/other.py": OTHER})
    edited = _tree(tmp_path / "edited", "1.0", {"sglang/srt/mod.py": MOD, "sglang/srt/other.py": OTHER})
    _tree(edited, "1.0", _edit(MOD, OTHER))
    first = _make("--trees", old, edited, "--out", tmp_path / "set-1.0", "--description", "three files")
    assert first.returncode == 0, first.stderr
    assert "wrote %s: 3 file(s), sglang 1.0" % (tmp_path / "set-1.0") in first.stdout

    # Release 2.0 moved everything down (new lines at the top of both files).
    mod2, other2 = "# 2.0\n" * 5 + MOD, "# 2.0\n" + OTHER
    new = _tree(tmp_path / "new", "2.0", {"sglang/srt/mod.py": mod2, "sglang/srt/other.py": other2})
    ported = _make("--port", tmp_path / "set-1.0", "--base-tree", new, "--out", tmp_path / "set-2.0")
    assert ported.returncode == 0, ported.stderr
    manifest = (tmp_path / "set-2.0" / "patchset.yml").read_text()
    assert 'sglang_version: "2.0"' in manifest and 'description: "three files"' in manifest
    want = _edit(mod2, other2)
    for rel, text in want.items():
        assert _sha(text) in manifest, rel
    assert _sha(mod2) in manifest and _sha(other2) in manifest  # base checksums of 2.0, not 1.0
    assert (tmp_path / "set-2.0" / "files" / "sglang/srt/new_module.py").read_text() == "NEW = 1\n"


def test_a_hunk_whose_context_changed_is_refused_by_name(tmp_path):
    old = _tree(tmp_path / "old", "1.0", {"sglang/srt/mod.py": MOD, "sglang/srt/other.py": OTHER})
    edited = _tree(tmp_path / "edited", "1.0", _edit(MOD, OTHER))
    assert _make("--trees", old, edited, "--out", tmp_path / "set-1.0").returncode == 0
    changed = MOD.replace("line 11\n", "line eleven\n")
    new = _tree(tmp_path / "new", "2.0", {"sglang/srt/mod.py": changed, "sglang/srt/other.py": OTHER})
    ported = _make("--port", tmp_path / "set-1.0", "--base-tree", new, "--out", tmp_path / "set-2.0")
    assert ported.returncode == 2
    assert "diffs/mod_py.patch does not carry over" in ported.stderr and "matches nowhere" in ported.stderr
    assert not (tmp_path / "set-2.0").exists()


def test_a_new_file_that_the_next_release_already_has_is_refused(tmp_path):
    old = _tree(tmp_path / "old", "1.0", {"sglang/srt/mod.py": MOD, "sglang/srt/other.py": OTHER})
    edited = _tree(tmp_path / "edited", "1.0", _edit(MOD, OTHER))
    assert _make("--trees", old, edited, "--out", tmp_path / "set-1.0").returncode == 0
    new = _tree(
        tmp_path / "new",
        "2.0",
        {"sglang/srt/mod.py": MOD, "sglang/srt/other.py": OTHER, "sglang/srt/new_module.py": "UPSTREAM = 1\n"},
    )
    ported = _make("--port", tmp_path / "set-1.0", "--base-tree", new, "--out", tmp_path / "set-2.0")
    assert ported.returncode == 2 and "sglang/srt/new_module.py is new in the set but exists" in ported.stderr


def test_long_description_is_written_as_a_folded_block_that_reads_back_unchanged():
    loader = importlib.machinery.SourceFileLoader("make_patchset", str(MAKE))
    spec = importlib.util.spec_from_loader("make_patchset", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    text = "DDTree: " + "verify the draft as a tree in one target pass; " * 6
    lines = module.yaml_text_field("description", text.strip())
    assert lines[0] == "description: >-"
    assert all(len(line) <= 100 for line in lines)
    assert yaml.safe_load("\n".join(lines))["description"] == text.strip()
    assert module.yaml_text_field("description", "short") == ['description: "short"']
