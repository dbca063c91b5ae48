"""Contract: the GPU record's runtime manifest brings a transformers that sglang 0.5.17 starts over.

sglang 0.5.17 (the real source tree) registers its own ``qwen3_asr`` configs with ``AutoConfig.register``
(no ``exist_ok``), which raises where transformers already has that model type, and imports
``Qwen2_5_VisionRotaryEmbedding`` from transformers' Qwen2.5-VL modeling, which transformers 5.17 no
longer defines. The reference venv of the lent GPU host holds transformers 5.17, so the manifest
(``inventory/manifests/sglang-0.5.17-cu130.yml``) takes transformers from the wheelhouse at sglang's pin.
Here, on the transformers that manifest names (fetched by scripts/fetch-transformers; no torch): the
registration runs through transformers' own ``AutoConfig.register`` in a subprocess, and the modeling
file defines the class sglang imports.
"""

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
MANIFEST = REPO / "inventory" / "manifests" / "sglang-0.5.17-cu130.yml"

REGISTER = textwrap.dedent(
    """
    import json, sys
    from transformers import AutoConfig, PretrainedConfig
    import transformers

    class Config(PretrainedConfig):  # stands in for sglang's Qwen3ASRConfig: only its model type matters
        model_type = sys.argv[1]

    try:
        AutoConfig.register(sys.argv[1], Config)  # as sglang 0.5.17 calls it: no exist_ok
        print(json.dumps({"version": transformers.__version__, "registered": True}))
    except ValueError as exc:
        print(json.dumps({"version": transformers.__version__, "registered": False, "error": str(exc)}))
    """
)


def manifest_entry(name):
    data = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    return next(m for m in data["sglang_runtime_manifest"] if m["name"] == name)


@pytest.fixture(scope="module")
def manifest_transformers(transformers_site_of):
    entry = manifest_entry("transformers")
    return entry, transformers_site_of(entry["version"])


def register(site, model_type):
    """transformers' own AutoConfig.register of ``model_type`` on ``site``'s transformers, in a subprocess."""
    run = subprocess.run(
        [sys.executable, "-c", REGISTER, model_type], env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_sglang_registers_qwen3_asr_without_exist_ok_and_imports_the_vision_rotary_embedding(sglang_tree):
    tree = sglang_tree("0.5.17")
    configs = (tree / "sglang" / "srt" / "configs" / "qwen3_asr.py").read_text()
    assert re.search(r'^AutoConfig\.register\("qwen3_asr", \w+\)$', configs, re.MULTILINE), "sglang changed"
    model = (tree / "sglang" / "srt" / "models" / "qwen2_5_vl.py").read_text()
    imported = re.search(r"from transformers\.models\.qwen2_5_vl\.modeling_qwen2_5_vl import \(([^)]*)\)", model)
    assert imported and "Qwen2_5_VisionRotaryEmbedding" in imported.group(1)


def test_the_manifests_transformers_is_sglangs_pin_from_the_wheelhouse(manifest_transformers):
    entry, _site = manifest_transformers
    assert (entry["version"], entry["source"]) == ("5.12.1", "wheelhouse")
    assert "override_reason" not in entry
    tokenizers = manifest_entry("tokenizers")
    assert (tokenizers["version"], tokenizers["source"]) == ("0.22.2", "wheelhouse")


def test_sglangs_registration_and_import_work_on_the_manifests_transformers(manifest_transformers):
    entry, site = manifest_transformers
    assert register(site, "qwen3_asr") == {"version": entry["version"], "registered": True}
    modeling = site / "transformers" / "models" / "qwen2_5_vl" / "modeling_qwen2_5_vl.py"
    assert re.search(r"^class Qwen2_5_VisionRotaryEmbedding\(", modeling.read_text(), re.MULTILINE)
    # tokenizers within what this transformers checks at import (the reference venv's 0.23.2 is not)
    table = (site / "transformers" / "dependency_versions_table.py").read_text()
    assert '"tokenizers": "tokenizers>=0.22.0,<=0.23.0"' in table


def test_a_type_transformers_already_has_is_refused_as_sglang_would_meet_it(manifest_transformers):
    # The same call on a model type this transformers does have: what sglang met on transformers 5.17.
    _entry, site = manifest_transformers
    result = register(site, "qwen2_5_vl")
    assert result["registered"] is False and "already used" in result["error"]
