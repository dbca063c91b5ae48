# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lab-only connection: a task in a lab container costs one nsenter, not four podman calls, and a
pipelined module run a fork of a Python that has ansible.module_utils imported already.

molecule's podman driver writes ``ansible_connection: podman`` into its inventory. With
``ANSIBLE_CONNECTION_PLUGINS`` pointing here (``.config/molecule/config.yml`` does so), the
short name ``podman`` resolves to this plugin instead of ``containers.podman.podman``.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shlex
import socket
import struct
import subprocess
import tempfile
import threading
import time
import zipfile

import ansible
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
  - A pipelined module run (C(/bin/sh -c '[NAME=value ...] PYTHON && sleep 0') with the
    AnsiballZ script on stdin) goes to a module server in the container
    (C(lab/module-server/specdec_lab_module_server.py)), started on first use. That is a Python
    that has imported the controller's C(ansible.module_utils) and forks a process per run, which
    runs the script as PYTHON would from stdin, on the controller's pipes. Anything else, and any
    run the server cannot take, runs through nsenter.
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
  module_server:
    description: Send pipelined module runs to the container's module server (false runs each with its own Python).
    type: boolean
    default: true
    vars:
      - name: ansible_podman_module_server
    env:
      - name: SPECDEC_LAB_MODULE_SERVER
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
# The module server: its code, where it lives in a container, how long a start may take.
SERVER_CODE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "module-server", "specdec_lab_module_server.py"
)
SERVER_ROOT = "/run/specdec-lab-modules"
SERVER_START_S = 30.0
# Writes the server and its seed into DIR (argv[1]) from stdin (8-byte length, code, seed) and starts it,
# detached; a server already holding DIR's lock makes the new one exit at once.
SERVER_BOOTSTRAP = (
    "import os, subprocess, sys\n"
    "d = sys.argv[1]\n"
    "data = sys.stdin.buffer.read()\n"
    "n = int.from_bytes(data[:8], 'big')\n"
    "os.makedirs(d, mode=0o700, exist_ok=True)\n"
    "for name, blob in (('server.py', data[8:8 + n]), ('seed.zip', data[8 + n:])):\n"
    "    tmp = os.path.join(d, '%s.%d' % (name, os.getpid()))\n"
    "    with open(tmp, 'wb') as f:\n"
    "        f.write(blob)\n"
    "    os.replace(tmp, os.path.join(d, name))\n"
    "log = open(os.path.join(d, 'log'), 'ab')\n"
    "subprocess.Popen([sys.executable, os.path.join(d, 'server.py'), d], stdin=subprocess.DEVNULL,"
    " stdout=log, stderr=log, start_new_session=True)\n"
)
# What become (sudo) runs with the module on stdin: the success marker, then the interpreter.
BECOME_RUN = re.compile(r"echo BECOME-SUCCESS-[a-z]+ ; (/[^\s'\";&|]+)")


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


def _module_words(cmd):
    """The words of ``[NAME=value ...] PYTHON`` in ``/bin/sh -c '... && sleep 0'``, else None."""
    try:
        outer = shlex.split(cmd)
        if len(outer) != 3 or outer[:2] != ["/bin/sh", "-c"] or any(c in outer[2] for c in '$`\\"\n'):
            return None
        words = shlex.split(outer[2])
    except ValueError:
        return None
    if len(words) < 4 or words[-3:] != ["&&", "sleep", "0"]:
        return None
    return words[:-3]


def pipelined_python(cmd):
    """``(environment, interpreter)`` of a pipelined module run's command, else None.

    Ansible runs a pipelined module as ``/bin/sh -c '[NAME=value ...] PYTHON && sleep 0'`` with the
    script on stdin. Anything else (a shell feature, more than one command) gets None.
    """
    words = _module_words(cmd)
    if words is None:
        return None
    *assignments, interpreter = words
    env = {}
    for word in assignments:
        name, sep, value = word.partition("=")
        if not (sep and name.replace("_", "a").isalnum() and not name[0].isdigit()):
            return None
        env[name] = value
    if not interpreter.startswith("/") or "=" in interpreter or any(c.isspace() for c in interpreter):
        return None
    return env, interpreter


def sudo_python(cmd):
    """``(words, interpreter)`` of a pipelined module run under sudo, else None.

    With ``become``, the run is ``/bin/sh -c 'sudo FLAGS /bin/sh -c '"'"'echo BECOME-SUCCESS-x ;
    PYTHON'"'"' && sleep 0'``; ``words`` are the sudo command's words.
    """
    words = _module_words(cmd)
    if not words or words[0] != "sudo" or len(words) < 4 or words[-3:-1] != ["/bin/sh", "-c"]:
        return None
    match = BECOME_RUN.fullmatch(words[-1])
    return (words, match.group(1)) if match else None


def through_client(words, interpreter, directory):
    """The sudo command of ``sudo_python`` with the server's client where sudo's shell starts PYTHON."""
    marker = words[-1].rsplit(" ; ", 1)[0]
    client = shlex.join([interpreter, "-S", directory + "/client.py", directory, interpreter])
    return "/bin/sh -c " + shlex.quote(shlex.join([*words[:-1], marker + " ; " + client]) + " && sleep 0")


def _seed():
    """The controller's ansible.module_utils and ansible.modules, as the zip the server imports from."""
    root = os.path.dirname(os.path.abspath(ansible.__file__))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as seed:
        seed.writestr("ansible/__init__.py", "")  # what an AnsiballZ payload has
        for sub in ("module_utils", "modules"):
            for top, dirs, files in os.walk(os.path.join(root, sub)):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith(".py"):
                        path = os.path.join(top, name)
                        seed.write(path, "ansible/" + os.path.relpath(path, root))
    return buf.getvalue()


def _server_key(interpreter):
    """Names a server: the interpreter, the server's code and the controller's ansible-core files."""
    root = os.path.dirname(os.path.abspath(ansible.__file__))
    digest = hashlib.sha256(interpreter.encode())
    with open(SERVER_CODE, "rb") as handle:
        digest.update(handle.read())
    for part in ("release.py", "module_utils/basic.py", "module_utils", "modules"):
        st = os.stat(os.path.join(root, part))
        digest.update(("%s %d %d\n" % (part, st.st_mtime_ns, st.st_size)).encode())
    digest.update(root.encode())
    return digest.hexdigest()[:16]


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
        cmd = to_text(cmd, errors="surrogate_or_strict")
        if in_data is not None and self.get_option("module_server"):
            plain = pipelined_python(cmd)
            if plain is not None:
                done = self._on_server(plain[1], plain[0], in_data)
                if done is not None:
                    return done
            become = sudo_python(cmd)
            if become is not None:
                directory = self._server_directory(become[1])
                if directory is not None:
                    cmd = through_client(become[0], become[1], directory)
        return self._run(cmd, in_data=in_data)

    # ---- the module server ------------------------------------------------------------------------
    def _in_container(self, path):
        return "/proc/%d/root%s" % (self._pid, path)

    def _server_socket(self, directory):
        """A connection to the server of ``directory``, else None."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self._in_container(directory + "/sock"))
        except OSError:
            sock.close()
            return None
        return sock

    def _server_directory(self, interpreter):
        """The directory of the container's server for ``interpreter``, started if need be; None if it
        could not be started (the caller runs the module through nsenter)."""
        self._connect()
        directory = "%s/%s" % (SERVER_ROOT, _server_key(interpreter))
        if os.path.exists(self._in_container(directory + "/client.py")):
            return directory
        # One start per container and server: the workers of a run's first task (one per host, and lab
        # tests alias one container many times) wait for it instead of each sending the seed.
        lock_path = self._cache_file("%s.%s.start" % (self.get_option("remote_addr"), directory.rsplit("/", 1)[1]))
        os.makedirs(os.path.dirname(lock_path), mode=0o700, exist_ok=True)
        with open(lock_path, "a", encoding="ascii") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            return self._start_server(interpreter, directory)

    def _start_server(self, interpreter, directory):
        if os.path.exists(self._in_container(directory + "/client.py")):
            return directory  # started while this worker waited
        with open(SERVER_CODE, "rb") as handle:
            code = handle.read()
        blob = len(code).to_bytes(8, "big") + code + _seed()
        cmd = "exec %s -c %s %s" % (shlex.quote(interpreter), shlex.quote(SERVER_BOOTSTRAP), shlex.quote(directory))
        rc, _out, err = self._run(cmd, in_data=blob)
        deadline = time.monotonic() + SERVER_START_S
        while rc == 0 and time.monotonic() < deadline:
            # the server writes client.py once it has imported the seed and listens
            if os.path.exists(self._in_container(directory + "/client.py")):
                return directory
            time.sleep(0.05)
        display.warning("lab module server not started in %s (rc %d): %s" % (directory, rc, to_text(err).strip()))
        return None

    def _on_server(self, interpreter, env, in_data):
        """(rc, stdout, stderr) of a pipelined module run by the container's module server; None when
        the server is not there or refused the run (the caller runs it through nsenter: nothing ran)."""
        directory = self._server_directory(interpreter)
        sock = None if directory is None else self._server_socket(directory)
        if sock is None:
            return None
        display.vvv("MODULE SERVER %s %s" % (directory, shlex.join(sorted(env))), host=self.get_option("remote_addr"))
        with sock:
            return self._server_run(sock, env, in_data)

    @staticmethod
    def _server_run(sock, env, in_data):
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            header = json.dumps({"env": env}).encode()
            socket.send_fds(sock, [struct.pack(">I", len(header)) + header], [in_r, out_w, err_w])
        finally:
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        answers = sock.makefile("rb")
        if not json.loads(answers.readline() or b"{}").get("accepted"):
            for fd in (in_w, out_r, err_r):
                os.close(fd)
            return None

        def feed():
            try:
                with open(in_w, "wb") as stdin:
                    stdin.write(in_data)
            except BrokenPipeError:
                pass  # the module ended before reading all of it, as with a process's stdin

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        outputs = {}

        def drain(fd, key):
            with open(fd, "rb") as stream:
                outputs[key] = stream.read()

        reader = threading.Thread(target=drain, args=(err_r, "err"), daemon=True)
        reader.start()
        drain(out_r, "out")
        reader.join()
        writer.join()
        answer = answers.readline()
        if not answer.endswith(b"\n"):
            raise AnsibleConnectionFailure("the lab module server lost the module run (no exit status)")
        return json.loads(answer)["rc"], outputs["out"], outputs["err"]

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
