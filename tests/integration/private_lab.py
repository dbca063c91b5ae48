"""A private lab host for one integration test module, and commands for it.

Each module that deploys for real gets its own lab host (``lab/bin/lab``: a podman container with systemd
as PID 1) named with its own prefix, so modules never share or remove each other's hosts. ``PrivateLab``
holds what every such module needs: the environment with that prefix, commands on the controller that
raise with their output when they fail (a fixture error must say what broke), shell scripts inside the
host, and bringing the host up and down.
"""

import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB_BIN = str(REPO / "lab" / "bin" / "lab")


class PrivateLab:
    def __init__(self, prefix, **env):
        self.prefix = prefix
        self.container = prefix + "lab1"
        self._env = env

    def env(self, **extra):
        """The controller's environment for this lab: its prefix, the lab's containers.conf, no colour."""
        out = dict(os.environ)
        out.update(
            CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"),
            SPECDEC_LAB_PREFIX=self.prefix,
            ANSIBLE_FORCE_COLOR="0",
            ANSIBLE_NOCOLOR="1",
        )
        out.update(self._env)
        out.update(extra)
        return out

    def sh(self, argv, timeout=600, check=True):
        """Run ``argv`` in the repository with this lab's environment; with ``check``, raise with its output."""
        proc = subprocess.run(
            argv, cwd=REPO, env=self.env(), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )
        return proc

    def on_host(self, script, timeout=120, check=True):
        """A shell script as root inside the lab host."""
        return self.sh(["podman", "exec", self.container, "sh", "-c", script], timeout=timeout, check=check)

    def up(self):
        """A fresh lab host (one left by an earlier run is removed first)."""
        self.down()
        self.sh([LAB_BIN, "up", "1"])

    def down(self):
        self.sh([LAB_BIN, "down"], timeout=120, check=False)
