# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Would Mitogen for Ansible make the deploys cheaper, and does it run them as shipped? (issue 33)

    .venv/bin/python benchmarks/mitogen_trial.py --wheel mitogen-X.whl [--reps 3] [--out DIR]

Mitogen is not a dependency of the collection: the wheel named here is installed into DIR/mitogen
(``uv pip install --target``) and only the runs marked ``mitogen`` see it, through PYTHONPATH,
ANSIBLE_STRATEGY_PLUGINS and ANSIBLE_STRATEGY=mitogen_linear. On one lab host (specdec-bench-lab1,
removed at the end) after a first deploy:

- no-change deploys of deploy.yml, ansible's own linear strategy and Mitogen's in turn, each
  timed by its wall and by the machine's CPU from /proc/stat (the lab host is a container on this
  machine, so its module runs count too). These runs pass ``-e _sglang_service_readiness_async_s=0``,
  which makes the readiness task synchronous: under Mitogen the shipped async task does not end
  (next point);
- one more no-change deploy with ``-vvv``: the module runs it starts on the host, by task;
- 40 ``ansible.builtin.ping`` tasks (a module run on the host each) and 40 ``ansible.builtin.debug``
  tasks (none) with each strategy: Ansible's own cost of a task, nothing of this collection in it;
- ``async`` (``-B 20 -P 1``) of a module of this collection and of ``ansible.builtin.command``
  with each strategy: whether the job ends.

Prints a table and writes DIR/mitogen.json. Loopback and lab containers only.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

import bench  # benchmarks/bench.py: the lab helpers of the other benchmarks (this folder is on sys.path)

REPO = bench.REPO
FLOOR_TASKS = 40


def busy_cpu_s():
    """The machine's CPU seconds so far, every process (user, nice, system, irq, softirq)."""
    with open("/proc/stat", encoding="utf-8") as handle:
        fields = handle.readline().split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def strategy_env(strategy, mitogen_dir):
    env = bench.lab_env()
    if strategy == "mitogen":
        plugins = mitogen_dir / "ansible_mitogen" / "plugins" / "strategy"
        env.update(
            PYTHONPATH=str(mitogen_dir),
            ANSIBLE_STRATEGY_PLUGINS=str(plugins),
            ANSIBLE_STRATEGY="mitogen_linear",
            # Mitogen's ssh asks for its own host key check and does not read the lab's
            # StrictHostKeyChecking=no / UserKnownHostsFile=/dev/null (inventory/group_vars/lab)
            ANSIBLE_HOST_KEY_CHECKING="False",
        )
    return env


def timed(argv, env, log_path):
    cpu0, wall0 = busy_cpu_s(), time.monotonic()
    proc = bench.sh(argv, check=False, env=env, cwd=str(REPO))
    wall, cpu = time.monotonic() - wall0, busy_cpu_s() - cpu0
    log_path.write_text(proc.stdout + proc.stderr)
    return proc, round(wall, 2), round(cpu, 2)


def deploy_argv(extra, readiness_sync):
    argv = [*bench.ansible("ansible-playbook", extra), str(REPO / "deploy.yml"), "-l", "lab1"]
    return argv + (["-e", "_sglang_service_readiness_async_s=0"] if readiness_sync else [])


def no_change_deploy(strategy, rep, extra, mitogen_dir, out):
    before = bench.unit_identity("lab1")
    proc, wall, cpu = timed(
        deploy_argv(extra, True), strategy_env(strategy, mitogen_dir), out / ("deploy-%s-%d.log" % (strategy, rep))
    )
    recap = [m.groups() for m in bench.RECAP.finditer(proc.stdout)]
    if any(int(g[3]) for g in recap):
        raise RuntimeError("lab1 unreachable with the %s strategy (%s)" % (strategy, out))
    row = {
        "strategy": strategy,
        "rep": rep,
        "rc": proc.returncode,
        "wall_s": wall,
        "cpu_s": cpu,
        "changed": sum(int(g[2]) for g in recap),
        "ok": sum(int(g[1]) for g in recap),
        "restarted": before != bench.unit_identity("lab1"),
    }
    bench.log("%s deploy %d: %s" % (strategy, rep, row))
    return row


def module_runs(extra, out):
    """A no-change deploy with -vvv: how many times it starts a module on the host (``SSH: EXEC``), by task."""
    proc, _, _ = timed([*deploy_argv(extra, False), "-vvv"], bench.lab_env(), out / "deploy-linear-vvv.log")
    return count_module_runs(proc.stdout) | {"rc": proc.returncode}


def count_module_runs(log_text):
    by_task, task = {}, None
    for line in log_text.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK [") :].split("] ", 1)[0]
        elif "SSH: EXEC ssh" in line and task is not None:
            by_task[task] = by_task.get(task, 0) + 1
    return {"total": sum(by_task.values()), "by_task": by_task}


def task_floor(strategy, action, extra, mitogen_dir, out):
    """FLOOR_TASKS tasks of one builtin action on lab1, nothing of this collection: Ansible's own cost per task."""
    body = "      ansible.builtin.debug: {msg: x}\n" if action == "debug" else "      ansible.builtin.ping:\n"
    playbook = out / ("floor-%s.yml" % action)
    playbook.write_text(
        "- hosts: lab1\n  gather_facts: false\n  tasks:\n"
        + "".join("    - name: %s %d\n%s" % (action, i, body) for i in range(FLOOR_TASKS))
    )
    proc, wall, cpu = timed(
        [*bench.ansible("ansible-playbook", extra), str(playbook)],
        strategy_env(strategy, mitogen_dir),
        out / ("floor-%s-%s.log" % (strategy, action)),
    )
    row = {
        "strategy": strategy,
        "action": action,
        "tasks": FLOOR_TASKS,
        "rc": proc.returncode,
        "wall_s": wall,
        "cpu_s": cpu,
    }
    bench.log("floor: %s" % row)
    return row


def async_job(strategy, module, extra, mitogen_dir, out):
    argv = [*bench.ansible("ansible", extra), "lab1", "-m", module[0], *module[1:], "-B", "20", "-P", "1"]
    tag = "async-%s-%s.log" % (strategy, module[0].rsplit(".", 1)[-1])
    proc, wall, _ = timed(argv, strategy_env(strategy, mitogen_dir), out / tag)
    if "UNREACHABLE!" in proc.stdout:
        raise RuntimeError("%s: lab1 unreachable with the %s strategy (%s)" % (module[0], strategy, out / tag))
    ended = "Job reached maximum time limit" not in proc.stdout
    row = {"strategy": strategy, "module": " ".join(module), "job_ended": ended, "wall_s": wall}
    bench.log("async: %s" % row)
    return row


def print_tables(results):
    print("| strategy | no-change deploys | wall, median | machine CPU-s, median | changed | restarted |")
    print("| --- | --- | --- | --- | --- | --- |")
    for strategy in ("linear", "mitogen"):
        rows = [r for r in results["deploys"] if r["strategy"] == strategy and r["rc"] == 0]
        if rows:
            print(
                "| %s | %d | %.1f s | %.1f | %d | %s |"
                % (
                    strategy,
                    len(rows),
                    statistics.median(r["wall_s"] for r in rows),
                    statistics.median(r["cpu_s"] for r in rows),
                    sum(r["changed"] for r in rows),
                    "yes" if any(r["restarted"] for r in rows) else "no",
                )
            )
    print()
    runs = results.get("module_runs")
    if runs:
        top = sorted(runs["by_task"].items(), key=lambda item: -item[1])[:3]
        print("A no-change deploy (linear, -vvv) starts %d module runs on the host; most: %s" % (runs["total"], top))
        print()
    print("| strategy | %d tasks of | wall | machine CPU-s | CPU-s a task |" % FLOOR_TASKS)
    print("| --- | --- | --- | --- | --- |")
    for row in results["floor"]:
        print(
            "| %s | `ansible.builtin.%s` (rc %d) | %.1f s | %.1f | %.3f |"
            % (row["strategy"], row["action"], row["rc"], row["wall_s"], row["cpu_s"], row["cpu_s"] / row["tasks"])
        )
    print()
    print("| strategy | async job (-B 20 -P 1) | ended |")
    print("| --- | --- | --- |")
    for row in results["async"]:
        print(
            "| %s | `%s` | %s |"
            % (row["strategy"], row["module"], "yes" if row["job_ended"] else "**no** (20 s limit)")
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wheel", type=pathlib.Path, required=True, help="a mitogen wheel (from PyPI)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=pathlib.Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    mitogen_dir = out / "mitogen"
    bench.sh(
        [
            str(REPO / ".venv" / "bin" / "uv"),
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--target",
            str(mitogen_dir),
            str(args.wheel),
        ]
    )
    extra = bench.lab_inventory(out / "mitogen-inventory.yml", 1)
    commit = bench.sh(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=str(REPO)).stdout.strip()
    results = {
        "machine": bench.machine(),
        "commit": commit,
        "wheel": args.wheel.name,
        "deploys": [],
        "floor": [],
        "async": [],
    }
    try:
        bench.lab_up(1, extra)
        first, wall, cpu = timed(deploy_argv(extra, False), bench.lab_env(), out / "deploy-first.log")
        results["first"] = {"rc": first.returncode, "wall_s": wall, "cpu_s": cpu}
        bench.log("first deploy: %s" % results["first"])
        for rep in range(1, args.reps + 1):
            for strategy in ("linear", "mitogen"):
                results["deploys"].append(no_change_deploy(strategy, rep, extra, mitogen_dir, out))
        results["module_runs"] = module_runs(extra, out)
        bench.log("module runs of a no-change deploy: %d" % results["module_runs"]["total"])
        for action in ("ping", "debug"):
            for strategy in ("linear", "mitogen"):
                results["floor"].append(task_floor(strategy, action, extra, mitogen_dir, out))
        for module in (["specdec.sglang.sglang_release_reap"], ["ansible.builtin.command", "-a", "true"]):
            for strategy in ("linear", "mitogen"):
                results["async"].append(async_job(strategy, module, extra, mitogen_dir, out))
    finally:
        bench.sh([*bench.LAB, "down"], env=bench.lab_env(), check=False)
        (out / "mitogen.json").write_text(json.dumps(results, indent=1) + "\n")
    print_tables(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
