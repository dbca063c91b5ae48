# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lab only: runs pipelined Ansible modules in a lab container from a Python that has imported
ansible.module_utils.basic already.

A module run on a lab host spends ~0.14 of its ~0.16 CPU-s starting Python and importing
ansible.module_utils (measured in a lab container, ``python3 -X importtime`` over an AnsiballZ
payload). lab/connection/podman.py starts one of these servers per container (and per controller
ansible-core), inside the container's namespaces, and sends each pipelined module run to it. The
server has imported the controller's ``ansible.module_utils`` and ``ansible.modules`` (the seed,
``seed.zip``) and forks a process per run, which runs the AnsiballZ script exactly as ``python3``
would run it from stdin: the payload's own collection code is imported from the payload, its
stdin, stdout and stderr are the controller's pipes, and its exit status is the script's.

Usage (by the connection): ``python3 specdec_lab_module_server.py DIR`` where DIR holds
``seed.zip``; the server listens on ``DIR/sock`` and exits at once if another holds ``DIR/lock``.

Protocol, one connection per module run: the client sends a 4-byte big-endian length and a JSON
header with three descriptors (SCM_RIGHTS: the module's stdin, stdout and stderr). The header is
``{"env": {NAME: VALUE}}`` (variables the module's command line sets on top of the server's
environment: the connection's own runs) or ``{"env": {...}, "whole_env": true, "cwd": DIR}`` (the
whole environment and directory of a process that would have started Python: CLIENT below, run
where sudo starts the interpreter). The server answers one JSON line, ``{"accepted": BOOL}``, and
refuses a run whose interpreter would not start as the server's did (another user, a ``PYTHON*``
variable, another locale): the client then starts the interpreter itself, nothing having run. An
accepted run ends with a second line, ``{"rc": N}``: the exit status (negative: killed by that
signal).
"""

from __future__ import annotations

import atexit
import fcntl
import importlib.machinery
import json
import os
import signal
import socket
import struct
import sys
import traceback
import types

HEADER = struct.Struct(">I")
# Variables that decide how an interpreter starts (its locale; PYTHON* too): a run that changes one is refused.
STARTUP_VARIABLES = ("LANG", "LC_ALL", "LC_CTYPE")

# DIR/client.py, run as `PYTHON -S DIR/client.py DIR PYTHON` where PYTHON would have read a module from
# stdin (the connection puts it where sudo's shell starts PYTHON): hands this process's stdin, stdout,
# stderr, environment and directory to the server of DIR and ends as the module ended; when the server
# is not there or refuses, becomes PYTHON (stdin untouched).
CLIENT = """
import json, os, signal, socket, struct, sys
directory, interpreter = sys.argv[1], sys.argv[2]
try:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(os.path.join(directory, "sock"))
    header = json.dumps({"env": dict(os.environ), "whole_env": True, "cwd": os.getcwd()}).encode()
    socket.send_fds(sock, [struct.pack(">I", len(header)) + header], [0, 1, 2])
    answers = sock.makefile("rb")
    accepted = json.loads(answers.readline() or "{}").get("accepted")
except OSError:
    accepted = False
if not accepted:
    os.execv(interpreter, [interpreter])
line = answers.readline()
if not line:
    sys.stderr.write("lab module server %s lost the module run (no exit status)\\n" % directory)
    os._exit(255)
rc = json.loads(line)["rc"]
if rc < 0:
    signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
os._exit(rc)
"""


def exit_code(exc):
    """The status Python exits with for an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def read_all(fd):
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def refusal(request):
    """Why an interpreter started for ``request`` would not start as the server did; None if it would."""
    if (request["uid"], request["gid"]) != (os.geteuid(), os.getegid()):
        return "another user or group"
    env = request["env"] if request.get("whole_env") else {**os.environ, **request["env"]}
    names = {name for name in (*env, *os.environ) if name.startswith("PYTHON")}.union(STARTUP_VARIABLES)
    changed = sorted(name for name in names if env.get(name) != os.environ.get(name))
    return "another %s" % ", ".join(changed) if changed else None


def run_script(fds, request, base_path):
    """In the forked module process: become ``python3`` reading a script from stdin. Never returns."""
    rc = 1
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        if request.get("whole_env"):
            os.environ.clear()
            os.chdir(request["cwd"])
        os.environ.update(request["env"])
        sys.path[:] = base_path
        sys.argv[:] = [""]
        main = types.ModuleType("__main__")
        # what python3 gives a script read from stdin
        main.__file__, main.__cached__, main.__loader__ = "<stdin>", None, importlib.machinery.BuiltinImporter
        sys.modules["__main__"] = main
        code = compile(read_all(0), "<stdin>", "exec")
        try:
            exec(code, main.__dict__)
            rc = 0
        except SystemExit as exc:
            rc = exit_code(exc)
        except BaseException as exc:  # the interpreter's report, from the script's own frames on
            traceback.print_exception(type(exc), exc, exc.__traceback__.tb_next)
            rc = 1
        atexit._run_exitfuncs()  # the module's cleanups (AnsibleModule's tmpdir), as at interpreter exit
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(rc)


def recv_exact(conn, size):
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("client closed the connection")
        data += chunk
    return data


def handle(conn, base_path):
    """In the forked handler: run one module in a child of its own and answer its exit status."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    msg, fds, _flags, _addr = socket.recv_fds(conn, HEADER.size, 3)
    if len(fds) != 3 or len(msg) < HEADER.size:
        os._exit(2)
    (length,) = HEADER.unpack(msg[: HEADER.size])
    request = json.loads(recv_exact(conn, length))
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _peer_pid, request["uid"], request["gid"] = struct.unpack("3i", creds)  # the peer's, at connect time
    refused = refusal(request)
    conn.sendall(json.dumps({"accepted": refused is None, "refused": refused}).encode() + b"\n")
    if refused is not None:
        os._exit(0)
    pid = os.fork()
    if pid == 0:
        conn.close()
        run_script(fds, request, base_path)
    for fd in fds:
        os.close(fd)
    _pid, status = os.waitpid(pid, 0)
    conn.sendall(json.dumps({"rc": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
    conn.close()
    os._exit(0)


def serve(directory):
    lock = os.open(os.path.join(directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another server holds this directory
    # What `python3` reading a script from stdin has on sys.path: the current directory first.
    base_path = ["", *sys.path[1:]]
    seed = os.path.join(directory, "seed.zip")
    sys.path.insert(0, seed)
    import ansible.module_utils.basic  # noqa: F401, PLC0415 - the import every module run repeats

    try:  # ansible-core 2.19's AnsiballZ loader (2.18 has none)
        from ansible.module_utils._internal._ansiballz import _loader  # noqa: F401, PLC0415
    except ImportError:
        pass

    sys.path.remove(seed)  # the seed's packages keep it as their __path__
    path = os.path.join(directory, "sock")
    tmp = "%s.%d" % (path, os.getpid())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(tmp)
    os.chmod(tmp, 0o600)
    listener.listen(128)
    os.replace(tmp, path)
    # client.py last: once it is there, the server listens (the connection waits for it)
    client = os.path.join(directory, "client.py")
    with open(client + ".tmp", "w", encoding="utf-8") as out:
        out.write(CLIENT)
    os.replace(client + ".tmp", client)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    while True:
        conn, _addr = listener.accept()
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            listener.close()
            os.close(lock)
            try:
                handle(conn, base_path)
            except BaseException:  # the server's log says why a run got no answer
                traceback.print_exc()
                sys.stderr.flush()
            os._exit(3)
        conn.close()


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
