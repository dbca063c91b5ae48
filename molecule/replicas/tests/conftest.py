"""Make molecule/shared importable and share its fixtures with this scenario's testinfra tests."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "shared"))

from scenario_fixtures import key, lab_host  # noqa: F401
