"""Fixtures for the engine simulator tests (helpers live in simulator_harness.py)."""

import json

import pytest
from simulator_harness import Launcher


@pytest.fixture(scope="session")
def model_dirs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("models")
    target, draft = root / "Qwen3.6-27B", root / "Qwen3.6-27B-DFlash"
    for path, arch in ((target, "Qwen3NextForCausalLM"), (draft, "DFlashDraftModel")):
        path.mkdir()
        (path / "config.json").write_text(
            json.dumps({"architectures": [arch], "model_type": "qwen3_next", "max_position_embeddings": 262144})
        )
    return {"target": str(target), "draft": str(draft)}


@pytest.fixture
def start_sim(tmp_path, model_dirs):
    launcher = Launcher(tmp_path, model_dirs)
    yield launcher.start
    launcher.stop_all()


@pytest.fixture(scope="module")
def module_launcher(tmp_path_factory, model_dirs):
    launcher = Launcher(tmp_path_factory.mktemp("sim"), model_dirs)
    yield launcher
    launcher.stop_all()
