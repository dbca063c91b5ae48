"""awx/execution-environment.yml: ansible-builder v3 produces its build context, and it pins what the
controller venv pins (requirements/controller.txt) for running playbooks.

Building the image needs the base image from quay.io, which is unreachable here; the build context
is everything up to that point (awx/README.md gives the build command).
"""

import copy
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
EE_FILE = REPO / "awx" / "execution-environment.yml"
# What a job needs at run time (the rest of controller.txt is lint, test and build tooling).
RUNTIME = {"ansible-core", "ansible-runner", "ansible", "jmespath"}


def controller_pins(text=None):
    text = (REPO / "requirements" / "controller.txt").read_text() if text is None else text
    pins = {}
    for line in text.splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==([^\s;#]+)", line.strip())
        if match:
            pins[match.group(1).lower()] = match.group(3)
    return pins


def ee_pins(ee):
    """name -> version for every pip requirement of the definition; unpinned ones map to None."""
    deps = ee["dependencies"]
    requirements = [deps["ansible_core"]["package_pip"], deps["ansible_runner"]["package_pip"], *deps.get("python", [])]
    pins = {}
    for req in requirements:
        match = re.match(r"^([A-Za-z0-9_.-]+)\s*(?:==\s*([^\s;#]+))?", req)
        pins[match.group(1).lower()] = match.group(2)
    return pins


def pin_problems(ee, controller):
    ee_versions = ee_pins(ee)
    problems = [f"{name}: not pinned with ==" for name, version in ee_versions.items() if version is None]
    problems += [
        f"{name}=={version} but requirements/controller.txt pins {controller.get(name)}"
        for name, version in ee_versions.items()
        if version is not None and controller.get(name) != version
    ]
    problems += [f"{name}: needed at run time, missing" for name in sorted(RUNTIME - set(ee_versions))]
    return problems


@pytest.fixture(scope="module")
def ee():
    return yaml.safe_load(EE_FILE.read_text())


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    out = tmp_path_factory.mktemp("ee") / "context"
    builder = pathlib.Path(sys.executable).parent / "ansible-builder"
    assert builder.is_file(), "ansible-builder is in requirements/controller.txt: run scripts/bootstrap"
    proc = subprocess.run(
        [str(builder), "create", "-f", str(EE_FILE), "-c", str(out), "--output-filename", "Containerfile"],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


def test_definition_is_builder_v3(ee):
    assert ee["version"] == 3
    assert ee["images"]["base_image"]["name"]
    assert ee["dependencies"]["python_interpreter"]["python_path"].endswith("python3.11")


def test_execution_environment_pins_what_the_controller_pins(ee):
    assert pin_problems(ee, controller_pins()) == []


def test_a_pin_that_drifts_from_the_controller_is_caught(ee):
    drifted = copy.deepcopy(ee)
    drifted["dependencies"]["ansible_core"]["package_pip"] = "ansible-core==2.18.0"
    drifted["dependencies"]["python"] = ["jmespath"]
    assert pin_problems(drifted, controller_pins()) == [
        "jmespath: not pinned with ==",
        f"ansible-core==2.18.0 but requirements/controller.txt pins {controller_pins()['ansible-core']}",
        "ansible: needed at run time, missing",
    ]


def test_builder_creates_the_build_context(ee, context):
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{ee["images"]["base_image"]["name"]}"' in containerfile
    pins = controller_pins()
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M).group(1).split()
    expected = [f"ansible-core=={pins['ansible-core']}", f"ansible-runner=={pins['ansible-runner']}"]
    assert sorted(refs) == sorted(expected)
    assert f'ARG PYCMD="{ee["dependencies"]["python_interpreter"]["python_path"]}"' in containerfile
    requirements = (context / "_build" / "requirements.txt").read_text().split()
    assert requirements == ee["dependencies"]["python"]
    assert "openssh-clients [platform:rpm]" in (context / "_build" / "bindep.txt").read_text().splitlines()
    for script in ("assemble", "install-from-bindep", "check_ansible", "entrypoint"):
        assert (context / "_build" / "scripts" / script).is_file()
    assert "RUN /output/scripts/check_ansible $PYCMD" in containerfile
