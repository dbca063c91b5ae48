"""Docs cite only files that exist.

Checked in README.md, docs/*.md and every role's meta/argument_specs.yml (shipped: ansible-doc shows it):
- every relative Markdown link `[text](target)` resolves from the citing file's directory;
- every file name ending in `.md` that the text cites (link, backticks, C(...) or plain words) exists;
- every repository path in backticks or C(...) (it starts with a top-level entry of the checkout) exists,
  unless it is a pattern or placeholder (`<host>`, `{a,b}`, `*`, `...`) or a file the operator creates
  and git ignores (`inventory/host_vars/<host>/local.yml`). Role-relative paths such as
  `meta/argument_specs.yml` may resolve inside any role.
"""

import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
MD_NAME = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
QUOTED_PATH = re.compile(r"`([^`\s]+)`|C\(([^)\s]+)\)")
PLACEHOLDER = re.compile(r"[<>{}*]|\.\.\.")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")


def cited_files():
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    specs = sorted((REPO / "roles").glob("*/meta/argument_specs.yml"))
    return docs + specs


def top_level_entries():
    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    return {line.split("/")[0] for line in listed.splitlines()}


def git_ignored(rel):
    return subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=REPO, check=False).returncode == 0


def _exists(base, target, repo):
    if (base / target).exists() or (repo / target).exists():
        return True
    return any((role / target).exists() for role in (repo / "roles").glob("*/"))


def broken_links(path, text, repo=REPO, top=None):
    """(kind, target) for every citation in `text` (the content of `path`) that names no existing file."""
    top = top_level_entries() if top is None else top
    base = path.parent
    broken = []
    for match in MD_LINK.finditer(text):
        target = match.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL or an anchor in the same page
        target = target.split("#", 1)[0]
        if not (base / target).exists():
            broken.append(("link", target))
    for match in MD_NAME.finditer(URL.sub(" ", text)):
        name = match.group(1)
        if PLACEHOLDER.search(name):
            continue
        if not _exists(base, name, repo) and ("md", name) not in broken:
            broken.append(("md", name))
    for match in QUOTED_PATH.finditer(text):
        token = match.group(1) or match.group(2)
        token = token.rstrip("/.,:;")
        if "/" not in token or token.split("/")[0] not in top or PLACEHOLDER.search(token):
            continue
        if not _exists(base, token, repo) and not git_ignored(token):
            broken.append(("path", token))
    return broken


@pytest.mark.parametrize("path", cited_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_cited_file_exists(path):
    assert broken_links(path, path.read_text(encoding="utf-8")) == []


def test_the_files_checked_include_readme_docs_and_every_role_spec():
    names = {str(p.relative_to(REPO)) for p in cited_files()}
    assert {"README.md", "docs/operations.md", "docs/service.md"} <= names
    roles = {p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file()}
    assert roles and all(f"roles/{role}/meta/argument_specs.yml" in names for role in roles)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("See [the design](DESIGN.md).", [("link", "DESIGN.md"), ("md", "DESIGN.md")]),
        ("Deploy step 4 of docs/DESIGN.md.", [("md", "docs/DESIGN.md")]),
        ("Nobody overlays files by hand (FIELD-REPORT.md, incident 2).", [("md", "FIELD-REPORT.md")]),
        ("run `playbooks/lab.yml` first", [("path", "playbooks/lab.yml")]),
        ("see C(roles/sglang_service/tasks/gone.yml)", [("path", "roles/sglang_service/tasks/gone.yml")]),
        ("[operations](operations.md#deploy) and [up](../README.md)", []),
        ("[SGLang](https://github.com/sgl-project/sglang/blob/main/README.md)", []),
        ("`inventory/host_vars/<host>/main.yml`, `tests/unit/test_{a,b}.py`, `plugins/...`", []),
        ("`inventory/host_vars/ct200/local.yml` (git ignores it)", []),
        ("each role's `meta/argument_specs.yml`", []),
    ],
)
def test_the_check_reports_exactly_the_missing_targets(text, expected):
    assert broken_links(REPO / "docs" / "example.md", text) == expected
