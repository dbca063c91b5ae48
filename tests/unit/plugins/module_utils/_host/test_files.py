"""write_atomically: the file is replaced whole with its mode and owner, never left half written, no temporary
left behind; and the watchdog, which runs this module on the host outside Ansible, gets it installed."""

import ast
import os
import pathlib
import stat

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._host import files
from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically

REPO = pathlib.Path(__file__).resolve().parents[5]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PREFIX = "ansible_collections.specdec.sglang.plugins.module_utils."


def test_text_and_bytes_replace_the_file_with_the_mode_asked(tmp_path):
    path = tmp_path / "sglang.env"
    path.write_text("OLD=1\n")
    path.chmod(0o644)
    write_atomically(str(path), "KEY=é\n", 0o600)
    assert path.read_bytes() == "KEY=é\n".encode()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    write_atomically(str(path), b"\x00\x01", 0o640)
    assert path.read_bytes() == b"\x00\x01" and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sglang.env"]  # no temporary left


def test_the_owner_given_is_set_and_none_keeps_the_writers(tmp_path):
    path = tmp_path / "unit"
    write_atomically(str(path), "x", 0o644, os.getuid(), os.getgid())
    assert (path.stat().st_uid, path.stat().st_gid) == (os.getuid(), os.getgid())
    write_atomically(str(path), "y", 0o644)
    assert path.stat().st_uid == os.geteuid()


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "state.json"
    path.write_text("old")

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", refuse)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(str(path), "new", 0o644)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_missing_directory_is_an_error_not_a_file_elsewhere(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_atomically(str(tmp_path / "absent" / "f"), "x")
    assert list(tmp_path.iterdir()) == []


def _collection_imports(module):
    """The collection module_utils a module_utils file imports, as paths like ``_host/files``."""
    tree = ast.parse((MODULE_UTILS / (module + ".py")).read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX):
            base = node.module[len(PREFIX) :].replace(".", "/")
            for alias in node.names:  # `from ..._host import port_owner` names a module; `from ..x import f` not
                candidate = base + "/" + alias.name
                found.add(candidate if (MODULE_UTILS / (candidate + ".py")).is_file() else base)
    return found


def test_the_watchdog_gets_every_module_it_imports_and_no_other():
    """roles/sglang_service installs _sglang_service_watch_modules on the host for the watchdog: a module it
    imports and the list misses fails only there (ModuleNotFoundError at the timer's first run)."""
    listed = yaml.safe_load((REPO / "roles/sglang_service/vars/main.yml").read_text())["_sglang_service_watch_modules"]
    closure, todo = set(), ["_readiness/watchdog"]
    while todo:
        module = todo.pop()
        if module not in closure:
            closure.add(module)
            todo.extend(_collection_imports(module))
    packages = {module.split("/")[0] + "/__init__" for module in closure}
    assert sorted(listed) == sorted(closure | packages)
    assert "_host/files" in closure  # the textfile and the state file are written through it
