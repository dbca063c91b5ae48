"""Runs ansible-playbook command lines, each in a process forked from this one, which has imported
ansible-core's CLI once (~0.5 of the ~1.5 CPU-s of an ansible-playbook run that fails validation).

Used by tests/integration/playbook_forks.py. Started with the environment and working directory every run
shares (ansible-core reads its configuration at import). Reads one JSON request per line on stdin,
``{"id": N, "args": [...], "stdout": PATH, "stderr": PATH}``; runs ``ansible-playbook ARGS`` in a child
whose stdout and stderr are those files and whose stdin is /dev/null, exactly as the ``ansible-playbook``
script runs it (``ansible.cli.playbook.main`` and its exit status); answers ``{"id": N, "rc": RC}`` per
line when the run ends. Runs go side by side. Ends at the end of its input.
"""

import json
import os
import signal
import sys

from ansible.cli.playbook import main


def exit_code(exc):
    """The status Python exits with for an uncaught SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def playbook(request):
    """In the forked child: be `ansible-playbook ARGS`. Never returns."""
    rc = 1
    try:
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        os.closerange(3, 256)
        sys.argv = ["ansible-playbook", *request["args"]]
        try:
            main()
            rc = 0
        except SystemExit as exc:
            rc = exit_code(exc)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except OSError:
                pass
        os._exit(rc)


def handle(request, answers):
    """In a forked handler: run the child, wait for it, answer. Never returns."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # ansible-playbook waits for its own workers
    pid = os.fork()
    if pid == 0:
        playbook(request)
    _pid, status = os.waitpid(pid, 0)
    os.write(answers, (json.dumps({"id": request["id"], "rc": os.waitstatus_to_exitcode(status)}) + "\n").encode())
    os._exit(0)


def serve():
    answers = os.dup(1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        if os.fork() == 0:
            handle(request, answers)


if __name__ == "__main__":
    serve()
