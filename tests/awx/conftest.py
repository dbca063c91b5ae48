"""tests/awx: AWX job templates, surveys, configure.yml and the execution environment.

awx/runner/awx_job.py (the private data dir builder and runner) and survey_checks.py (next to this
file) are imported from the checkout.
"""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
for path in (REPO / "awx" / "runner", HERE):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
