"""The built collection ships the product only, and resolves by FQCN once installed.

The checkout is both the collection and a playbook project. What a collection user needs is named
below as an allow-list; anything else in the tarball (an inventory, ansible.cfg, the lab, AWX
settings, molecule config, a site playbook) fails the build test. galaxy.yml's `manifest`
directives decide what is built; this list is the independent check of what came out.
"""

import fnmatch
import os
import pathlib
import posixpath
import re
import shutil
import subprocess
import sys
import tarfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent

# Every file in the tarball matches one of these (fnmatch: `*` also crosses `/`).
ALLOWED = (
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "COPYING",
    "CHANGELOG.rst",
    "changelogs/changelog.yaml",
    "meta/runtime.yml",
    "docs/*.md",
    "docs/prometheus/*.yml",
    "plugins/action/*.py",
    "plugins/modules/*.py",
    "plugins/doc_fragments/*.py",
    "plugins/module_utils/*.py",
    "plugins/plugin_utils/*.py",
    "plugins/filter/*.py",
    "roles/sglang_*/defaults/main.yml",
    "roles/sglang_*/vars/main.yml",
    "roles/sglang_*/handlers/main.yml",
    "roles/sglang_*/README.md",
    "roles/sglang_*/meta/main.yml",
    "roles/sglang_*/meta/argument_specs.yml",
    "roles/sglang_*/tasks/*.yml",
    "roles/sglang_*/templates/*.j2",
    "roles/sglang_*/files/*",
    "patchsets/*/patchset.yml",
    "patchsets/*/diffs/*",
    "patchsets/*/files/*",
    # The operator playbooks, by name: a new playbook is a decision to publish it as specdec.sglang.<name>.
    "playbooks/deploy.yml",
    "playbooks/diagnose.yml",
    "playbooks/rollback.yml",
    "playbooks/stop.yml",
    "playbooks/gateway.yml",
    "playbooks/rolling.yml",
)
REQUIRED = (
    "MANIFEST.json",
    "README.md",
    "COPYING",
    "meta/runtime.yml",
    "plugins/modules/sglang_readiness.py",
    "playbooks/deploy.yml",
    "patchsets/ddtree-spec-info/patchset.yml",
)


def not_allowed(names):
    """Files (not directories) in a tarball listing that no ALLOWED pattern admits."""
    files = [n for n in names if not n.endswith("/")]
    return sorted(n for n in files if not any(fnmatch.fnmatchcase(n, pattern) for pattern in ALLOWED))


def _run(*args, cwd, env=None):
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode:
        pytest.fail(f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _build(source, out):
    _run(BIN / "ansible-galaxy", "collection", "build", "--output-path", out, cwd=source)
    (tarball,) = out.glob("specdec-sglang-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return tarball, [m.name + "/" if m.isdir() else m.name for m in tar.getmembers()]


def _checkout_copy(dest):
    """The checkout's files (tracked and untracked-but-not-ignored), symlinks left out."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        src = REPO / name
        if src.is_symlink() or not src.is_file():
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
    return dest


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    return _build(REPO, tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def built(build):
    return build[0]


@pytest.fixture(scope="module")
def installed(built, tmp_path_factory):
    root = tmp_path_factory.mktemp("collections")
    _run(BIN / "ansible-galaxy", "collection", "install", "--force", "--no-deps", "-p", root, built, cwd=root)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(root)
    return root, env


def test_shipped_docs_link_only_to_shipped_files(build):
    """README.md and docs/*.md of the tarball: every relative Markdown link names a file in the tarball."""
    tarball, names = build
    shipped = {n for n in names if not n.endswith("/")}
    broken = []
    with tarfile.open(tarball) as archive:
        for name in sorted(n for n in shipped if n.endswith(".md")):
            text = archive.extractfile(name).read().decode()
            for target in re.findall(r"\]\(([^)\s]+)\)", text):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target.split("#", 1)[0]))
                if resolved not in shipped and not any(n.startswith(resolved + "/") for n in shipped):
                    broken.append(f"{name}: {target}")
    assert broken == []
    assert "docs/benchmarks.md" not in shipped and "docs/gpu-acceptance.md" not in shipped


def test_tarball_holds_only_allowed_files(build):
    _tarball, names = build
    assert not_allowed(names) == [], "files outside the allow-list in the collection tarball"
    for needed in REQUIRED:
        assert needed in names, f"{needed} missing from the collection tarball"


def test_site_files_of_the_checkout_stay_out_of_the_tarball(build):
    """The playbook project's own files exist in the checkout and are not shipped."""
    _tarball, names = build
    site = ["ansible.cfg", "deploy.yml", "inventory/hosts.yml", ".config/molecule/config.yml", "awx/configure.yml"]
    site += ["lab/playbooks/lab.yml", "collections/requirements.yml"]
    for name in site:
        assert (REPO / name).is_file(), f"{name} is no longer in the checkout: update this test"
    assert sorted(set(site) & set(names)) == []
    assert not [n for n in names if n.startswith(("inventory/", "lab/", "molecule/", "tests/", "awx/"))]


@pytest.mark.parametrize(
    ("inject", "leaked"),
    [
        pytest.param(
            {"playbooks/site-lab.yml": "---\n- name: A site play\n  hosts: ct200\n  tasks: []\n"},
            ["playbooks/site-lab.yml"],
            id="site-playbook-in-playbooks",
        ),
        pytest.param(
            {"inventory/host_vars/ct300/main.yml": "---\nsglang_service_port: 30002\n"},
            ["inventory/group_vars/all/runtime.yml", "inventory/host_vars/ct300/main.yml"],
            id="inventory-included-by-galaxy-yml",
        ),
    ],
)
def test_the_allow_list_fails_when_a_site_file_enters_the_tarball(tmp_path, inject, leaked):
    """A copy of the checkout with a site file pushed into the build: the check names it."""
    copy = _checkout_copy(tmp_path / "checkout")
    for name, text in inject.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text)
    if any(n.startswith("inventory/") for n in inject):
        galaxy = copy / "galaxy.yml"
        galaxy.write_text(
            galaxy.read_text().replace(
                "    - include meta/runtime.yml\n",
                "    - include meta/runtime.yml\n    - recursive-include inventory *\n",
            )
        )
    out = tmp_path / "out"
    out.mkdir()
    _tarball, names = _build(copy, out)
    found = not_allowed(names)
    for name in leaked:
        assert name in found, f"{name} entered the tarball but the allow-list check missed it: {found}"


def test_the_unchanged_copy_builds_the_same_file_list(tmp_path, build):
    """The injection test's copy is faithful: without an injection it builds what the checkout builds."""
    out = tmp_path / "out"
    out.mkdir()
    _tarball, names = _build(_checkout_copy(tmp_path / "checkout"), out)
    assert sorted(names) == sorted(build[1])


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
