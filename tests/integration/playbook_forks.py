"""ansible-playbook runs forked from one Python that has imported ansible-core (playbook_fork_server.py).

For suites that run the same playbooks many times with one environment (the bad-input matrix: ~90 runs that
end in validation): each run is the real ``ansible-playbook`` (``ansible.cli.playbook.main``, its argv, its
output and exit status), less the ~0.5 CPU-s of importing ansible-core again.
"""

import itertools
import json
import pathlib
import subprocess
import sys
import tempfile
import threading

SERVER = pathlib.Path(__file__).with_name("playbook_fork_server.py")


class PlaybookForks:
    def __init__(self, env, cwd):
        self._proc = subprocess.Popen(
            [sys.executable, str(SERVER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=cwd, text=True
        )
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._done = {}
        self._results = {}
        self._tmp = tempfile.TemporaryDirectory(prefix="playbook-forks-")
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self._proc.stdout:
            answer = json.loads(line)
            with self._lock:
                self._results[answer["id"]] = answer["rc"]
                self._done[answer["id"]].set()
        with self._lock:  # the server ended: every run still waiting gets no status
            for event in self._done.values():
                event.set()

    def run(self, args, timeout=300):
        """``ansible-playbook ARGS``: a CompletedProcess with its exit status, stdout and stderr (text)."""
        run_id = next(self._ids)
        out = pathlib.Path(self._tmp.name, "%d.out" % run_id)
        err = pathlib.Path(self._tmp.name, "%d.err" % run_id)
        event = threading.Event()
        with self._lock:
            self._done[run_id] = event
            self._proc.stdin.write(json.dumps({"id": run_id, "args": args, "stdout": str(out), "stderr": str(err)}))
            self._proc.stdin.write("\n")
            self._proc.stdin.flush()
        if not event.wait(timeout) or run_id not in self._results:
            raise RuntimeError("ansible-playbook %s: no exit status within %s s" % (" ".join(args), timeout))
        argv = ["ansible-playbook", *args]
        return subprocess.CompletedProcess(argv, self._results[run_id], out.read_text(), err.read_text())

    def close(self):
        self._proc.stdin.close()
        self._proc.wait(timeout=60)
        self._tmp.cleanup()
