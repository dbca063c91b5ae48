"""A testinfra host for a lab container: testinfra's own modules, each command one ``podman exec``.

The deploy reaches a lab host over SSH (inventory/group_vars/lab), and so does testinfra's ``host``
fixture. ``lab_host(name)`` is the same container behind testinfra's own modules (``service``,
``socket``, ``file``, ``user``, ``process``, ...) through testinfra's podman backend.

The observer is root with every capability (``podman exec --privileged``), as root on a production
host is: a container's default root lacks CAP_SYS_PTRACE, so it cannot read another user's
``/proc/<pid>/environ``, and a test must see what the service really runs with. This is the test's
view only: the deploy reaches the host as root over SSH, with sshd's default privileges.
"""

from testinfra.backend import podman
from testinfra.host import Host


class LabBackend(podman.PodmanBackend):
    """testinfra's podman backend, as root with every capability (what a test observes with)."""

    NAME = "lab"

    @property
    def container(self):
        """The container's name (what a test passes to its own ``podman exec``)."""
        return self.name

    def run(self, command, *args, **kwargs):
        cmd = self.get_command(command, *args)
        out = self.run_local("podman exec --privileged %s /bin/sh -c %s", self.name, cmd)
        out.command = self.encode(cmd)
        return out


def lab_host(container):
    """A testinfra Host for the lab container named ``container``."""
    backend = LabBackend(container)
    host = Host(backend)
    backend.set_host(host)
    return host
