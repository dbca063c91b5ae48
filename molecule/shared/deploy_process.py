"""playbooks/deploy.yml as a process of its own, started from a scenario's testinfra tests.

The way ansible-runner (AWX) or an operator's shell starts one: ansible-playbook in a session of its own
(so a test can cancel it as ansible-runner does, SIGKILL to the group), against the scenario's inventory,
with the given extra vars. Its output is collected by a thread, so a test can watch it while it runs.
"""

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

REPO = pathlib.Path(__file__).resolve().parents[2]


def command(extra_vars, limit=None):
    """The ansible-playbook argv of a deploy of this scenario's hosts (or ``limit``) with these extra vars."""
    return [
        str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        os.environ["MOLECULE_INVENTORY_FILE"],
        str(REPO / "playbooks" / "deploy.yml"),
        "-e",
        json.dumps(extra_vars),
        *(["--limit", limit] if limit else []),
    ]


def start(extra_vars, limit=None):
    """Start a deploy; ``proc.lines`` fills as it prints, ``proc.finished_at`` is set when it ends."""
    proc = subprocess.Popen(
        command(extra_vars, limit),
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
    )
    proc.lines = []
    proc.finished_at = None

    def read():
        for line in proc.stdout:
            proc.lines.append(line)
        proc.wait()
        proc.finished_at = time.monotonic()

    proc.reader = threading.Thread(target=read, daemon=True)
    proc.reader.start()
    return proc


def finish(proc, timeout=900):
    """Wait for the deploy to end; its output on one line (warnings are wrapped to the terminal's width)."""
    proc.reader.join(timeout)
    assert not proc.reader.is_alive(), "the deploy did not end within %ss" % timeout
    return " ".join("".join(proc.lines).split())


def deploy(extra_vars, timeout=900, limit=None):
    """Run a deploy (of ``limit`` only, when given) to its end: (exit status, its output on one line)."""
    proc = start(extra_vars, limit)
    out = finish(proc, timeout)
    return proc.returncode, out
