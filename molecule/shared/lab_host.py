"""A testinfra host for a lab container, reached the way Ansible reaches it: one nsenter per command.

molecule's inventory says ``ansible_connection: podman``, a connection testinfra has no backend of its
own for, so its ``host`` fixture (``ansible://``) runs one whole Ansible process per command (seconds
each). ``lab_host(name)`` is the same container behind testinfra's own modules (``service``,
``socket``, ``file``, ``user``, ``process``, ...) with a backend that runs each command through
nsenter with the argv, environment and limits of lab/connection/podman.py (the connection the
playbooks use; its functions are reused, not copied): about 0.1 s a command.
"""

import importlib.util
import pathlib
import subprocess

import testinfra.host
from testinfra.backend import base

_PLUGIN = pathlib.Path(__file__).resolve().parents[2] / "lab" / "connection" / "podman.py"
_spec = importlib.util.spec_from_file_location("specdec_lab_connection", _PLUGIN)
_connection = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_connection)


class _Nsenter:
    """The lab connection's container lookup and argv, without an Ansible play context."""

    _cache_file = _connection.Connection._cache_file
    _container_pid = _connection.Connection._container_pid
    _argv = _connection.Connection._argv

    def __init__(self, container):
        self._pid = self._container_pid(container)
        self._rlimits = _connection._limits(self._pid)

    @staticmethod
    def get_option(name):
        return {"podman_executable": "podman"}[name]


class LabBackend(base.BaseBackend):
    """testinfra backend: commands in a running lab container through nsenter, as root."""

    NAME = "lab"

    def __init__(self, container, *args, **kwargs):
        self.container = container
        self._nsenter = None
        super().__init__(container, *args, **kwargs)

    def run(self, command, *args, **kwargs):
        if self._nsenter is None:
            self._nsenter = _Nsenter(self.container)
        cmd = self.get_command(command, *args)
        proc = subprocess.run(self._nsenter._argv(cmd), capture_output=True, check=False, timeout=120)
        return self.result(proc.returncode, self.encode(cmd), proc.stdout, proc.stderr)


def lab_host(container):
    """A testinfra Host for the lab container named ``container``."""
    backend = LabBackend(container)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host
