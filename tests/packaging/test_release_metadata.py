"""What the collection says about itself agrees with what CI tests and what was released.

- ``requires_ansible`` (meta/runtime.yml) and every role's ``min_ansible_version`` name the lowest
  ansible-core that CI runs the unit tests and sanity on (requirements/controller.txt and each
  requirements/venv-core-<version>.txt), and each of those cores has its sanity ignore file.
- The changelog: ``changelogs/changelog.yaml`` holds a release of galaxy.yml's version (or galaxy.yml
  is past the last release), CHANGELOG.rst is what antsibull-changelog generates from it, and no
  fragment that a release consumed is still in ``changelogs/fragments/`` (fragments added after the
  release stay there for the next version).
- Every ``version_added`` in the module docs and the roles' argument specs is a released version or
  galaxy.yml's, never newer than galaxy.yml.
"""

import ast
import pathlib
import re
import shutil
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
TOOLS = REPO / ".cache/venvs/tools/bin"  # scripts/bootstrap, requirements/venv-tools.txt


def _version(text):
    return tuple(int(part) for part in text.split("."))


def _galaxy_version():
    return yaml.safe_load((REPO / "galaxy.yml").read_text())["version"]


def _tested_cores():
    """major.minor of every ansible-core CI tests: the controller's and each extra core venv's."""
    cores = set()
    for req in [REPO / "requirements/controller.txt", *sorted((REPO / "requirements").glob("venv-core-*.txt"))]:
        pins = re.findall(r"^ansible-core==(\d+\.\d+)\.\d+$", req.read_text(), re.M)
        assert len(pins) == 1, f"{req.name}: expected one ansible-core==X.Y.Z pin, found {pins}"
        cores.add(pins[0])
    return sorted(cores, key=_version)


def test_requires_ansible_is_the_lowest_core_ci_tests():
    cores = _tested_cores()
    assert len(cores) >= 2, f"CI tests only {cores}: the matrix lost a core"
    runtime = yaml.safe_load((REPO / "meta/runtime.yml").read_text())
    assert runtime["requires_ansible"] == f">={cores[0]}.0", (
        f"meta/runtime.yml requires_ansible is {runtime['requires_ansible']!r}, CI tests {cores}: "
        f"set it to '>={cores[0]}.0'"
    )


@pytest.mark.parametrize("role", sorted(p.parent.parent.name for p in REPO.glob("roles/*/meta/main.yml")))
def test_role_min_ansible_version_is_the_lowest_core_ci_tests(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta/main.yml").read_text())
    assert str(meta["galaxy_info"]["min_ansible_version"]) == _tested_cores()[0]


def _pins(path):
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", path.read_text(), re.M))


@pytest.mark.parametrize("req", sorted(p.name for p in (REPO / "requirements").glob("venv-core-*.txt")))
def test_a_core_venv_pins_the_rest_as_the_controller_does(req):
    controller = _pins(REPO / "requirements/controller.txt")
    extra = {name: version for name, version in _pins(REPO / "requirements" / req).items() if name != "ansible-core"}
    assert extra, f"{req} holds no test dependencies"
    assert {name: controller.get(name) for name in extra} == extra


def test_each_tested_core_has_its_sanity_ignore_file():
    for core in _tested_cores():
        assert (REPO / f"tests/sanity/ignore-{core}.txt").is_file(), f"tests/sanity/ignore-{core}.txt missing"


# ---- changelog -------------------------------------------------------------------------------


def _changes():
    return yaml.safe_load((REPO / "changelogs/changelog.yaml").read_text())


def test_galaxy_version_is_released_or_the_next_one():
    releases = sorted(_changes()["releases"], key=_version)
    assert releases, "changelogs/changelog.yaml has no release"
    galaxy = _galaxy_version()
    assert galaxy in releases or _version(galaxy) > _version(releases[-1]), (
        f"galaxy.yml version {galaxy} is neither released nor after the last release {releases[-1]}"
    )


def test_no_released_fragment_is_left_in_the_fragments_directory():
    released = {name for release in _changes()["releases"].values() for name in release.get("fragments", [])}
    assert released, "the release lists no fragments"
    left = sorted(p.name for p in (REPO / "changelogs/fragments").iterdir() if p.name in released)
    assert left == [], f"fragments already in a release are still in changelogs/fragments/: {left}"


def _antsibull(*args, cwd):
    tool = TOOLS / "antsibull-changelog"
    assert tool.is_file(), f"{tool} missing: scripts/bootstrap makes it (requirements/venv-tools.txt)"
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_changelog_rst_is_generated_from_changelog_yaml(tmp_path):
    copy = tmp_path / "collection"
    for name in ("galaxy.yml", "CHANGELOG.rst"):
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, copy / name)
    shutil.copytree(REPO / "changelogs", copy / "changelogs", ignore=shutil.ignore_patterns(".plugin-cache.yaml"))
    (copy / "CHANGELOG.rst").write_text("stale\n")
    done = _antsibull("generate", cwd=copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (copy / "CHANGELOG.rst").read_text() == (REPO / "CHANGELOG.rst").read_text(), (
        "CHANGELOG.rst differs from what `antsibull-changelog generate` makes of changelogs/changelog.yaml"
    )


def test_changelog_lint_fails_on_a_broken_fragment(tmp_path):
    """The lint gate (scripts/test changelog) can fail: a fragment with an unknown section is refused."""
    copy = tmp_path / "collection"
    copy.mkdir()
    shutil.copy2(REPO / "galaxy.yml", copy / "galaxy.yml")
    shutil.copytree(REPO / "changelogs", copy / "changelogs", ignore=shutil.ignore_patterns(".plugin-cache.yaml"))
    assert _antsibull("lint", cwd=copy).returncode == 0
    (copy / "changelogs/fragments/broken.yml").write_text("---\nnew_stuff:\n  - not a section\n")
    done = _antsibull("lint", cwd=copy)
    assert done.returncode != 0 and "broken.yml" in done.stdout + done.stderr


# ---- version_added ---------------------------------------------------------------------------


def _version_added(node, where):
    """(where, value) for every version_added key in a nested dict/list."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "version_added":
                yield where, str(value)
            else:
                yield from _version_added(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _version_added(value, f"{where}[{index}]")


def _module_docs():
    for path in sorted((REPO / "plugins/modules").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and [t.id for t in node.targets if isinstance(t, ast.Name)] == [
                "DOCUMENTATION"
            ]:
                yield path.relative_to(REPO), yaml.safe_load(node.value.value)


def _all_version_added():
    found = []
    for path, doc in _module_docs():
        assert "version_added" in doc, f"{path}: DOCUMENTATION has no version_added"
        found += list(_version_added(doc, str(path)))
    for spec in sorted(REPO.glob("roles/*/meta/argument_specs.yml")):
        found += list(_version_added(yaml.safe_load(spec.read_text()), str(spec.relative_to(REPO))))
    return found


def test_version_added_values_are_released_versions_or_galaxys():
    galaxy = _galaxy_version()
    allowed = set(_changes()["releases"]) | {galaxy}
    found = _all_version_added()
    assert len(found) >= len(list((REPO / "plugins/modules").glob("*.py")))
    wrong = [(where, value) for where, value in found if value not in allowed or _version(value) > _version(galaxy)]
    assert wrong == [], f"version_added must be one of {sorted(allowed)} (galaxy.yml {galaxy}): {wrong}"


def test_released_modules_are_the_modules_with_that_version_added():
    """changelog.yaml's new modules of each release are the modules whose version_added is that release."""
    by_version = {}
    for path, doc in _module_docs():
        by_version.setdefault(str(doc["version_added"]), set()).add(path.stem)
    # a released module that was removed since stays named in meta/runtime.yml (a tombstone with its successors)
    routing = yaml.safe_load((REPO / "meta/runtime.yml").read_text()).get("plugin_routing", {}).get("modules", {})
    removed = {name for name, route in routing.items() if "tombstone" in route}
    for version, release in _changes()["releases"].items():
        listed = {m["name"] for m in release.get("modules", [])}
        assert listed - removed == by_version.get(version, set()), version
    assert all((REPO / "plugins/modules" / f"{name}.py").exists() is False for name in removed)
