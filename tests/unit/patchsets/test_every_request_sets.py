# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`serves: every_request`: the manifest schema accepts it, scripts/make-patchset writes and keeps it."""

import pathlib
import subprocess
import sys

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps

REPO = pathlib.Path(__file__).resolve().parents[3]
MAKE = REPO / "scripts" / "make-patchset"


def _tree(root, text):
    (root / "sglang" / "srt").mkdir(parents=True)
    (root / "sglang" / "srt" / "mod.py").write_text(text)
    meta = root / "sglang-1.0.dist-info" / "METADATA"
    meta.parent.mkdir()
    meta.write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 1.0\n\n")
    return root


def _make(*args):
    return subprocess.run([sys.executable, str(MAKE), *map(str, args)], capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("serves", "ok"),
    [("every_request", True), ({"algorithms": ["DDTREE"]}, True), ("every request", False), ("DDTREE", False)],
)
def test_serves_is_every_request_or_a_mapping(serves, ok):
    errors = ps._serves_errors(serves)
    assert (errors == []) is ok
    if not ok:
        assert "serves must be every_request or a mapping" in errors[0]


def test_make_patchset_writes_every_request_and_keeps_it_when_the_set_is_made_again(tmp_path):
    old = _tree(tmp_path / "old", "A = 1\n")
    new = _tree(tmp_path / "new", "A = 2\n")
    out = tmp_path / "set"
    made = _make("--trees", old, new, "--out", out, "--serves", "every_request")
    assert made.returncode == 0, made.stderr
    assert "serves: every_request\n" in (out / "patchset.yml").read_text()
    assert yaml.safe_load((out / "patchset.yml").read_text())["serves"] == "every_request"
    again = _make("--trees", old, new, "--out", out, "--force")
    assert again.returncode == 0, again.stderr
    assert yaml.safe_load((out / "patchset.yml").read_text())["serves"] == "every_request"
