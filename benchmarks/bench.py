# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every benchmark of docs/benchmarks.md, side by side, in one run (benchmarks/run calls this).

    benchmarks/run [--only verdicts,redeploy,fleet,venv] [--reps 5] [--out DIR]

- verdicts: time to verdict per failure mode in a lab host (benchmarks/lab_verdicts.py), the
  collection's readiness logic vs. the field's GET /v1/models loop (capped), and the ready overhead;
- redeploy: deploy.yml on a fresh lab host, then again: wall time, changed count, and the unit's
  NRestarts / InvocationID / MainPID before and after the second run;
- fleet: deploy.yml from scratch to 1, 2 and 4 fresh lab hosts (the 1-host figure is the first
  deploy of `redeploy`);
- venv: one pinned set (ansible-core, pytest, jmespath, ruff and their dependencies, from a local
  wheelhouse: no network in the timed part) into a new venv, pip vs. uv, both caches warm.

Lab hosts are podman containers named specdec-bench-labN (removed at the end). Results:
DIR/results.json, plots by benchmarks/plot.py. Loopback and lab containers only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
PREFIX = "specdec-bench-"
LAB = [str(REPO / "lab" / "bin" / "lab")]
SIM_WHEEL = next(iter(sorted((REPO / ".cache" / "wheels").glob("sglang_engine_simulator-*.whl"))), None)
VENV_SET = ["ansible-core==2.19.14", "pytest==9.2.0", "jmespath==1.1.0", "ruff==0.17.6"]


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def sh(argv, check=True, env=None, **kwargs):
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, **kwargs)
    if check and proc.returncode != 0:
        raise RuntimeError(
            "%s failed (rc %d):\n%s\n%s" % (argv, proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
        )
    return proc


def lab_env():
    return dict(os.environ, SPECDEC_LAB_PREFIX=PREFIX, SPECDEC_REPO=str(REPO), ANSIBLE_FORCE_COLOR="0")


def machine():
    with open("/proc/cpuinfo", encoding="utf-8") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "?")
    with open("/proc/loadavg", encoding="utf-8") as handle:
        load = handle.read().split()[:3]
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem, 1),
        "kernel": platform.release(),
        "loadavg_at_start": load,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
    }


def in_host(name, script, check=True):
    return sh(["podman", "exec", PREFIX + name, "sh", "-c", script], check=check)


# ---- verdicts --------------------------------------------------------------------------------
def bench_verdicts(reps, ready_reps, naive_cap):
    host = "lab1"
    container = PREFIX + host
    log("verdicts: preparing %s" % container)
    in_host(host, "mkdir -p /opt/bench/ansible_collections/specdec/sglang/plugins /opt/bench/model")
    tar = subprocess.Popen(["tar", "-C", str(REPO / "plugins"), "-c", "module_utils"], stdout=subprocess.PIPE)
    sh(
        ["podman", "exec", "-i", container, "tar", "-C", "/opt/bench/ansible_collections/specdec/sglang/plugins", "-x"],
        stdin=tar.stdout,
    )
    tar.wait()
    sh(["podman", "cp", str(REPO / "benchmarks" / "lab_verdicts.py"), container + ":/opt/bench/"])
    sh(["podman", "cp", str(SIM_WHEEL), container + ":/opt/bench/"])
    in_host(
        host,
        "echo '{}' > /opt/bench/model/config.json && python3 -m venv /opt/bench/sim && "
        "/opt/bench/sim/bin/pip install -q --no-index --disable-pip-version-check /opt/bench/%s" % SIM_WHEEL.name,
    )
    log("verdicts: %d runs per mode, %d healthy starts, naive loop capped at %gs" % (reps, ready_reps, naive_cap))
    proc = sh(
        [
            "podman",
            "exec",
            container,
            "python3",
            "/opt/bench/lab_verdicts.py",
            "--reps",
            str(reps),
            "--ready-reps",
            str(ready_reps),
            "--naive-cap",
            str(naive_cap),
        ]
    )
    data = json.loads(proc.stdout)
    ready = [r["ready_line_to_verdict_s"] for r in data["runs"] if r["mode"] == "healthy" and r["ready"]]
    data["ready_overhead"] = {
        "starts": len(ready),
        "median_s": statistics.median(ready) if ready else None,
        "max_s": max(ready) if ready else None,
        "poll_interval_s": 0.5,
        "values_s": ready,
    }
    data["naive_cap_s"] = naive_cap
    return data


def lab_inventory(path, hosts):
    """An inventory of lab1..labN in the lab group (inventory/hosts.yml itself names lab1 and lab2), its path as str."""
    path.write_text(
        "all:\n  children:\n    lab:\n      hosts:\n" + "".join("        lab%d:\n" % i for i in range(1, hosts + 1))
    )
    return str(path)


def ansible(tool, inventory_extra):
    """argv of .venv's ``ansible`` or ``ansible-playbook`` over the project's inventory and ``inventory_extra``."""
    return [str(REPO / ".venv" / "bin" / tool), "-i", str(REPO / "inventory" / "hosts.yml"), "-i", inventory_extra]


def lab_up(hosts, inventory_extra, prepare=True):
    """Fresh lab hosts lab1..labN; with ``prepare``, lab/playbooks/lab.yml on them (not timed)."""
    sh([*LAB, "down"], env=lab_env())
    log("lab: starting %d hosts" % hosts)
    sh([*LAB, "up", str(hosts)], env=lab_env())
    if prepare:
        log("lab: lab/playbooks/lab.yml on every host (fake model directories, reference venv; not timed)")
        started = ",".join("lab%d" % i for i in range(1, hosts + 1))
        sh(
            [*ansible("ansible-playbook", inventory_extra), str(REPO / "lab" / "playbooks" / "lab.yml"), "-l", started],
            env=lab_env(),
            cwd=str(REPO),
        )


# ---- deploys ---------------------------------------------------------------------------------
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def deploy(hosts, inventory_extra, results_dir, tag):
    env = lab_env()
    argv = [*ansible("ansible-playbook", inventory_extra), str(REPO / "deploy.yml"), "-l", ",".join(hosts)]
    start = time.monotonic()
    proc = sh(argv, check=False, env=env, cwd=str(REPO))
    wall = time.monotonic() - start
    (results_dir / ("deploy-%s.log" % tag)).write_text(proc.stdout + proc.stderr)
    recap = {
        m.group(1): {"ok": int(m.group(2)), "changed": int(m.group(3)), "failed": int(m.group(5))}
        for m in RECAP.finditer(proc.stdout)
    }
    log("deploy %s (%s): rc %d, %.1fs, recap %s" % (tag, ",".join(hosts), proc.returncode, wall, recap))
    return {"hosts": hosts, "rc": proc.returncode, "wall_s": round(wall, 2), "recap": recap}


def unit_identity(host):
    out = in_host(
        host, "systemctl show sglang.service --property=NRestarts,InvocationID,MainPID,ActiveState", check=False
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def lab_connection():
    """The connection the lab inventory reaches its hosts with (inventory/group_vars/lab), the row's name."""
    text = (REPO / "inventory" / "group_vars" / "lab" / "main.yml").read_text()
    return re.search(r"^ansible_connection: (\S+)$", text, re.M).group(1)


def bench_redeploy(inventory_extra, results_dir):
    """A fresh deploy, then the same deploy again, through the inventory's connection (lab_connection)."""
    first = deploy(["lab1"], inventory_extra, results_dir, "fresh-1")
    rows = {}
    for name in (lab_connection(),):
        before = unit_identity("lab1")
        second = deploy(["lab1"], inventory_extra, results_dir, "redeploy")
        after = unit_identity("lab1")
        rows[name] = {
            "deploy": second,
            "changed": sum(v["changed"] for v in second["recap"].values()),
            "tasks_ok": sum(v["ok"] for v in second["recap"].values()),
            "unit_before": before,
            "unit_after": after,
            "restarted": before != after,
        }
    return {"first": first, "redeploys": rows}


def bench_fleet(inventory_extra, results_dir, one_host):
    rows = {"1": one_host}
    rows["2"] = deploy(["lab2", "lab3"], inventory_extra, results_dir, "fresh-2")
    rows["4"] = deploy(["lab4", "lab5", "lab6", "lab7"], inventory_extra, results_dir, "fresh-4")
    base = rows["1"]["wall_s"]
    return {
        "deploys": rows,
        "ratio_4_to_1": round(rows["4"]["wall_s"] / base, 2),
        "ratio_2_to_1": round(rows["2"]["wall_s"] / base, 2),
    }


# ---- venv ------------------------------------------------------------------------------------
def bench_venv(reps):
    uv = str(REPO / ".venv" / "bin" / "uv")
    house = REPO / ".cache" / "bench-wheelhouse"
    if not (house / "requirements.txt").exists():
        log("venv: filling the wheelhouse once (network): %s" % " ".join(VENV_SET))
        house.mkdir(parents=True, exist_ok=True)
        sh([sys.executable, "-m", "pip", "download", "-q", "-d", str(house), *VENV_SET])
        names = sorted(p.name for p in house.glob("*.whl"))
        pins = [re.match(r"([^-]+)-([^-]+)-", n) for n in names]
        (house / "requirements.txt").write_text(
            "".join("%s==%s\n" % (m.group(1).replace("_", "-"), m.group(2)) for m in pins)
        )
    req = str(house / "requirements.txt")
    pip_cache = REPO / ".cache" / "bench-pip-cache"
    uv_cache = REPO / ".cache" / "bench-uv-cache"
    env = dict(os.environ, PIP_CACHE_DIR=str(pip_cache), UV_CACHE_DIR=str(uv_cache), UV_PYTHON_DOWNLOADS="never")
    times = {"pip": [], "uv": []}
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(reps + 1):  # the first round warms both caches and is not counted
            for tool in ("pip", "uv"):
                venv = pathlib.Path(tmp) / ("%s-%d" % (tool, rep))
                start = time.monotonic()
                if tool == "pip":
                    sh(["python3", "-m", "venv", str(venv)], env=env)
                    sh(
                        [
                            str(venv / "bin" / "pip"),
                            "install",
                            "-q",
                            "--disable-pip-version-check",
                            "--no-index",
                            "--find-links",
                            str(house),
                            "-r",
                            req,
                        ],
                        env=env,
                    )
                else:
                    sh([uv, "venv", "-q", "--python", "python3", str(venv)], env=env)
                    sh(
                        [
                            uv,
                            "pip",
                            "install",
                            "-q",
                            "--no-index",
                            "--find-links",
                            str(house),
                            "--python",
                            str(venv / "bin" / "python"),
                            "-r",
                            req,
                        ],
                        env=env,
                    )
                took = time.monotonic() - start
                if rep > 0:
                    times[tool].append(round(took, 2))
                shutil.rmtree(venv)
                log("venv: %s round %d: %.2fs%s" % (tool, rep, took, " (warm-up)" if rep == 0 else ""))
    packages = sum(1 for line in open(req, encoding="utf-8") if line.strip())
    pip_m, uv_m = statistics.median(times["pip"]), statistics.median(times["uv"])
    return {
        "set": VENV_SET,
        "packages": packages,
        "times_s": times,
        "pip_median_s": pip_m,
        "uv_median_s": uv_m,
        "speedup": round(pip_m / uv_m, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="verdicts,redeploy,fleet,venv")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--ready-reps", type=int, default=10)
    parser.add_argument("--naive-cap", type=float, default=11.0)
    parser.add_argument("--venv-reps", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    only = set(args.only.split(","))
    results_dir = args.out
    results_dir.mkdir(parents=True, exist_ok=True)
    results = {"machine": machine(), "started": time.time()}
    hosts = 7 if "fleet" in only else 1
    extra = lab_inventory(results_dir / "bench-inventory.yml", hosts)
    try:
        lab_up(hosts, extra, prepare=bool(only & {"redeploy", "fleet"}))
        if "verdicts" in only:
            results["verdicts"] = bench_verdicts(args.reps, args.ready_reps, args.naive_cap)
        if "redeploy" in only or "fleet" in only:
            results["redeploy"] = bench_redeploy(extra, results_dir)
        if "fleet" in only:
            results["fleet"] = bench_fleet(extra, results_dir, results["redeploy"]["first"])
        if "venv" in only:
            results["venv"] = bench_venv(args.venv_reps)
    finally:
        sh([*LAB, "down"], env=lab_env(), check=False)
        results["wall_s"] = round(time.time() - results.pop("started"), 1)
        (results_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
        log("results: %s (%.0fs)" % (results_dir / "results.json", results["wall_s"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
