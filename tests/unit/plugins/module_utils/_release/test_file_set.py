"""The plan of sglang_files: which entries are refused, and which are created, replaced or kept."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._release import file_set


def entry(path, **fields):
    return {"path": path, "state": "file", "content": "x\n", "mode": "0644", **fields}


def test_a_valid_set_has_no_errors():
    items = [entry("/etc/a", state="directory", content=None, mode="0755"), entry("/etc/a/b"), entry("/etc/a/c")]
    assert file_set.check_items(items) == []


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        (entry("etc/a"), "files[0].path must be an absolute path, not 'etc/a'"),
        (entry("/etc/a", content=None), "files[0] (/etc/a): a file needs its content (content, src or template)"),
        (entry("/etc/a", state="directory"), "files[0] (/etc/a): a directory has no content"),
        (entry("/etc/a", state="link"), "files[0] (/etc/a).state must be one of file, directory, not 'link'"),
        (entry("/etc/a", mode="644x"), "files[0] (/etc/a).mode must be an octal string such as '0644', not '644x'"),
        (entry("/etc/a", mode=420), "files[0] (/etc/a).mode must be an octal string such as '0644', not 420"),
        (entry("/etc/a", content="x" * (file_set.MAX_CONTENT_BYTES + 1)), "use ansible.builtin.copy"),
    ],
)
def test_each_wrong_entry_is_named_with_what_is_allowed(item, expected):
    errors = file_set.check_items([item])
    assert len(errors) == 1 and expected in errors[0], errors


def test_a_path_listed_twice_is_refused():
    assert file_set.check_items([entry("/etc/a"), entry("/etc/a/")]) == ["files[1] (/etc/a/): the path is listed twice"]


def test_plan_creates_replaces_and_keeps_by_content():
    found = {"/d": "directory", "/d/same": b"x\n", "/d/other": b"old\n"}
    items = [
        entry("/d", state="directory", content=None),
        entry("/new", state="directory", content=None),
        entry("/d/same"),
        entry("/d/other"),
        entry("/d/missing"),
    ]
    steps = file_set.plan(items, found.get)
    assert [(item["path"], action) for item, action in steps] == [
        ("/d", "keep"),
        ("/new", "create"),
        ("/d/same", "keep"),
        ("/d/other", "replace"),
        ("/d/missing", "create"),
    ]


def test_plan_compares_utf8_bytes():
    steps = file_set.plan([entry("/f", content="größe\n")], {"/f": "größe\n".encode()}.get)
    assert steps[0][1] == "keep"


@pytest.mark.parametrize(
    ("item", "found", "message"),
    [
        (entry("/x"), "directory", "/x is a directory, not a file"),
        (entry("/x", state="directory", content=None), b"data", "/x is a file, not a directory"),
    ],
)
def test_plan_refuses_the_wrong_kind_at_a_path(item, found, message):
    with pytest.raises(ValueError, match=message):
        file_set.plan([item], {"/x": found}.get)
