"""The pure-Python unified diff applier: strict, byte-exact, compatible with git and GNU patch output."""

import random
import shutil
import subprocess

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import unified_diff as ud

BASE = b"".join(b"line %d\n" % i for i in range(1, 21))


def test_make_then_apply_round_trips_a_change():
    new = BASE.replace(b"line 5\n", b"line five\n").replace(b"line 18\n", b"line 18\nline 18b\n")
    diff = ud.make(BASE, new, "pkg/mod.py")
    assert diff.startswith(b"--- a/pkg/mod.py\n+++ b/pkg/mod.py\n")
    assert ud.apply(diff, BASE) == ("pkg/mod.py", new)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (b"a\nb", b"a\nc"),  # no newline at EOF on both sides
        (b"a\nb\n", b"a\nb"),  # newline removed at EOF
        (b"a\nb", b"a\nb\n"),  # newline added at EOF
        (b"a\r\nb\r\n", b"a\r\nc\r\n"),  # CRLF kept byte for byte
        (b"x = '\r'\ny\n", b"x = '\r'\nz\n"),  # a bare CR is not a line end
        (b"", b"new\n"),
        (b"only\n", b""),
    ],
)
def test_apply_reproduces_edge_cases_byte_for_byte(old, new):
    assert ud.apply(ud.make(old, new, "f.py"), old)[1] == new


def test_random_edits_round_trip():
    rng = random.Random(5)
    pool = [b"a\n", b"b\n", b"c\r\n", b"\n", b"d\re\n", b"    x = 1\n"]
    for _ in range(500):
        old = b"".join(rng.choice(pool) for _ in range(rng.randint(0, 25)))
        new = b"".join(rng.choice(pool) for _ in range(rng.randint(0, 25)))
        if old and rng.random() < 0.3:
            old = old[:-1]
        if old == new:
            continue
        assert ud.apply(ud.make(old, new, "f"), old)[1] == new


def test_new_file_diff_creates_and_refuses_existing_file():
    diff = ud.make(None, b"hello\n", "pkg/new.py")
    assert diff.startswith(b"--- /dev/null\n+++ b/pkg/new.py\n")
    assert ud.apply(diff, None) == ("pkg/new.py", b"hello\n")
    with pytest.raises(ud.DiffError, match="already exists"):
        ud.apply(diff, b"hello\n")


def test_context_mismatch_is_refused_with_line_and_both_texts():
    diff = ud.make(BASE, BASE.replace(b"line 10\n", b"ten\n"), "m.py")
    drifted = BASE.replace(b"line 9\n", b"line nine\n")
    with pytest.raises(ud.DiffError, match=r"m\.py line 9: context does not match.*line 9.*line nine"):
        ud.apply(diff, drifted)


def test_shifted_file_is_refused_no_offset_search():
    diff = ud.make(BASE, BASE.replace(b"line 10\n", b"ten\n"), "m.py")
    with pytest.raises(ud.DiffError, match="context does not match"):
        ud.apply(diff, b"extra first line\n" + BASE)


def test_truncated_hunk_is_refused():
    diff = ud.make(BASE, BASE.replace(b"line 10\n", b"ten\n"), "m.py")
    with pytest.raises(ud.DiffError, match=r"truncated|ends early"):
        ud.parse(diff.rsplit(b"\n", 3)[0] + b"\n")


def test_text_without_diff_headers_is_refused():
    with pytest.raises(ud.DiffError, match="no unified diff found"):
        ud.parse(b"just some text\n")


def test_diff_of_two_files_is_refused_by_single_file_apply():
    two = ud.make(b"a\n", b"b\n", "x.py") + ud.make(b"c\n", b"d\n", "y.py")
    assert [p.path for p in ud.parse(two)] == ["x.py", "y.py"]
    with pytest.raises(ud.DiffError, match="one file, found 2"):
        ud.apply(two, b"a\n")


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
def test_git_diff_output_applies(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    old = BASE
    new = BASE.replace(b"line 2\n", b"two\n") + b"tail without newline"
    (tmp_path / "a" / "m.py").write_bytes(old)
    (tmp_path / "b" / "m.py").write_bytes(new)
    proc = subprocess.run(
        ["git", "diff", "--no-index", "a/m.py", "b/m.py"], cwd=tmp_path, capture_output=True, check=False
    )
    assert proc.returncode == 1, proc.stderr
    path, result = ud.apply(proc.stdout, old, strip=2)
    assert (path, result) == ("m.py", new)


@pytest.mark.skipif(shutil.which("patch") is None, reason="GNU patch not installed")
def test_gnu_patch_accepts_our_diffs(tmp_path):
    new = BASE.replace(b"line 7\n", b"seven\n") + b"no newline"
    (tmp_path / "m.py").write_bytes(BASE)
    (tmp_path / "p.diff").write_bytes(ud.make(BASE, new, "m.py"))
    subprocess.run(["patch", "-s", "-p1", "-i", "p.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "m.py").read_bytes() == new


# --- relocate: carrying a diff to another release of the file (make-patchset --port) -------------


def _moved(base, extra_top):
    """The same file with lines inserted above everything: every hunk header is now off."""
    return b"".join(b"header %d\n" % i for i in range(extra_top)) + base


def test_relocate_finds_hunks_that_moved_and_gives_the_same_change():
    new = BASE.replace(b"line 5\n", b"line five\n").replace(b"line 18\n", b"line 18\nline 18b\n")
    (fp,) = ud.parse(ud.make(BASE, new, "pkg/mod.py"))
    shifted = _moved(BASE, 7)
    with pytest.raises(ud.DiffError, match="context does not match"):
        ud.apply_file_patch(fp, shifted)  # strict (deploy time): the header's line is authoritative
    assert ud.apply_file_patch(fp, shifted, relocate=True) == _moved(new, 7)


def test_relocate_refuses_a_hunk_whose_context_changed():
    new = BASE.replace(b"line 10\n", b"line ten\n")
    (fp,) = ud.parse(ud.make(BASE, new, "pkg/mod.py"))
    other = _moved(BASE.replace(b"line 9\n", b"line nine\n"), 3)
    with pytest.raises(ud.DiffError, match=r"pkg/mod.py: hunk @@ -7,7 @@ .* matches nowhere"):
        ud.apply_file_patch(fp, other, relocate=True)


def test_relocate_refuses_an_ambiguous_hunk():
    block = b"a\nb\nc\nd\ne\nf\ng\n"
    (fp,) = ud.parse(ud.make(block, block.replace(b"d\n", b"D\n"), "m.py"))
    with pytest.raises(ud.DiffError, match="matches 2 places"):
        ud.apply_file_patch(fp, b"x\n" + block + block, relocate=True)


def test_relocate_keeps_hunks_in_order():
    base = b"".join(b"l%d\n" % i for i in range(40))
    new = base.replace(b"l5\n", b"L5\n").replace(b"l30\n", b"L30\n")
    (fp,) = ud.parse(ud.make(base, new, "m.py"))
    moved = b"pad\n" * 11 + base
    assert ud.apply_file_patch(fp, moved, relocate=True) == b"pad\n" * 11 + new
