# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""uv at a pinned version in a tool venv of its own (``sglang_uv``): read, repair, install, prove.

The tool venv counts as installed only when its uv answers with the pinned version: an interrupted
``python -m venv`` (bin/python, no pip yet) or pip install (no or a partial bin/uv) is removed and made
again, instead of being skipped and failing every later run. The host's side effects (running a
program, the file system) are injected, so the steps are tested without a host.
"""

from __future__ import annotations

import posixpath


class UvToolError(Exception):
    """A step failed; ``msg`` says which and what it printed."""

    def __init__(self, msg):
        super().__init__(msg)
        self.msg = msg


def uv_path(tool_dir: str) -> str:
    """The uv of a tool venv (``<tool_dir>/bin/uv``, as the deploy plan's ``paths.uv``)."""
    return posixpath.join(tool_dir, "bin", "uv")


def reported_version(output: str) -> str:
    """The version in ``uv --version``'s output (``uv 0.9.5 (abc123 2025-10-21)``), or "" when there is none."""
    words = (output or "").split()
    return words[1] if len(words) > 1 else ""


def venv_argv(python: str, tool_dir: str) -> list:
    return [python or "python3", "-m", "venv", tool_dir]


def install_argv(tool_dir: str, version: str, wheel: str = "") -> list:
    """pip of the tool venv installs uv: a wheel on the host (no index), else ``uv==<version>`` from the index."""
    argv = [posixpath.join(tool_dir, "bin", "python"), "-m", "pip", "install", "--quiet"]
    return argv + (["--no-index", wheel] if wheel else ["uv==" + version])


def mismatch_message(uv: str, output: str, variable: str, version: str) -> str:
    return "%s reports %s, %s=%s" % (uv, (output or "").strip(), variable, version)


def ensure(tool_dir: str, version: str, ops, *, python: str = "", wheel: str = "", environment=None,
           variable: str = "version", check_mode: bool = False) -> dict:  # fmt: skip
    """Bring uv ``version`` into ``tool_dir``; what was done: ``{changed, removed, created, installed, version}``.

    ``ops`` has ``run(argv, env=None) -> (rc, out, err)`` (``env``: variables added for that program),
    ``exists(path)`` and ``remove_tree(path)``. ``environment`` is the pip install's (index, proxy, CA bundle).
    ``variable`` names the pinned version in the refusal (``sglang_runtime_uv_version``).
    Check mode reads only (uv's version) and says whether anything would change."""
    uv = uv_path(tool_dir)
    done = {"changed": False, "removed": False, "created": False, "installed": False, "version": ""}
    found = ops.run([uv, "--version"]) if ops.exists(uv) else (1, "", "")
    if found[0] == 0 and reported_version(found[1]) == version:
        done["version"] = version
        return done
    if check_mode:
        done["changed"] = True
        return done
    if ops.exists(tool_dir):
        ops.remove_tree(tool_dir)
        done["removed"] = True
    rc, out, err = ops.run(venv_argv(python, tool_dir))
    if rc != 0:
        raise UvToolError("creating the uv tool venv %s failed (rc %d): %s" % (tool_dir, rc, (err or out).strip()))
    done["created"] = True
    rc, out, err = ops.run(install_argv(tool_dir, version, wheel), env=dict(environment or {}))
    if rc != 0:
        raise UvToolError("installing uv %s into %s failed (rc %d): %s" % (version, tool_dir, rc, (err or out).strip()))
    done["installed"] = True
    done["changed"] = True
    rc, out, err = ops.run([uv, "--version"])
    if rc != 0:
        raise UvToolError("%s --version failed (rc %d): %s" % (uv, rc, (err or out).strip()))
    if reported_version(out) != version:
        raise UvToolError(mismatch_message(uv, out, variable, version))
    done["version"] = version
    return done
