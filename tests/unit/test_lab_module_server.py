"""The lab connection's module server (lab/connection/podman.py, lab/module-server/).

What the connection sends to the server (only a plain pipelined module run), and what the server makes
of a script: the same stdout, stderr and exit status as ``python3`` reading it from stdin, the
command line's environment, the seed's ansible.module_utils imported once, the module's own code from
its payload, the module's exit handlers run. The server runs here on the controller, in a temporary
directory, as the connection starts it in a lab container.
"""

import importlib.util
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _load_connection():
    spec = importlib.util.spec_from_file_location("specdec_lab_connection", REPO / "lab" / "connection" / "podman.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


podman = _load_connection()


@pytest.mark.parametrize(
    ("cmd", "expected"),
    [
        ("/bin/sh -c '/usr/bin/python3 && sleep 0'", ({}, "/usr/bin/python3")),
        (
            "/bin/sh -c 'FOO=bar SPACED='\"'\"'a b'\"'\"' /usr/bin/python3.11 && sleep 0'",
            ({"FOO": "bar", "SPACED": "a b"}, "/usr/bin/python3.11"),
        ),
    ],
)
def test_a_plain_pipelined_module_run_is_recognised(cmd, expected):
    assert podman.pipelined_python(cmd) == expected


@pytest.mark.parametrize(
    "cmd",
    [
        "/bin/sh -c 'echo ~/.ansible && sleep 0'",  # not an interpreter path
        "/bin/sh -c '/usr/bin/python3 /root/.ansible/tmp/x/AnsiballZ_stat.py && sleep 0'",  # a file, not stdin
        "/bin/sh -c 'HOME=$HOME /usr/bin/python3 && sleep 0'",  # a shell expansion
        "/bin/sh -c '/usr/bin/python3; rm -rf /x && sleep 0'",  # more than one command
        "/bin/sh -c '/usr/bin/python3'",  # not what Ansible sends
        "/usr/bin/python3 && sleep 0",  # no shell around it
        "/bin/sh -c 'sudo -H -S -n -u root /bin/sh -c '\"'\"'echo BECOME; /usr/bin/python3'\"'\"' && sleep 0'",
        "/bin/sh -c 'unterminated",
    ],
)
def test_anything_else_is_left_to_nsenter(cmd):
    assert podman.pipelined_python(cmd) is None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The server as the connection starts it: bootstrap from stdin, detached, in its own directory."""
    directory = tmp_path_factory.mktemp("module-server")
    code = pathlib.Path(podman.SERVER_CODE).read_bytes()
    blob = len(code).to_bytes(8, "big") + code + podman._seed()
    subprocess.run([sys.executable, "-c", podman.SERVER_BOOTSTRAP, str(directory)], input=blob, check=True)
    ready = directory / "client.py"  # written once the server listens, what the connection waits for
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert time.monotonic() < deadline, (directory / "log").read_text()
        time.sleep(0.05)
    yield directory
    for pid in _server_pids(directory):
        os.kill(pid, signal.SIGTERM)


def _server_pids(directory):
    """The server this fixture started (its command line names its directory): ended by pid."""
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if str(directory / "server.py").encode() in argv:
                found.append(int(entry.name))
    return found


def run(directory, script, env=None):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(directory / "sock"))
        return podman.Connection._server_run(sock, env or {}, textwrap.dedent(script).encode())


def python3(script, env=None):
    """What ``python3`` makes of the same script on stdin (the reference)."""
    proc = subprocess.run(
        [sys.executable],
        input=textwrap.dedent(script).encode(),
        capture_output=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


SCRIPTS = {
    "exit-status-and-both-streams": """
        import sys
        print("to stdout")
        print("to stderr", file=sys.stderr)
        sys.exit(3)
    """,
    "uncaught-exception": """
        def broken():
            raise ValueError("from the module")
        broken()
    """,
    "exit-with-a-message": """
        import sys
        sys.exit("a message for stderr")
    """,
    "main-and-argv": """
        import sys, __main__
        print(__name__, sys.argv, hasattr(__main__, "__file__"), sys.path[0] == "")
    """,
    "large-output": """
        import sys
        sys.stdout.write("x" * 3_000_000)
        sys.stderr.write("y" * 300_000)
    """,
    "exit-handlers-run": """
        import atexit
        atexit.register(print, "cleaned up")
        raise SystemExit(0)
    """,
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_script_ends_as_python3_would_end_it(server, name):
    rc, out, err = run(server, SCRIPTS[name])
    expected_rc, expected_out, expected_err = python3(SCRIPTS[name])
    assert (rc, out) == (expected_rc, expected_out)
    assert err.replace(b"<stdin>", b"") == expected_err.replace(b"<stdin>", b"")


def test_the_command_lines_environment_reaches_the_module(server):
    rc, out, _err = run(server, "import os; print(os.environ['SPECDEC_PROBE'])", {"SPECDEC_PROBE": "a b"})
    assert (rc, out) == (0, b"a b\n")
    rc, out, _err = run(server, "import os; print(os.environ.get('SPECDEC_PROBE'))")
    assert (rc, out) == (0, b"None\n")  # one run's environment never reaches the next


def test_module_utils_come_from_the_seed_imported_once_and_collection_code_from_the_payload(server, tmp_path):
    payload = tmp_path / "payload"
    (payload / "ansible_collections" / "probe").mkdir(parents=True)
    (payload / "ansible_collections" / "probe" / "__init__.py").write_text("")
    (payload / "ansible_collections" / "probe" / "mod.py").write_text("WHERE = 'payload'\n")
    script = f"""
        import sys
        imported_before = "ansible.module_utils.basic" in sys.modules
        sys.path.insert(0, {str(payload)!r})
        from ansible.module_utils import basic
        from ansible_collections.probe import mod
        import runpy
        ping = runpy.run_module("ansible.modules.ping", run_name="not_main")
        print(imported_before, "seed.zip" in basic.__file__, mod.WHERE, "ping" in ping["DOCUMENTATION"])
    """
    rc, out, err = run(server, script)
    assert (rc, out) == (0, b"True True payload True\n"), err


def test_a_run_leaves_the_server_as_it_was(server):
    """A module that changes the interpreter's state (a global, a module) changes only its own process."""
    rc, _out, err = run(server, "from ansible.module_utils import basic; basic._ANSIBLE_ARGS = b'left over'")
    assert rc == 0, err
    rc, out, err = run(server, "from ansible.module_utils import basic; print(basic._ANSIBLE_ARGS)")
    assert (rc, out) == (0, b"None\n"), err


@pytest.mark.parametrize("env", [{"PYTHONPATH": "/elsewhere"}, {"LC_ALL": "C"}])
def test_a_run_that_would_start_python_differently_is_refused_and_nothing_runs(server, tmp_path, env):
    marker = tmp_path / "ran"
    assert run(server, f"open({str(marker)!r}, 'w').close()", env) is None
    assert not marker.exists()


SUDO_RUN = (
    "/bin/sh -c 'sudo -H -S -n  -u root /bin/sh -c '\"'\"'echo BECOME-SUCCESS-abcxyz ; /usr/bin/python3'\"'\"'"
    " && sleep 0'"
)


def test_a_module_run_under_sudo_gets_the_client_where_sudos_shell_starts_python():
    words, interpreter = podman.sudo_python(SUDO_RUN)
    assert interpreter == "/usr/bin/python3"
    assert podman.pipelined_python(SUDO_RUN) is None  # never run by the server without sudo
    rewritten = podman.through_client(words, interpreter, "/run/specdec-lab-modules/k")
    outer = shlex.split(rewritten)
    assert outer[:2] == ["/bin/sh", "-c"]
    inner = shlex.split(outer[2])
    assert inner[:6] == ["sudo", "-H", "-S", "-n", "-u", "root"] and inner[-3:] == ["&&", "sleep", "0"]
    assert inner[6:8] == ["/bin/sh", "-c"]
    assert inner[8] == (
        "echo BECOME-SUCCESS-abcxyz ; /usr/bin/python3 -S /run/specdec-lab-modules/k/client.py"
        " /run/specdec-lab-modules/k /usr/bin/python3"
    )


@pytest.mark.parametrize(
    "cmd",
    [
        SUDO_RUN.replace("; /usr/bin/python3", "; /usr/bin/python3 /tmp/AnsiballZ_x.py"),
        SUDO_RUN.replace("echo BECOME-SUCCESS-abcxyz ;", "echo hello ;"),
        SUDO_RUN.replace("sudo ", "su "),
    ],
)
def test_other_become_commands_are_left_as_they_are(cmd):
    assert podman.sudo_python(cmd) is None


def client(directory, script, env=None):
    """The client as sudo's shell starts it: the module on its stdin."""
    proc = subprocess.run(
        [sys.executable, "-S", str(directory / "client.py"), str(directory), sys.executable],
        input=textwrap.dedent(script).encode(),
        capture_output=True,
        env={**os.environ, **(env or {})},
        cwd="/",
        check=False,
    )
    return proc.returncode, proc.stdout, proc.stderr


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_the_client_ends_as_python3_would_end_the_script(server, name):
    rc, out, err = client(server, SCRIPTS[name])
    expected_rc, expected_out, expected_err = python3(SCRIPTS[name])
    assert (rc, out) == (expected_rc, expected_out)
    assert err.replace(b"<stdin>", b"") == expected_err.replace(b"<stdin>", b"")


def test_the_client_hands_over_its_whole_environment_and_directory(server):
    script = "import os, sys; print(os.getcwd(), os.environ.get('SPECDEC_PROBE'), 'ansible' in sys.modules)"
    assert client(server, script, {"SPECDEC_PROBE": "sudo's"})[:2] == (0, b"/ sudo's True\n")


def test_the_client_becomes_python3_when_refused_or_without_a_server(server, tmp_path):
    script = "import os, sys; print(os.environ.get('PYTHONPATH'), 'ansible.module_utils.basic' in sys.modules)"
    # refused (another PYTHONPATH): python3 itself runs the script, with that PYTHONPATH
    assert client(server, script, {"PYTHONPATH": str(tmp_path)})[:2] == (0, f"{tmp_path} False\n".encode())
    nowhere = tmp_path / "no-server"
    nowhere.mkdir()
    (nowhere / "client.py").write_bytes((server / "client.py").read_bytes())
    assert client(nowhere, script)[:2] == (0, b"None False\n")
