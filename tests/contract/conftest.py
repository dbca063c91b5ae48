"""The contract tier: tests against the real sglang source, fetched by its own step.

`scripts/fetch-sglang VERSION` downloads the sglang wheel, with no dependencies, and unpacks it into
.cache/sglang-src/VERSION. scripts/bootstrap fetches the default version; the `sglang_tree` fixture
runs the script for any version a test asks for and does not find. Only tests under tests/contract/
can ask for a tree: the unit tier runs with no network and no downloaded source.
"""

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SGLANG_VERSION = "0.5.23"
SIM_SRC = REPO / "lab" / "engine-simulator" / "src"  # the engine simulator, whose flags are checked here
if str(SIM_SRC) not in sys.path:
    sys.path.insert(0, str(SIM_SRC))


def _has_source(tree: pathlib.Path) -> bool:
    return (tree / "sglang" / "srt" / "server_args.py").is_file()


@pytest.fixture(scope="session")
def sglang_tree():
    """`sglang_tree(version)`: the real sglang source tree of that version, fetched when missing.

    A tree that cannot be fetched is a failure with the fetch step's output, never a skip.
    """

    def tree_of(version: str) -> pathlib.Path:
        tree = REPO / ".cache" / "sglang-src" / version
        if _has_source(tree):
            return tree
        fetch = [str(REPO / "scripts" / "fetch-sglang"), version]
        proc = subprocess.run(fetch, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode or not _has_source(tree):
            pytest.fail(
                f"sglang {version} source tree missing at {tree} and `{' '.join(fetch)}` did not provide it"
                f" (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
            )
        return tree

    return tree_of


@pytest.fixture(scope="session")
def transformers_site_of():
    """`transformers_site_of(version)`: a folder holding that transformers release (and its dependencies, no
    torch), fetched by scripts/fetch-transformers when missing; a failed fetch is a failure, never a skip."""

    def site_of(version: str) -> pathlib.Path:
        site = REPO / ".cache" / "transformers" / version
        if not (site / ".complete").is_file():
            fetch = [str(REPO / "scripts" / "fetch-transformers"), version]
            proc = subprocess.run(fetch, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode or not (site / ".complete").is_file():
                pytest.fail(f"transformers {version} missing at {site} and `{' '.join(fetch)}` failed:\n{proc.stderr}")
        return site

    return site_of


@pytest.fixture(scope="session")
def sglang_source_tree(sglang_tree) -> pathlib.Path:
    """The real sglang 0.5.23 source tree (ddtree-0.5.23 and the simulator's flags are checked against it)."""
    return sglang_tree(SGLANG_VERSION)


def pytest_collection_modifyitems(config, items):
    """Every test of this tier carries the `contract` mark (`pytest -m contract`, `-m "not contract"`)."""
    here = pathlib.Path(__file__).parent
    for item in items:
        if here in pathlib.Path(item.fspath).parents:
            item.add_marker(pytest.mark.contract)
