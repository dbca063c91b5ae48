"""Every interruption converges: Ctrl-C at each step boundary of a deploy, then one plain deploy heals it.

One lab host (a podman container with systemd, the engine simulator as a TEST DOUBLE for sglang) serves
every case, in order. The deploy is DDTREE on the triton backend, so the plan applies the ddtree-0.5.17
patch set and every step of docs/operations.md runs: build (venv), overlay, patch, render, switch, start,
readiness, record. Two releases alternate, A (``/usr/bin/python3``) and B (``/usr/bin/python3.11``: the
same inputs, another interpreter path, so another release id): every case deploys the release that is
not the recorded one, so the switch is real.

Each case:

1. interrupts ``deploy.yml`` with SIGINT to its process group (what Ctrl-C in a terminal does), sent by a
   test-only callback (``interrupt_plugins/interrupt_at.py``) when the task at the boundary starts (the
   steps before it are done, it has not begun), or for readiness once the readiness job runs on the host
   and has been polled; a build boundary first removes the release it deploys, so the build runs;
2. checks the interrupted run stopped there (rc, the callback's mark) and that the record still names
   the release it named before (nothing is recorded before it is verified);
3. runs the next plain ``deploy.yml`` (same inputs, no interruption) and checks convergence: rc 0, the
   record names the release deployed, ``current`` points to it, the unit's main process runs from that
   release, a real generation answers, ``.complete`` exists only in releases whose patch sets verify
   (checked on the host against the set's manifest), no temporary file is left in the runtime root or
   the state dir, and no readiness job of an earlier run still probes.

The release build is reused where the boundary allows: only the build, overlay and patch cases build.
"""

import json
import os
import pathlib
import shlex
import signal
import subprocess
import time

import pytest
import yaml
from private_lab import PrivateLab

REPO = pathlib.Path(__file__).resolve().parents[2]
ROOT = "/opt/sglang"
STATE = ROOT + "/state"
UNIT = "sglang.service"
PLUGINS = pathlib.Path(__file__).resolve().parent / "interrupt_plugins"
INTERPRETERS = {"A": "/usr/bin/python3", "B": "/usr/bin/python3.11"}
# Every run: DDTREE (so the patch set step runs; verified by compiling, since the lab's stub torch
# imports but its venv has no numpy for sglang's imports), a short stability window, and no watchdog
# (its install is not a step under test and costs a tenth of a run).
COMMON_VARS = {
    "sglang_service_speculative_algorithm": "DDTREE",
    "sglang_service_attention_backend": "triton",
    "sglang_patches_verify_mode": "compile",
    "sglang_service_settle_s": 1,
    "sglang_service_watch_enabled": False,
}
# An interrupted readiness job with this stability window outlives the next run (minutes on a loaded
# machine) unless something ends it: the check that none is left after the next run means something.
LONG_SETTLE_S = 900
INTERRUPT_RC = 99  # ansible-playbook's "User interrupted execution"


class Boundary:
    def __init__(self, name, task, *, event="start", build=False, interrupted_vars=None, seed=""):
        self.name = name
        self.task = task
        self.event = event
        self.build = build
        self.interrupted_vars = interrupted_vars or {}
        self.seed = seed  # a host script run before the interrupted run


UV_DIR = "%s/tools/uv-%s" % (
    ROOT,
    yaml.safe_load((REPO / "roles/sglang_runtime/defaults/main.yml").read_text())["sglang_runtime_uv_version"],
)
# What SIGINT inside `python -m venv` leaves (measured: bin/python, no pip; ensurepip runs last).
INTERRUPTED_VENV = "rm -rf %s && python3 -m venv --without-pip %s" % (UV_DIR, UV_DIR)


BOUNDARIES = [
    # Inside the uv tool install (one per host, shared by releases): the tool venv as an interrupted
    # `python -m venv` leaves it, then a run interrupted once uv is installed (the venv boundary).
    Boundary("uv", "Create the venv", build=True, seed=INTERRUPTED_VENV),
    # The build: the venv exists, sglang is not installed yet.
    Boundary("build", "Install sglang", build=True),
    # The overlay: triton copied from the reference venv, the wheelhouse wheels not installed.
    Boundary("overlay", "Install the wheelhouse wheels", build=True),
    # The patch step: the set is applied, not verified yet.
    Boundary("patch", "Verify the patch sets", build=True),
    # Render: the unit, env and config files are rendered for the new release, nothing restarted.
    Boundary("render", "Decide whether the service must restart"),
    # Switch: the old release is stopped and current points to the new one; nothing runs.
    Boundary("switch", "Verify the unit file with systemd-analyze"),
    # Start: the new release runs, unverified.
    Boundary("start", "Wait for a real generation"),
    # Readiness: the readiness job probes on the host (with a long stability window).
    Boundary(
        "readiness",
        "Wait for a real generation",
        event="async_poll",
        interrupted_vars={"sglang_service_settle_s": LONG_SETTLE_S},
    ),
    # Record: the new release is verified, not recorded.
    Boundary("record", "Record the release that proved good"),
]

LAB = PrivateLab(
    "specdec-intr-",
    SPECDEC_REPO=str(REPO),
    PY_COLORS="0",
)
env, sh, on_host = LAB.env, LAB.sh, LAB.on_host


class Run:
    def __init__(self, rc, output, seconds, mark):
        self.rc = rc
        self.output = output
        self.seconds = seconds
        self.mark = mark


def playbook(tmp, label, extra_vars, interrupt=None, timeout=900):
    """ansible-playbook deploy.yml in a session of its own (Ctrl-C reaches its group only)."""
    vars_file = tmp / ("%s.json" % label)
    vars_file.write_text(json.dumps(extra_vars))
    mark = tmp / ("%s.mark" % label)
    extra = {}
    if interrupt is not None:
        extra = {
            "ANSIBLE_CALLBACK_PLUGINS": str(PLUGINS),
            "ANSIBLE_CALLBACKS_ENABLED": "interrupt_at",
            "SPECDEC_INTERRUPT_TASK": interrupt.task,
            "SPECDEC_INTERRUPT_EVENT": interrupt.event,
            "SPECDEC_INTERRUPT_MARK": str(mark),
        }
    argv = ["ansible-playbook", "deploy.yml", "-i", "inventory/hosts.yml", "-l", "lab1"]
    argv += ["-e", "@%s" % vars_file]
    started = time.monotonic()
    proc = subprocess.Popen(
        argv,
        cwd=REPO,
        env=env(**extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as err:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError("%s: ansible-playbook ran over %d s:\n%s" % (label, timeout, output[-4000:])) from err
    (tmp / ("%s.log" % label)).write_text(output)
    fired = json.loads(mark.read_text()) if mark.exists() else None
    return Run(proc.returncode, output, time.monotonic() - started, fired)


def record():
    out = on_host("cat %s/last_good/deploy.json 2>/dev/null || true" % STATE).stdout
    return json.loads(out) if out.strip() else None


def release_ids():
    out = on_host("ls %s/releases 2>/dev/null || true" % ROOT).stdout
    return sorted(out.split())


def current_release():
    return pathlib.PurePosixPath(on_host("readlink %s/current || true" % ROOT).stdout.strip()).name


def main_pid_release():
    """The release the unit's main process runs from (its interpreter is <root>/releases/<id>/venv/bin/python)."""
    pid = on_host("systemctl show -p MainPID --value %s" % UNIT).stdout.strip()
    if pid in ("", "0"):
        return None
    argv = on_host("tr '\\0' '\\n' </proc/%s/cmdline" % pid).stdout.split("\n")
    prefix = ROOT + "/releases/"
    for arg in argv[:2]:
        if arg.startswith(prefix):
            return arg[len(prefix) :].split("/")[0]
    return "unknown: %s" % argv[:2]


def generate():
    script = (
        "import json, urllib.request; "
        "req = urllib.request.Request('http://127.0.0.1:30000/generate', method='POST', "
        "data=json.dumps({'text': 'Say hi.', 'sampling_params': {'max_new_tokens': 4}}).encode(), "
        "headers={'Content-Type': 'application/json', 'Authorization': 'Bearer lab-only-not-a-secret'}); "
        "print(json.load(urllib.request.urlopen(req, timeout=10))['meta_info']['completion_tokens'])"
    )
    return int(on_host('python3 -c "%s"' % script).stdout.strip())


PATCH_SET = REPO / "patchsets" / "ddtree-0.5.17" / "patchset.yml"

# Run on the host with the patch set's {path: result_sha256}: every release with .complete must have
# those files at their result checksums (what a verified patch step leaves); prints the others.
COMPLETE_CHECK = r"""
import glob, hashlib, json, os, sys
expected = json.loads(sys.argv[1])
problems = {}
for marker in glob.glob('/opt/sglang/releases/*/.complete'):
    rel = os.path.dirname(marker)
    site = (glob.glob(rel + '/venv/lib/python3*/site-packages') or [rel + '/venv (no site-packages)'])[0]
    for path, result in sorted(expected.items()):
        target = os.path.join(site, path)
        digest = hashlib.sha256(open(target, 'rb').read()).hexdigest() if os.path.exists(target) else 'absent'
        if digest != result:
            problems[os.path.basename(rel)] = '%s is %s, not the patched %s' % (path, digest, result)
            break
print(json.dumps(problems))
"""


def unverified_complete_releases():
    """{release: problem} for releases marked complete whose patch set files are not the patched ones."""
    files = yaml.safe_load(PATCH_SET.read_text())["files"]
    expected = json.dumps({entry["path"]: entry["result_sha256"] for entry in files})
    out = on_host("python3 -c %s %s" % (shlex.quote(COMPLETE_CHECK), shlex.quote(expected))).stdout
    return json.loads(out)


def readiness_jobs():
    """Readiness jobs (async module runs) still alive on the host: pid and command line."""
    # [A]: the pattern does not match the shell that runs pgrep.
    out = on_host("pgrep -af '[A]nsiballZ_sglang_readiness' || true").stdout
    return [line for line in out.splitlines() if line.strip()]


def temp_files():
    """Temporary files an interrupted write could leave in the runtime root (top level) and the state dir."""
    out = on_host(
        "find %s -maxdepth 1 -name '*tmp*' ; find %s -name '*tmp*' -o -name '.ansible*'" % (ROOT, STATE)
    ).stdout
    return sorted(line for line in out.splitlines() if line.strip())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """The lab host, prepared, with release A deployed and recorded."""
    tmp = tmp_path_factory.mktemp("interrupt")
    state = {"tmp": tmp, "recorded": "A", "ids": {}, "timings": {}}
    reuse = os.environ.get("SPECDEC_INTERRUPT_REUSE_LAB") == "1"
    if reuse and sh(["podman", "container", "exists", LAB.container], check=False).returncode == 0 and record():
        # Development only: the lab host of an earlier run, kept (its record says which release runs).
        recorded = record()["release_id"]
        doc = json.loads(on_host("cat %s/releases/%s/release.json" % (ROOT, recorded)).stdout)
        state["recorded"] = next(k for k, v in INTERPRETERS.items() if v == doc["python_interpreter"])
        for release in release_ids():
            found = on_host("cat %s/releases/%s/release.json 2>/dev/null || true" % (ROOT, release)).stdout
            interpreter = json.loads(found)["python_interpreter"] if found.strip() else ""
            state["ids"].update({k: release for k, v in INTERPRETERS.items() if v == interpreter})
        state["ids"][state["recorded"]] = recorded
        yield state
        return
    LAB.up()
    try:
        started = time.monotonic()
        sh(["ansible-playbook", "lab/playbooks/lab.yml", "-l", "lab1"], timeout=600)
        state["timings"]["prepare"] = time.monotonic() - started
        run = playbook(tmp, "baseline", {**COMMON_VARS, "sglang_runtime_python_interpreter": INTERPRETERS["A"]})
        assert run.rc == 0, run.output[-4000:]
        state["timings"]["baseline"] = run.seconds
        state["ids"]["A"] = record()["release_id"]
        yield state
    finally:
        timings = tmp / "timings.json"
        timings.write_text(json.dumps(state["timings"], indent=1))
        print("interruption matrix timings (s): %s" % json.dumps(state["timings"]))
        # Readiness jobs a case left behind (started by this test's runs) end with the host.
        LAB.down()


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=[boundary.name for boundary in BOUNDARIES])
def test_interrupted_deploy_converges_on_the_next_run(lab, boundary):
    tmp = lab["tmp"]
    target = "B" if lab["recorded"] == "A" else "A"
    before = record()
    target_vars = {**COMMON_VARS, "sglang_runtime_python_interpreter": INTERPRETERS[target]}
    if boundary.build and target in lab["ids"]:
        # The release of this deploy is built again (it is not current: the other one is recorded and runs).
        assert current_release() != lab["ids"][target]
        on_host("rm -rf %s/releases/%s" % (ROOT, lab["ids"][target]))

    if boundary.seed:
        on_host(boundary.seed)
    interrupted = playbook(tmp, boundary.name + "-interrupted", {**target_vars, **boundary.interrupted_vars}, boundary)
    lab["timings"][boundary.name + "-interrupted"] = round(interrupted.seconds, 1)
    assert interrupted.mark is not None, "no interrupt at %r:\n%s" % (boundary.task, interrupted.output[-3000:])
    assert interrupted.mark["task"].startswith(boundary.task)
    assert interrupted.rc == INTERRUPT_RC, interrupted.output[-3000:]
    assert record() == before, "an interrupted deploy changed the release record"

    # Whatever happens next, the next case deploys the other release.
    lab["recorded"] = target
    recovery = playbook(tmp, boundary.name + "-recovery", target_vars)
    lab["timings"][boundary.name + "-recovery"] = round(recovery.seconds, 1)
    jobs = readiness_jobs()
    try:
        assert recovery.rc == 0, recovery.output[-4000:]
        now = record()
        lab["ids"][target] = now["release_id"]
        assert now["release_id"] != before["release_id"], "the recovery deployed the recorded release again"
        assert current_release() == now["release_id"]
        assert on_host("systemctl is-active %s" % UNIT, check=False).stdout.strip() == "active"
        assert main_pid_release() == now["release_id"], "the running process is not the recorded release"
        assert generate() > 0
        complete = unverified_complete_releases()
        assert complete == {}, "releases marked complete without verified patch sets: %s" % complete
        assert temp_files() == []
        assert jobs == [], "readiness jobs of an earlier run still probe after the next run: %s" % jobs
    finally:
        if jobs:
            # End what this test's interrupted run left (by pid), so the next case starts clean.
            pids = " ".join(line.split()[0] for line in jobs)
            on_host("kill %s" % pids, check=False)
