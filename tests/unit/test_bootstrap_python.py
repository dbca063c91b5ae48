"""scripts/bootstrap finds a Python for a venv whose requirements file asks for one (`# python: >=X.Y`).

The interpreter search (``python_at_least``) and the venv loop's refusal run here as bash, cut from the
script itself, over fake interpreters (scripts that print a version, or fail like an unselected pyenv
shim): the lowest version meeting the floor wins, failing candidates are skipped, and with none the
loop stops with a message that names the file, the floor and where it looked, before uv is called.
"""

import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
BOOTSTRAP = (REPO / "scripts/bootstrap").read_text()


def _section(first, last):
    """The lines of scripts/bootstrap from the one starting with ``first`` to the next one equal to ``last``."""
    lines = BOOTSTRAP.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    end = next(i for i in range(start, len(lines)) if lines[i] == last)
    return "\n".join(lines[start : end + 1]) + "\n"


def _fake(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _python(path, version):
    return _fake(path, f"#!/bin/sh\necho {version}\n")


def _machine(tmp_path):
    """pyenv versions 3.11, 3.13 and 3.12 (in that order), a PATH whose python3.12 fails like a pyenv shim."""
    root = tmp_path / "pyenv"
    for version in ("3.11.7", "3.13.0", "3.12.1"):
        _python(root / "versions" / version / "bin/python3", version.rsplit(".", 1)[0])
    _fake(tmp_path / "shims/python3.12", "#!/bin/sh\necho 'pyenv: python3.12: command not found' >&2\nexit 127\n")
    default = _python(tmp_path / "bin/python3", "3.11")
    env = {
        "PATH": f"{tmp_path / 'shims'}:/usr/bin:/bin",
        "PYENV_ROOT": str(root),
        "HOME": str(tmp_path),
    }
    return env, default


def _run(tmp_path, env, script):
    return subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def _find(tmp_path, env, default, floor):
    script = (
        f"set -euo pipefail\npython={default}\nuv=/bin/false\n"
        + _section("pyenv_root=", "}")
        + f"python_at_least {floor}\n"
    )
    return _run(tmp_path, env, script)


def test_the_lowest_interpreter_meeting_the_floor_is_chosen(tmp_path):
    env, default = _machine(tmp_path)
    done = _find(tmp_path, env, default, "3.12")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(tmp_path / "pyenv/versions/3.12.1/bin/python3")


def test_specdec_core_python_is_taken_when_it_meets_the_floor(tmp_path):
    env, default = _machine(tmp_path)
    chosen = _python(tmp_path / "opt/py/bin/python3", "3.12")
    env["SPECDEC_CORE_PYTHON"] = str(chosen)
    done = _find(tmp_path, env, default, "3.12")
    assert done.stdout.strip() == str(chosen)


def test_no_interpreter_meeting_the_floor_is_a_failure(tmp_path):
    env, default = _machine(tmp_path)
    done = _find(tmp_path, env, default, "3.14")
    assert done.returncode == 1 and done.stdout == ""


def test_the_venv_loop_names_what_is_missing_and_calls_no_uv(tmp_path):
    env, default = _machine(tmp_path)
    (tmp_path / "requirements").mkdir()
    (tmp_path / "requirements/venv-core-9.9.txt").write_text("# python: >=3.99\nansible-core==9.9.0\n")
    calls = tmp_path / "uv-calls"
    uv = _fake(tmp_path / "uv", f'#!/bin/sh\necho "$*" >>{calls}\nexit 1\n')
    script = (
        f'set -euo pipefail\npython={default}\nuv={uv}\nbytecode_stamp=bytecode\nsay() {{ echo "$*"; }}\n'
        + _section("pyenv_root=", "done")
    )
    done = _run(tmp_path, env, script)
    assert done.returncode == 1
    message = done.stderr
    for part in ("requirements/venv-core-9.9.txt", "Python >= 3.99", "SPECDEC_CORE_PYTHON", str(tmp_path / "pyenv")):
        assert part in message, (part, message)
    assert not (tmp_path / ".cache/venvs/core-9.9").exists()
    asked = calls.read_text().splitlines() if calls.exists() else []
    assert all(call.startswith("python find") for call in asked), f"uv was asked for more than a search: {asked}"
