"""Patch set manifest checks that need no sglang source (the real-wheel tests are in tests/contract/)."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps

REPO = pathlib.Path(__file__).resolve().parents[5]
SET_DIR = REPO / "patchsets" / "ddtree-spec-info"


@pytest.fixture
def manifest():
    return yaml.safe_load((SET_DIR / "patchset.yml").read_text())


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda m: m["files"][0].update(base_sha256="abc"), r"files\[0\] \(.*\)\.base_sha256 must be 64"),
        (lambda m: m["files"][0].update(overlay="files/x"), "exactly one of overlay or diff"),
        (lambda m: m["files"][0].update(path="../etc/passwd"), "without '..'"),
        (lambda m: m.update(sglang_version=None), "sglang_version must be"),
        (lambda m: m.update(name="Bad Name"), "name must match"),
        (lambda m: m["verify"].update(defines=["no-colon"]), "verify.defines"),
        (lambda m: m.update(extra=1), "unknown keys"),
    ],
)
def test_malformed_manifest_is_refused(manifest, mutate, message):
    mutate(manifest)
    with pytest.raises(ps.PatchsetError, match=message):
        ps.check_manifest(manifest)


def test_manifest_loads_from_the_set_directory(manifest):
    assert ps.load_manifest(str(SET_DIR)) == manifest


def test_missing_manifest_is_refused(tmp_path):
    with pytest.raises(ps.PatchsetError, match=r"patchset\.yml not found"):
        ps.load_manifest(str(tmp_path))


def test_a_refusal_names_the_set_when_labelled():
    """The role's precheck passes label: the refusal reads as the role's former assert did."""
    label = "sglang_patches_sets[0]=/sets/ddtree (ddtree-spec-info)"
    assert ps.refusal(label, "x.py has sha256 1, expected 2") == (
        "sglang_patches_sets[0]=/sets/ddtree (ddtree-spec-info): x.py has sha256 1, expected 2"
    )
    assert ps.refusal("", "x.py has sha256 1") == "x.py has sha256 1"
    assert ps.refusal(None, "x.py has sha256 1") == "x.py has sha256 1"
