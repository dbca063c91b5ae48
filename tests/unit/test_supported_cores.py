"""The supported ansible-core range is said the same way everywhere, and CI tests every core in it.

The range runs from meta/runtime.yml's ``requires_ansible`` lower bound to the newest core CI tests
(requirements/controller.txt's pin and each requirements/venv-core-<version>.txt). Every role's
``min_ansible_version`` is its lower end; the README and galaxy.yml's description name both ends
("ansible-core X to Y"); every core in between has its requirements file (scripts/bootstrap makes its
venv, scripts/test runs its sanity and unit tests) and its sanity ignore file; a venv's Python is one
its ansible-core installs on; the molecule venv of a core pins that core and the controller's molecule.
"""

import pathlib
import re

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements"
RANGE_SAID = re.compile(r"ansible-core (\d+\.\d+) to (\d+\.\d+)")
CORE_PIN = re.compile(r"^ansible-core==(\d+\.\d+)\.\d+$", re.M)
PYTHON_FLOOR = re.compile(r"\A# python: >=(\d+\.\d+)\n")


def version(text):
    return tuple(int(part) for part in text.split("."))


def core_pin(path):
    pins = CORE_PIN.findall(path.read_text())
    assert len(pins) == 1, f"{path.relative_to(REPO)}: expected one ansible-core==X.Y.Z pin, found {pins}"
    return pins[0]


def cores_ci_tests():
    """{major.minor: requirements file} of every core CI runs sanity and the unit tests on."""
    cores = {}
    for req in [REQUIREMENTS / "controller.txt", *sorted(REQUIREMENTS.glob("venv-core-*.txt"))]:
        core = core_pin(req)
        assert core not in cores, f"ansible-core {core} is pinned by both {cores.get(core)} and {req.name}"
        cores[core] = req.name
    return cores


def lower_bound():
    spec = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["requires_ansible"]
    found = re.fullmatch(r">=(\d+\.\d+)\.0", spec)
    assert found, f"meta/runtime.yml requires_ansible is {spec!r}: expected '>=X.Y.0' (the lowest supported core)"
    return found.group(1)


def supported_range():
    return lower_bound(), max(cores_ci_tests(), key=version)


def minors_between(low, high):
    (major, first), (high_major, last) = version(low), version(high)
    assert major == high_major, f"the range {low} to {high} spans major versions"
    return [f"{major}.{minor}" for minor in range(first, last + 1)]


def test_every_core_in_the_range_has_its_requirements_and_sanity_ignore_file():
    low, high = supported_range()
    cores = cores_ci_tests()
    assert len(cores) >= 2, f"CI tests only {sorted(cores)}: the matrix lost a core"
    wanted = minors_between(low, high)
    assert sorted(cores, key=version) == wanted, (
        f"requires_ansible starts the range at {low} and CI's newest core is {high}: CI must test exactly "
        f"{wanted} (one requirements/venv-core-<version>.txt each besides the controller's), it tests "
        f"{sorted(cores, key=version)} ({cores})"
    )
    missing = [core for core in wanted if not (REPO / f"tests/sanity/ignore-{core}.txt").is_file()]
    assert missing == [], f"tests/sanity/ignore-<core>.txt missing for {missing}"


@pytest.mark.parametrize("role", sorted(p.parent.parent.name for p in REPO.glob("roles/*/meta/main.yml")))
def test_each_role_starts_at_the_range_s_lower_end(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta/main.yml").read_text())
    assert str(meta["galaxy_info"]["min_ansible_version"]) == lower_bound()


def galaxy_description():
    return yaml.safe_load((REPO / "galaxy.yml").read_text())["description"]


@pytest.mark.parametrize(
    "source, text",
    [("README.md", (REPO / "README.md").read_text), ("galaxy.yml description", galaxy_description)],
    ids=["README", "galaxy"],
)
def test_readme_and_galaxy_name_the_range(source, text):
    low, high = supported_range()
    said = RANGE_SAID.findall(re.sub(r"\s+", " ", text()))
    assert said, f"{source} does not name the supported range ('ansible-core {low} to {high}')"
    assert set(said) == {(low, high)}, f"{source} says {sorted(set(said))}, the range is {low} to {high}"


def test_the_readme_names_no_other_minimum():
    minimums = re.findall(r"ansible-core\s*>=\s*(\d+\.\d+)", (REPO / "README.md").read_text())
    assert set(minimums) <= {lower_bound()}, (
        f"README.md names ansible-core >= {minimums}, the range starts at {lower_bound()}"
    )


def requires_python(core):
    """The lowest Python the pinned ansible-core installs on (its wheel's Requires-Python, read from its venv)."""
    venv = REPO / ".venv" if core == core_pin(REQUIREMENTS / "controller.txt") else REPO / f".cache/venvs/core-{core}"
    metadata = sorted(venv.glob("lib/python3.*/site-packages/ansible_core-*.dist-info/METADATA"))
    assert len(metadata) == 1, f"{venv}: no single ansible-core installed ({metadata}); scripts/bootstrap makes it"
    found = re.search(r"^Requires-Python: >=(\d+\.\d+)$", metadata[0].read_text(), re.M)
    assert found, f"{metadata[0]}: no 'Requires-Python: >=X.Y'"
    return found.group(1)


def venv_python(path):
    """major.minor of a venv's interpreter (pyvenv.cfg)."""
    found = re.search(r"^version_info = (\d+\.\d+)", (path / "pyvenv.cfg").read_text(), re.M)
    assert found, f"{path}/pyvenv.cfg names no version_info"
    return found.group(1)


@pytest.mark.parametrize("req", sorted(p.name for p in REQUIREMENTS.glob("venv-core-*.txt")))
def test_a_core_venv_s_python_floor_is_one_its_core_installs_on(req):
    """scripts/bootstrap builds a venv on the controller's interpreter unless its file's first line asks
    for a newer one (`# python: >=X.Y`, ansible-core 2.20 and later); the floor must meet the core's own."""
    core = core_pin(REQUIREMENTS / req)
    floor = PYTHON_FLOOR.match((REQUIREMENTS / req).read_text())
    interpreter = floor.group(1) if floor else venv_python(REPO / ".venv")
    needed = requires_python(core)
    assert version(interpreter) >= version(needed), (
        f"{req}: ansible-core {core} needs Python >= {needed}; the venv would get {interpreter} "
        f"({'its # python: line' if floor else 'no # python: line, so the controller venv interpreter'}): "
        f"start the file with '# python: >={needed}'"
    )
    built = venv_python(REPO / f".cache/venvs/core-{core}")
    assert version(built) >= version(needed), f".cache/venvs/core-{core} runs Python {built}, {core} needs {needed}"


@pytest.mark.parametrize("req", sorted(p.name for p in REQUIREMENTS.glob("venv-molecule-*.txt")))
def test_a_molecule_venv_runs_its_core_with_the_controller_s_molecule(req):
    core = req.removeprefix("venv-molecule-").removesuffix(".txt")
    assert core == supported_range()[1], f"{req}: molecule runs on the newest core, {supported_range()[1]}"
    pins = dict(re.findall(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)$", (REQUIREMENTS / req).read_text(), re.M))
    core_pins = dict(
        re.findall(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)$", (REQUIREMENTS / f"venv-core-{core}.txt").read_text(), re.M)
    )
    controller = dict(
        re.findall(r"^([A-Za-z0-9_.\[\]-]+)==(\S+)$", (REQUIREMENTS / "controller.txt").read_text(), re.M)
    )
    assert pins["ansible-core"] == core_pins["ansible-core"], f"{req} and venv-core-{core}.txt pin other cores"
    for name in ("molecule", "molecule-plugins[podman]"):
        assert pins.get(name) == controller[name], (
            f"{req}: {name} {pins.get(name)}, the controller's {controller[name]}"
        )
    assert PYTHON_FLOOR.match((REQUIREMENTS / req).read_text()), f"{req}: no '# python: >=X.Y' first line"
