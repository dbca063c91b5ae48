# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lab-only connection: a task in a lab container costs one nsenter, not four podman calls.

molecule's podman driver writes ``ansible_connection: podman`` into its inventory. With
``ANSIBLE_CONNECTION_PLUGINS`` pointing here (``.config/molecule/config.yml`` does so), the
short name ``podman`` resolves to this plugin instead of ``containers.podman.podman``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile

from ansible.errors import AnsibleConnectionFailure, AnsibleError, AnsibleFileNotFound
from ansible.module_utils.common.text.converters import to_bytes, to_text
from ansible.plugins.connection import ConnectionBase
from ansible.utils.display import Display

DOCUMENTATION = """
name: podman
short_description: Lab containers through nsenter, with pipelining (molecule only)
description:
  - Runs each command in the namespaces of a running podman container's PID 1 with
    C(nsenter), as root, with the container's environment, working directory and
    open-file / process limits. Modules are pipelined (sent on stdin), so a task costs one process
    and not the several C(podman exec) calls (mkdir, chmod, run, rm) of
    C(containers.podman.podman) without pipelining.
  - Files go in and out through C(cat) in the container, so paths are resolved inside
    it (no host path built from the container's root).
  - The container's PID comes from C(podman container inspect) once per container and
    is cached under C($TMPDIR), and the cache is checked against the process start time.
  - Lab use only (molecule scenarios in this repository). Needs root on the controller.
author: specdec maintainers
options:
  remote_addr:
    description: The container name.
    default: inventory_hostname
    vars:
      - name: inventory_hostname
      - name: ansible_host
      - name: ansible_podman_host
  podman_executable:
    description: The podman binary used to find the container's PID.
    default: podman
    vars:
      - name: ansible_podman_executable
    env:
      - name: ANSIBLE_PODMAN_EXECUTABLE
  pipelining:
    description: Send modules on stdin (one process per task).
    type: boolean
    default: true
    vars:
      - name: ansible_pipelining
"""

display = Display()

# What `podman exec` gives a command in the lab image (see `podman exec <c> env`).
CONTAINER_ENV = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "TERM=xterm",
    "container=podman",
    "HOME=/root",
)
LIMITS = {"Max open files": "nofile", "Max processes": "nproc"}


def _start_ticks(pid):
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            raw = handle.read()
    except OSError:
        return None
    return raw[raw.rfind(")") + 1 :].split()[19]


def _limits(pid):
    """The container init's open-file and process limits as prlimit(1) options (--nofile=SOFT:HARD)."""
    found = []
    try:
        with open("/proc/%d/limits" % pid, encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for line in lines:
        for label, res in LIMITS.items():
            if line.startswith(label):
                soft, hard = line[len(label) :].split()[:2]
                found.append("--%s=%s:%s" % (res, soft, hard))
    return found


class Connection(ConnectionBase):
    """nsenter into a running container."""

    transport = "podman"
    has_pipelining = True
    has_tty = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._pid = None
        self._rlimits = []

    def _cache_file(self, name):
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return os.path.join(tempfile.gettempdir(), "specdec-lab-connection", safe)

    def _container_pid(self, name):
        cache = self._cache_file(name)
        try:
            with open(cache, encoding="ascii") as handle:
                pid, ticks = handle.read().split()
            if _start_ticks(int(pid)) == ticks:
                return int(pid)
        except (OSError, ValueError):
            pass
        cmd = [self.get_option("podman_executable"), "container", "inspect", "--format", "{{.State.Pid}}", name]
        proc = subprocess.run(cmd, capture_output=True, check=False)
        try:
            pid = int(proc.stdout.strip() or 0)
        except ValueError:
            pid = 0
        if proc.returncode != 0 or pid <= 0:
            raise AnsibleConnectionFailure(
                "lab container %s is not running: %s" % (name, to_text(proc.stderr).strip() or "no PID")
            )
        ticks = _start_ticks(pid)
        if ticks is not None:
            os.makedirs(os.path.dirname(cache), mode=0o700, exist_ok=True)
            tmp = "%s.%d" % (cache, os.getpid())
            with open(tmp, "w", encoding="ascii") as handle:
                handle.write("%d %s\n" % (pid, ticks))
            os.replace(tmp, cache)
        return pid

    def _connect(self):
        if not self._connected:
            self._pid = self._container_pid(self.get_option("remote_addr"))
            self._rlimits = _limits(self._pid)
            self._connected = True
        return self

    def _argv(self, cmd):
        return [
            "prlimit",
            *self._rlimits,
            "--",
            "nsenter",
            "--target",
            str(self._pid),
            "--mount",
            "--uts",
            "--ipc",
            "--net",
            "--pid",
            "--cgroup",
            "--root",
            "--wd",
            "--",
            "/usr/bin/env",
            "-i",
            *CONTAINER_ENV,
            "/bin/sh",
            "-c",
            cmd,
        ]

    def _run(self, cmd, stdin=subprocess.DEVNULL, in_data=None, stdout=subprocess.PIPE):
        self._connect()
        argv = self._argv(cmd)
        display.vvv("NSENTER %s" % shlex.join(argv), host=self.get_option("remote_addr"))
        if in_data is not None:
            stdin = subprocess.PIPE
        proc = subprocess.Popen(argv, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE)
        out, err = proc.communicate(in_data)
        return proc.returncode, out or b"", err or b""

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super().exec_command(cmd, in_data=in_data, sudoable=sudoable)
        return self._run(to_text(cmd, errors="surrogate_or_strict"), in_data=in_data)

    def put_file(self, in_path, out_path):
        super().put_file(in_path, out_path)
        display.vvv("PUT %s TO %s" % (in_path, out_path), host=self.get_option("remote_addr"))
        if not os.path.exists(to_bytes(in_path, errors="surrogate_or_strict")):
            raise AnsibleFileNotFound("file or module does not exist: %s" % in_path)
        with open(to_bytes(in_path, errors="surrogate_or_strict"), "rb") as src:
            rc, _out, err = self._run("cat > %s" % shlex.quote(out_path), stdin=src)
        if rc != 0:
            raise AnsibleError("failed to transfer %s to %s: %s" % (in_path, out_path, to_text(err)))

    def fetch_file(self, in_path, out_path):
        super().fetch_file(in_path, out_path)
        display.vvv("FETCH %s TO %s" % (in_path, out_path), host=self.get_option("remote_addr"))
        with open(to_bytes(out_path, errors="surrogate_or_strict"), "wb") as dst:
            rc, _out, err = self._run("cat %s" % shlex.quote(in_path), stdout=dst)
        if rc != 0:
            raise AnsibleError("failed to fetch %s to %s: %s" % (in_path, out_path, to_text(err)))

    def close(self):
        self._connected = False
