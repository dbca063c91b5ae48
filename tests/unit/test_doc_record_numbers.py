"""Figures in the GPU docs are the records' figures (issue 34).

A line of docs/gpu-acceptance.md, docs/envelopes.md or docs/ddtree-cost.md that states numbers from a
record carries a machine-readable reference:

    ... 120.3 s ... <!-- record: tests/device/records/<dir>/<file> [<file> ...]; derived: 87 -->

Every number of that line (outside `code spans`, before the comment) must be found in one of the named
files, exactly or as the file's value rounded to the doc's digits; numbers computed from the record
rather than read from it are listed after ``derived:`` (each must still be on the line, so the list
cannot go stale) and explained in the doc's text.
"""

import pathlib
import re

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DOCS = ("docs/gpu-acceptance.md", "docs/envelopes.md", "docs/ddtree-cost.md")
OWN_DOCS = ("docs/gpu-acceptance.md", "docs/envelopes.md")  # marked here; ddtree-cost.md is checked where marked
MARKER = re.compile(r"<!--\s*record:\s*(?P<files>[^;>]+?)\s*(?:;\s*derived:\s*(?P<derived>[^>]*?))?\s*-->")
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\w)")


def numbers_of(text):
    """The figures of a doc line: code spans and the record comments removed."""
    text = MARKER.sub(" ", text)
    text = re.sub(r"`[^`]*`", " ", text)
    text = re.sub(r"\[[^\]]*\]\([^)]*\)", " ", text)  # links: paths and anchors are not figures
    return NUMBER.findall(text)


def found_in(number, text):
    """``number`` (as written in the doc) is one of ``text``'s numbers, or one rounded to the doc's digits."""
    digits = len(number.split(".")[1]) if "." in number else 0
    want = float(number)
    for token in re.findall(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?", text):
        value = float(token)
        if token.lstrip("-") == number or (digits and "." in token and round(value, digits) == round(want, digits)):
            return True
    return False


def check_line(line, read):
    """Problems of one marked line; ``read(path)`` gives a record file's text."""
    problems = []
    for match in MARKER.finditer(line):
        files = match.group("files").split()
        derived = (match.group("derived") or "").split()
        texts = []
        for path in files:
            try:
                texts.append(read(path))
            except OSError:
                problems.append(f"{path} does not exist")
        figures = numbers_of(line)
        for number in derived:
            if number not in figures:
                problems.append(f"derived {number} is not on the line")
        for number in figures:
            if number in derived:
                continue
            if not any(found_in(number, text) for text in texts):
                problems.append(f"{number} is not in {', '.join(files)}")
    return problems


def marked_lines(doc):
    path = REPO / doc
    return [(i + 1, ln) for i, ln in enumerate(path.read_text().splitlines()) if MARKER.search(ln)]


def read_record(path):
    if not path.startswith("tests/device/records/"):
        raise OSError(path)
    return (REPO / path).read_text()


@pytest.mark.parametrize("doc", OWN_DOCS)
def test_the_docs_mark_their_record_figures(doc):
    assert len(marked_lines(doc)) >= 3, f"{doc}: no figure is marked with its record"


@pytest.mark.parametrize("doc", DOCS)
def test_every_marked_figure_is_its_records(doc):
    problems = [f"{doc}:{n}: {p}" for n, line in marked_lines(doc) for p in check_line(line, read_record)]
    assert problems == []


def test_the_check_fails_on_a_figure_the_record_does_not_hold():
    record = '{"time_to_ready_s": 120.307, "ready_line": "21:44:46"}'
    read = {"r.json": record}.__getitem__
    assert check_line("ready after 120.3 s <!-- record: r.json -->", read) == []
    assert check_line("ready after 120.4 s <!-- record: r.json -->", read) == ["120.4 is not in r.json"]
    assert check_line("ready after 87 s <!-- record: r.json -->", read) == ["87 is not in r.json"]
    assert check_line("ready after 87 s <!-- record: r.json; derived: 87 -->", read) == []
    assert check_line("ready after 88 s <!-- record: r.json; derived: 87 -->", read) == [
        "derived 87 is not on the line",
        "88 is not in r.json",
    ]
    assert check_line("`--port 30011` ready <!-- record: r.json -->", read) == []  # code is not a figure
