"""Host programs are real module_utils files whose source is read back through their loader.

AnsiballZ ships module_utils inside a zip payload and imports them from the zip; the source of a
host program must come back from there as well as from a checkout.
"""

import importlib
import json
import pathlib
import subprocess
import sys
import types
import zipfile

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._host.host_program import HostProgramError, source_of
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset_verify
from ansible_collections.specdec.sglang.plugins.module_utils._runtime import venv_probe

UTILS = pathlib.Path(venv_probe.__file__).parents[1]  # plugins/module_utils


@pytest.mark.parametrize("module", [venv_probe, patchset_verify], ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_source_is_the_file_text(module):
    package, name = module.__name__.rsplit(".", 2)[-2:]
    assert source_of(module) == (UTILS / package / (name + ".py")).read_text(encoding="utf-8")


def test_source_comes_back_from_a_zip_payload(tmp_path, monkeypatch):
    """As in an AnsiballZ payload: the module is imported from a zip and has no file on disk."""
    payload = tmp_path / "payload.zip"
    with zipfile.ZipFile(payload, "w") as zf:
        zf.writestr("zipped_probe/__init__.py", "")
        zf.writestr("zipped_probe/venv_probe.py", source_of(venv_probe))
    monkeypatch.syspath_prepend(str(payload))
    for name in ("zipped_probe", "zipped_probe.venv_probe"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    zipped = importlib.import_module("zipped_probe.venv_probe")
    assert not pathlib.Path(zipped.__file__).exists()
    assert source_of(zipped) == source_of(venv_probe)


def test_a_module_without_source_is_refused():
    compiled_only = types.ModuleType("compiled_only")
    compiled_only.__file__ = "/nowhere/compiled_only.cpython-311.so"
    with pytest.raises(HostProgramError, match="compiled_only"):
        source_of(compiled_only)


def test_the_probe_source_runs_as_python_dash_c_in_another_interpreter(tmp_path):
    spec = {"program": "packages", "packages": [{"name": "pip", "import": "json"}]}
    done = subprocess.run(
        [sys.executable, "-I", "-c", source_of(venv_probe), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=tmp_path,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == venv_probe.BEGIN and lines[-1] == venv_probe.END
    out = json.loads(lines[1])
    assert out["imports"]["json"]["ok"] is True
    assert out["packages"]["pip"]["version"]
    assert out["python"] == sys.version.split()[0]
