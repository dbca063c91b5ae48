"""Make the checkout importable as ansible_collections.specdec.sglang for tests."""

import os
import pathlib
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))


def pytest_configure(config):
    expected = os.environ.get("SPECDEC_EXPECT_CORE")
    if expected:
        # scripts/test runs tests/unit once per supported ansible-core, each from its own venv:
        # a venv holding another core must not pass as that core's run.
        from ansible.release import __version__  # noqa: PLC0415

        if not __version__.startswith(expected + "."):
            raise pytest.UsageError(
                "SPECDEC_EXPECT_CORE=%s, but %s imports ansible-core %s: re-run scripts/bootstrap"
                % (expected, sys.executable, __version__)
            )
    config.addinivalue_line(
        "markers", "contract: runs against the real sglang source (tests/contract/, scripts/fetch-sglang)"
    )
