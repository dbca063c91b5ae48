"""The patch set verify program (runs in the venv's python): compile, syntax-tree and import checks."""

import ast
import json
import subprocess
import sys

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._host.host_program import source_of
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset_verify as pv

MODULE = """
class Algo:
    DDTREE = 3

    def is_ddtree(self):
        return True


BUDGET: int = 8
LIMIT = 2
"""


@pytest.fixture
def site(tmp_path):
    root = tmp_path / "site-packages"
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "sub" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "algo.py").write_text(MODULE)
    return root


@pytest.mark.parametrize(
    ("parts", "found"),
    [
        (["Algo"], True),
        (["Algo", "DDTREE"], True),
        (["Algo", "is_ddtree"], True),
        (["BUDGET"], True),
        (["LIMIT"], True),
        (["Algo", "EAGLE"], False),
        (["missing"], False),
        (["LIMIT", "real"], False),
    ],
)
def test_ast_has_finds_top_level_and_nested_definitions(parts, found):
    assert pv.ast_has(ast.parse(MODULE), parts) is found


def test_module_file_resolves_modules_and_packages(site):
    assert pv.module_file(str(site), "pkg.algo") == str(site / "pkg" / "algo.py")
    assert pv.module_file(str(site), "pkg.sub") == str(site / "pkg" / "sub" / "__init__.py")
    assert pv.module_file(str(site), "pkg.nothing") is None


def cfg(site, mode, **kw):
    base = {"mode": mode, "site_packages": str(site), "compile": [], "imports": [], "defines": []}
    base.update(kw)
    return base


def test_compile_mode_reports_defines_found_and_missing(site):
    res = pv.run(cfg(site, "compile", compile=[str(site / "pkg" / "algo.py")],
                     defines=["pkg.algo:Algo.DDTREE", "pkg.algo:Algo.EAGLE", "pkg.gone:X"]))  # fmt: skip
    assert res["compiled"] == [str(site / "pkg" / "algo.py")]
    assert res["defines"] == ["pkg.algo:Algo.DDTREE"]
    assert res["errors"] == [
        f"pkg.algo:Algo.EAGLE: not defined in {site / 'pkg' / 'algo.py'}",
        f"pkg.gone:X: module pkg.gone not found under {site}",
    ]


def test_a_file_that_does_not_compile_is_an_error(site):
    broken = site / "pkg" / "broken.py"
    broken.write_text("def f(:\n")
    res = pv.run(cfg(site, "compile", compile=[str(broken)], defines=["pkg.broken:f"]))
    assert res["compiled"] == []
    assert res["errors"][0].startswith(f"{broken}: SyntaxError: ")
    assert res["errors"][1].startswith(f"pkg.broken:f: {broken} does not parse: ")


def test_import_mode_imports_and_resolves_in_the_venv_python(site):
    """Run as the real program: `python -c <source> CONFIG` in a fresh interpreter."""
    config = cfg(site, "import", imports=["pkg.algo", "pkg.nope"], defines=["pkg.algo:Algo.is_ddtree", "pkg.sub:NOPE"])
    done = subprocess.run(
        [sys.executable, "-c", source_of(pv), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    res = json.loads(done.stdout.splitlines()[-1])
    assert res["mode"] == "import"
    assert res["imported"] == ["pkg.algo"]
    assert res["defines"] == ["pkg.algo:Algo.is_ddtree"]
    assert [e.split(":")[0] for e in res["errors"]] == ["import pkg.nope", "pkg.sub"]
    assert "ModuleNotFoundError" in res["errors"][0] and "AttributeError" in res["errors"][1]
