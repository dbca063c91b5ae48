"""Make the checkout importable as ansible_collections.specdec.sglang for tests."""

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "contract: runs against the real sglang source (tests/contract/, scripts/fetch-sglang)"
    )
