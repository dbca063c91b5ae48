"""The contract tier: tests against the real sglang source, fetched by its own step.

`scripts/fetch-sglang` (run by scripts/bootstrap) downloads the sglang wheel, with no dependencies,
and unpacks it into .cache/sglang-src/<version>. Only tests under tests/contract/ can ask for that
tree: the unit tier runs with no network and no downloaded source.
"""

import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SGLANG_VERSION = "0.5.23"
SIM_SRC = REPO / "lab" / "engine-simulator" / "src"  # the engine simulator, whose flags are checked here
if str(SIM_SRC) not in sys.path:
    sys.path.insert(0, str(SIM_SRC))


@pytest.fixture(scope="session")
def sglang_source_tree() -> pathlib.Path:
    """The real sglang 0.5.23 source tree (wheel unpacked by scripts/fetch-sglang).

    A missing tree is a fetch-step failure, never a skip.
    """
    tree = REPO / ".cache" / "sglang-src" / SGLANG_VERSION
    if not (tree / "sglang" / "srt" / "server_args.py").is_file():
        pytest.fail(f"sglang {SGLANG_VERSION} source tree missing at {tree}: run scripts/fetch-sglang")
    return tree


def pytest_collection_modifyitems(config, items):
    """Every test of this tier carries the `contract` mark (`pytest -m contract`, `-m "not contract"`)."""
    here = pathlib.Path(__file__).parent
    for item in items:
        if here in pathlib.Path(item.fspath).parents:
            item.add_marker(pytest.mark.contract)
