"""ansible-test integration runs the targets under tests/integration/targets/ against the built collection.

ansible-test needs the collection at .../ansible_collections/specdec/sglang/: the built tarball is
unpacked there (what a user installs), with tests/integration/targets and tests/config.yml beside it,
and each target runs with `--local` (this machine, no container, no GPU, no systemd).
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
TARGETS = REPO / "tests" / "integration" / "targets"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def _targets():
    return sorted(p.name for p in TARGETS.iterdir() if (p / "aliases").is_file())


def test_there_are_targets_with_tasks():
    assert _targets(), "tests/integration/targets holds no ansible-test target"
    for name in _targets():
        assert (TARGETS / name / "tasks" / "main.yml").is_file(), f"target {name} has no tasks/main.yml"


@pytest.fixture(scope="module")
def collection_root(tmp_path_factory):
    work = tmp_path_factory.mktemp("ansible-test")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--force", "--output-path", work],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    (tarball,) = work.glob("specdec-sglang-*.tar.gz")
    root = work / "ansible_collections" / "specdec" / "sglang"
    root.mkdir(parents=True)
    with tarfile.open(tarball) as tar:
        tar.extractall(root, filter="data")
    shutil.copytree(TARGETS, root / "tests" / "integration" / "targets")
    shutil.copy2(REPO / "tests" / "config.yml", root / "tests" / "config.yml")
    return root


@pytest.mark.parametrize("target", _targets())
def test_ansible_test_integration_target_passes(collection_root, target):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    proc = subprocess.run(
        [BIN / "ansible-test", "integration", "--local", "--python", PYTHON, "--color", "no", target],
        cwd=collection_root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert f"Running {target} integration test role" in output
    assert "failed=0" in output
