"""The built collection ships the product only, and resolves by FQCN once installed."""

import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
DEV_ONLY = (
    "benchmarks/",
    "lab/",
    "molecule/",
    "tests/",
    ".ci/",
    "scripts/",
    "requirements/",
    "collections/ansible_collections",
)


def _run(*args, cwd, env=None):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode:
        pytest.fail(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", out, cwd=REPO)
    (tarball,) = out.glob("specdec-sglang-*.tar.gz")
    return tarball


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("collections")
    _run(BIN / "ansible-galaxy", "collection", "install", "--force", "--no-deps", "-p", root, built, cwd=root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(root)
    return root, env


def test_tarball_has_no_lab_molecule_or_test_files(built):
    with tarfile.open(built) as tar:
        names = tar.getnames()
    leaked = [n for n in names if n.startswith(DEV_ONLY)]
    assert not leaked, f"dev-only files in the collection tarball: {leaked[:10]}"
    for needed in ("MANIFEST.json", "meta/runtime.yml", "plugins/modules/sglang_readiness.py", "playbooks/deploy.yml"):
        assert needed in names, f"{needed} missing from the collection tarball"


@pytest.mark.parametrize("module", sorted(p.stem for p in (REPO / "plugins/modules").glob("*.py")))
def test_installed_module_resolves_by_fqcn(installed, module):
    root, env = installed
    out = _run(BIN / "ansible-doc", "-t", "module", f"specdec.sglang.{module}", cwd=root, env=env)
    assert f"specdec.sglang.{module}" in out


@pytest.mark.parametrize("playbook", sorted(p.stem for p in (REPO / "playbooks").glob("*.yml")))
def test_installed_playbook_resolves_by_fqcn(installed, playbook):
    root, env = installed
    out = _run(
        BIN / "ansible-playbook", "-i", "localhost,", "--syntax-check", f"specdec.sglang.{playbook}", cwd=root, env=env
    )
    assert "playbook:" in out


@pytest.mark.parametrize("role", sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta").is_dir()))
def test_installed_role_documents_its_variables(installed, role):
    root, env = installed
    out = _run(BIN / "ansible-doc", "-t", "role", f"specdec.sglang.{role}", cwd=root, env=env)
    assert f"{role}_" in out, f"ansible-doc shows no {role}_* variable"
