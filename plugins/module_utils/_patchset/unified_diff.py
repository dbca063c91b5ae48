# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pure-Python unified diffs: parse, apply strictly, and make them.

Works on bytes so that applying a diff reproduces a file byte for byte (line
endings, a missing newline at the end of the file). Targets need no `patch`
binary. Matching is strict: every context and removed line must be found at the
line the hunk header names, or the whole file is refused.
"""

from __future__ import annotations

import difflib
import re

NO_NEWLINE = b"\\ No newline at end of file"
DEV_NULL = "/dev/null"
_HUNK_RE = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


class DiffError(Exception):
    """A diff that cannot be parsed or does not apply; the message says where and why."""


class Hunk:
    __slots__ = ("lines", "new_len", "new_start", "old_len", "old_start")

    def __init__(self, old_start, old_len, new_start, new_len):
        self.old_start = old_start
        self.old_len = old_len
        self.new_start = new_start
        self.new_len = new_len
        # (tag, line bytes including its line ending, or without one at EOF); tag in b" ", b"-", b"+"
        self.lines = []


class FilePatch:
    __slots__ = ("hunks", "new_path", "old_path")

    def __init__(self, old_path, new_path):
        self.old_path = old_path
        self.new_path = new_path
        self.hunks = []

    @property
    def path(self):
        """The path the patch touches, without git's a/ b/ prefixes."""
        return self.old_path if self.new_path == DEV_NULL else self.new_path

    @property
    def is_new(self):
        return self.old_path == DEV_NULL

    @property
    def is_delete(self):
        return self.new_path == DEV_NULL


def split_lines(data):
    """Lines of `data` with their b"\\n" kept; only \\n ends a line (a bare \\r stays inside it)."""
    lines = data.split(b"\n")
    out = [line + b"\n" for line in lines[:-1]]
    if lines[-1]:
        out.append(lines[-1])
    return out


def _strip_path(raw, strip):
    name = raw.split(b"\t", 1)[0].strip().decode("utf-8", "surrogateescape")
    if name == DEV_NULL:
        return name
    parts = name.split("/")
    if strip and len(parts) > strip:
        parts = parts[strip:]
    return "/".join(parts)


def parse(data, strip=1):
    """Parse unified diff bytes into a list of FilePatch. `strip` is patch's -p (git diffs: 1)."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    lines = split_lines(data)
    patches = []
    i = 0
    while i < len(lines):
        if not _is_file_header(lines, i):
            i += 1
            continue
        fp, i = _parse_file(lines, i, strip)
        patches.append(fp)
    if not patches:
        raise DiffError("no unified diff found (expected '--- a/...' / '+++ b/...' headers)")
    return patches


def _is_file_header(lines, i):
    """Whether lines[i] and lines[i + 1] are a '--- ' / '+++ ' pair."""
    return lines[i].startswith(b"--- ") and i + 1 < len(lines) and lines[i + 1].startswith(b"+++ ")


def _parse_file(lines, i, strip):
    """The FilePatch whose '--- ' header is lines[i], and the index of the line after its last hunk."""
    fp = FilePatch(_strip_path(lines[i][4:], strip), _strip_path(lines[i + 1][4:], strip))
    i += 2
    while i < len(lines) and lines[i].startswith(b"@@"):
        hunk, i = _parse_hunk(lines, i, fp)
        fp.hunks.append(hunk)
    if not fp.hunks and not (fp.is_new or fp.is_delete):
        raise DiffError("diff for %s has no hunks" % fp.path)
    return fp, i


def _hunk_header(lines, i):
    """The empty Hunk that the '@@' header lines[i] announces."""
    m = _HUNK_RE.match(lines[i])
    if not m:
        raise DiffError("line %d: malformed hunk header %r" % (i + 1, lines[i].rstrip()))
    return Hunk(
        int(m.group(1)),
        int(m.group(2)) if m.group(2) is not None else 1,
        int(m.group(3)),
        int(m.group(4)) if m.group(4) is not None else 1,
    )


def _parse_hunk(lines, i, fp):
    """The Hunk whose header is lines[i] with its body, and the index of the line after it."""
    hunk = _hunk_header(lines, i)
    i += 1
    old_seen = new_seen = 0
    while i < len(lines) and (old_seen < hunk.old_len or new_seen < hunk.new_len):
        body = lines[i]
        tag = body[:1]
        if tag == b"\\":
            _mark_no_newline(hunk, i)
            i += 1
            continue
        if body in (b"\n", b"\r\n"):
            # Some tools strip the single space of an empty context line.
            tag, body = b" ", b" " + body
        if tag not in (b" ", b"-", b"+"):
            raise DiffError(
                "line %d: hunk for %s ends early (expected %d old / %d new lines, found %d / %d)"
                % (i + 1, fp.path, hunk.old_len, hunk.new_len, old_seen, new_seen)
            )
        hunk.lines.append((tag, body[1:]))
        if tag in (b" ", b"-"):
            old_seen += 1
        if tag in (b" ", b"+"):
            new_seen += 1
        i += 1
    if old_seen != hunk.old_len or new_seen != hunk.new_len:
        raise DiffError(
            "hunk @@ -%d,%d +%d,%d @@ for %s is truncated"
            % (hunk.old_start, hunk.old_len, hunk.new_start, hunk.new_len, fp.path)
        )
    if i < len(lines) and lines[i].startswith(b"\\"):
        _mark_no_newline(hunk, i)
        i += 1
    return hunk, i


def _mark_no_newline(hunk, index):
    if not hunk.lines:
        raise DiffError("line %d: '\\ No newline at end of file' before any hunk line" % (index + 1))
    tag, body = hunk.lines[-1]
    if body.endswith(b"\n"):
        body = body[:-1]
    hunk.lines[-1] = (tag, body)


def _relocate(fp, hunk, old_lines, pos):
    """Where the hunk's old side (context and removed lines) occurs exactly, once, at or after `pos`."""
    want = [body for tag, body in hunk.lines if tag != b"+"]
    if not want:
        raise DiffError("%s: hunk @@ -%d,%d @@ has no context to relocate by" % (fp.path, hunk.old_start, hunk.old_len))
    hits = [i for i in range(pos, len(old_lines) - len(want) + 1) if old_lines[i : i + len(want)] == want]
    if len(hits) != 1:
        raise DiffError(
            "%s: hunk @@ -%d,%d @@ (first line %r) %s"
            % (
                fp.path,
                hunk.old_start,
                hunk.old_len,
                want[0],
                "matches nowhere" if not hits else "matches %d places" % len(hits),
            )
        )
    return hits[0]


def apply_file_patch(fp, original, relocate=False):
    """Apply one FilePatch to `original` bytes (None for a new file); returns the new bytes.

    Strict: each hunk must match exactly at the line its header names (no fuzz, no offset). With
    `relocate` (porting a diff to another release of the file, never at deploy time) a hunk may sit
    at another line, provided its context and removed lines occur exactly and only once after the
    previous hunk.
    """
    old_lines = _old_lines(fp, original)
    out = []
    pos = 0  # index into old_lines
    for hunk in fp.hunks:
        start = hunk.old_start - 1 if hunk.old_len else hunk.old_start
        if relocate and not fp.is_new:
            start = _relocate(fp, hunk, old_lines, pos)
        if start < pos:
            raise DiffError(
                "%s: hunk @@ -%d,%d @@ overlaps the previous hunk" % (fp.path, hunk.old_start, hunk.old_len)
            )
        out.extend(old_lines[pos:start])
        pos = _apply_hunk(fp, hunk, old_lines, start, out)
    out.extend(old_lines[pos:])
    return b"".join(out)


def _old_lines(fp, original):
    """The lines of `original` that `fp` starts from; checks that the file exists unless `fp` creates it."""
    if fp.is_new:
        if original is not None:
            raise DiffError("%s: the diff creates this file but it already exists" % fp.path)
        return []
    if original is None:
        raise DiffError("%s: the diff modifies this file but it does not exist" % fp.path)
    return split_lines(original)


def _apply_hunk(fp, hunk, old_lines, start, out):
    """Append the hunk's new side to `out`, checking its old side at old_lines[start:]; returns the index after it."""
    cursor = start
    for tag, body in hunk.lines:
        if tag == b"+":
            out.append(body)
            continue
        found = old_lines[cursor] if cursor < len(old_lines) else None
        if found != body:
            raise DiffError(
                "%s line %d: context does not match (hunk @@ -%d,%d @@): expected %r, found %r"
                % (fp.path, cursor + 1, hunk.old_start, hunk.old_len, body, found)
            )
        if tag == b" ":
            out.append(body)
        cursor += 1
    return cursor


def apply(data, original, strip=1):
    """Apply a diff that touches exactly one file to `original` bytes; returns (path, new bytes)."""
    patches = parse(data, strip=strip)
    if len(patches) != 1:
        raise DiffError(
            "expected a diff of one file, found %d: %s" % (len(patches), ", ".join(p.path for p in patches))
        )
    return patches[0].path, apply_file_patch(patches[0], original)


def _range(start, length):
    if length == 0:
        return "%d,0" % start
    if length == 1:
        return "%d" % (start + 1)
    return "%d,%d" % (start + 1, length)


def make(old, new, path, context=3):
    """A git-style unified diff (a/ b/ prefixes) turning `old` into `new` (bytes; None = absent file).

    Handles a missing newline at the end of either side, so apply(make(a, b), a) == b.
    """
    old_lines = [] if old is None else split_lines(old)
    new_lines = [] if new is None else split_lines(new)
    old_name = DEV_NULL if old is None else "a/" + path
    new_name = DEV_NULL if new is None else "b/" + path
    out = [("--- %s\n+++ %s\n" % (old_name, new_name)).encode("utf-8")]
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    groups = list(matcher.get_grouped_opcodes(context))
    if not groups:
        return b""
    for group in groups:
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        header = "@@ -%s +%s @@\n" % (_range(i1, i2 - i1), _range(j1, j2 - j1))
        out.append(header.encode("ascii"))
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                out.extend(_body(b" ", old_lines[a1:a2]))
                continue
            if tag in ("replace", "delete"):
                out.extend(_body(b"-", old_lines[a1:a2]))
            if tag in ("replace", "insert"):
                out.extend(_body(b"+", new_lines[b1:b2]))
    return b"".join(out)


def _body(tag, lines):
    for line in lines:
        if line.endswith(b"\n"):
            yield tag + line
        else:
            yield tag + line + b"\n" + NO_NEWLINE + b"\n"
