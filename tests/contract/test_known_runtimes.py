"""known_runtimes.yml records what each sglang wheel really requires (its Requires-Dist)."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.requirements import (
    metadata_identity,
    metadata_requires,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
KNOWN = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "files" / "known_runtimes.yml").read_text())


@pytest.mark.parametrize("version", sorted(KNOWN["runtimes"]))
def test_the_recorded_requirements_are_the_wheels_requires_dist(sglang_tree, version):
    tree = sglang_tree(version)
    (metadata,) = tree.glob("sglang-*.dist-info/METADATA")
    text = metadata.read_text()
    assert metadata_identity(text) == ("sglang", version)
    real = [line for line in metadata_requires(text) if "extra ==" not in line]
    assert KNOWN["runtimes"][version]["requires"] == real


@pytest.mark.parametrize("version", sorted(KNOWN["runtimes"]))
def test_each_known_runtimes_core_is_what_its_sglang_pins(version):
    runtime = KNOWN["runtimes"][version]
    pins = {
        line.split("==")[0].split("[")[0].replace("_", "-").lower(): line.split("==")[1]
        for line in runtime["requires"]
        if "==" in line and ";" not in line
    }
    for package in runtime["core"]:
        if package["name"] in pins:
            assert pins[package["name"]] == package["version"], package["name"]
