"""Lab-host fixtures for integration tests: one private lab container per session, the engine simulator in it.

The lab host is a podman container with systemd as PID 1 (lab/bin/lab), named with a private prefix so
it never collides with other suites' hosts. Everything here is a test fixture; a failing step is a
test error with the command's output, never a skip.
"""

import os
import pathlib
import shlex
import subprocess

import pytest
from private_lab import PrivateLab

REPO = pathlib.Path(__file__).resolve().parents[2]
CONTAINERS_CONF = str(REPO / "lab" / "containers.conf")
LAB_PREFIX = "specdec-rdy-"
SIM_VENV = "/opt/sim"


def lab_env(**extra):
    env = dict(os.environ)
    env.update(
        CONTAINERS_CONF=CONTAINERS_CONF,
        SPECDEC_LAB_PREFIX=LAB_PREFIX,
        ANSIBLE_FORCE_COLOR="0",
        PY_COLORS="0",
    )
    env.update(extra)
    return env


def sh(argv, timeout=300, check=True, env=None, **kwargs):
    """Run a command; on failure raise with its output (fixture errors must say what broke)."""
    proc = subprocess.run(
        argv, check=False, capture_output=True, text=True, timeout=timeout, env=env or lab_env(), **kwargs
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            "expected `%s` to succeed, it exited %d:\n%s\n%s"
            % (" ".join(map(shlex.quote, argv)), proc.returncode, proc.stdout[-4000:], proc.stderr[-4000:])
        )
    return proc


class LabHost:
    """The session's lab host: run commands in it, or on the controller with the lab's environment."""

    def __init__(self, name):
        self.name = name

    @staticmethod
    def env(**extra):
        return lab_env(**extra)

    @staticmethod
    def run(argv, timeout=300, check=True, env=None, **kwargs):
        return sh(argv, timeout=timeout, check=check, env=env, **kwargs)

    def exec(self, script, timeout=120, check=True):
        """Run a shell script as root inside the lab host."""
        return sh(["podman", "exec", self.name, "sh", "-c", script], timeout=timeout, check=check)


@pytest.fixture(scope="session")
def lab_host():
    """One fresh lab host (systemd as PID 1) for the session (PrivateLab.up: one left by an earlier run is removed
    first), removed at the end."""
    lab = PrivateLab(LAB_PREFIX)
    lab.up()
    try:
        yield LabHost(lab.container)
    finally:
        lab.down()


@pytest.fixture(scope="session")
def simulator(lab_host):
    """The engine simulator (TEST DOUBLE for sglang) installed in a venv on the lab host, plus fake model dirs."""
    wheel = sh([str(REPO / "lab" / "engine-simulator" / "build-wheel")], timeout=300).stdout.strip().splitlines()[-1]
    name = pathlib.Path(wheel).name
    sh(["podman", "cp", wheel, "%s:/tmp/%s" % (lab_host.name, name)])
    lab_host.exec(
        "set -e; python3 -m venv %(venv)s; %(venv)s/bin/pip install -q --no-index /tmp/%(name)s; "
        "mkdir -p /models/target /models/draft; "
        'echo \'{"architectures": ["Qwen3ForCausalLM"], "max_position_embeddings": 32768}\' '
        ">/models/target/config.json; "
        'echo \'{"architectures": ["DFlashDraftModel"]}\' >/models/draft/config.json'
        % {"venv": SIM_VENV, "name": name},
        timeout=300,
    )
    return SIM_VENV + "/bin/sglang-engine-simulator"
