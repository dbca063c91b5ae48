"""Make the checkout importable as ansible_collections.specdec.sglang for tests."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

import pytest  # noqa: E402

SGLANG_VERSION = "0.5.23"


@pytest.fixture(scope="session")
def sglang_source_tree() -> pathlib.Path:
    """The real sglang 0.5.23 source tree (wheel unpacked by scripts/fetch-sglang).

    A missing tree is an install-step failure, never a skip.
    """
    tree = REPO / ".cache" / "sglang-src" / SGLANG_VERSION
    if not (tree / "sglang" / "srt" / "server_args.py").is_file():
        pytest.fail(f"sglang {SGLANG_VERSION} source tree missing at {tree}: run scripts/fetch-sglang")
    return tree
