"""benchmarks/mitogen_trial.py: only the runs marked mitogen see Mitogen, and its tables say what was measured."""

import importlib.util
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))  # the script imports its sibling bench.py
spec = importlib.util.spec_from_file_location("mitogen_trial", REPO / "benchmarks" / "mitogen_trial.py")
mitogen_trial = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mitogen_trial)
sys.path.remove(str(REPO / "benchmarks"))


def test_the_linear_runs_get_no_mitogen_and_the_mitogen_runs_its_strategy_from_the_given_folder(tmp_path):
    linear = mitogen_trial.strategy_env("linear", tmp_path)
    assert "ANSIBLE_STRATEGY" not in linear and "ANSIBLE_STRATEGY_PLUGINS" not in linear
    assert str(tmp_path) not in linear.get("PYTHONPATH", "")
    mitogen = mitogen_trial.strategy_env("mitogen", tmp_path)
    assert mitogen["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert mitogen["ANSIBLE_STRATEGY_PLUGINS"] == str(tmp_path / "ansible_mitogen" / "plugins" / "strategy")
    assert mitogen["PYTHONPATH"] == str(tmp_path)


def test_busy_cpu_counts_up():
    first = mitogen_trial.busy_cpu_s()
    sum(i * i for i in range(200_000))
    assert mitogen_trial.busy_cpu_s() >= first > 0


def test_tables_take_medians_of_the_runs_that_passed_and_name_a_job_that_never_ended(capsys):
    def deploy(strategy, rc, cpu, changed=0):
        return {"strategy": strategy, "rc": rc, "wall_s": cpu + 1, "cpu_s": cpu, "changed": changed, "restarted": False}

    mitogen_trial.print_tables(
        {
            "deploys": [
                deploy("linear", 0, 20.0, changed=1),
                deploy("linear", 0, 22.0),
                deploy("linear", 0, 30.0),
                deploy("mitogen", 0, 14.0),
                deploy("mitogen", 2, 2.0),  # a failed deploy: not in the medians
            ],
            "floor": [{"strategy": "linear", "action": "ping", "tasks": 40, "rc": 0, "wall_s": 9.5, "cpu_s": 10.0}],
            "async": [
                {"strategy": "mitogen", "module": "specdec.sglang.sglang_release_reap", "job_ended": False},
                {"strategy": "linear", "module": "specdec.sglang.sglang_release_reap", "job_ended": True},
            ],
        }
    )
    out = capsys.readouterr().out
    assert "| linear | 3 | 23.0 s | 22.0 | 1 | no |" in out
    assert "| mitogen | 1 | 15.0 s | 14.0 | 0 | no |" in out
    assert "| linear | `ansible.builtin.ping` (rc 0) | 9.5 s | 10.0 | 0.250 |" in out
    assert "| mitogen | `specdec.sglang.sglang_release_reap` | **no** (20 s limit) |" in out
    assert "| linear | `specdec.sglang.sglang_release_reap` | yes |" in out


def test_module_runs_are_counted_by_the_task_that_started_them():
    log = "\n".join(
        [
            "<lab1> SSH: EXEC ssh before any task",
            "TASK [specdec.sglang.sglang_preflight : Read the host once] ***",
            "<lab1> SSH: EXEC ssh -C -o ControlMaster=auto lab1 /bin/sh -c '/usr/bin/python3 && sleep 0'",
            "TASK [Wait for a real generation] ***",
            "<lab1> SSH: EXEC ssh -C lab1 (the async start)",
            "<lab1> ESTABLISH SSH CONNECTION FOR USER: root",
            "<lab1> SSH: EXEC ssh -C lab1 (a poll)",
        ]
    )
    assert mitogen_trial.count_module_runs(log) == {
        "total": 3,
        "by_task": {"specdec.sglang.sglang_preflight : Read the host once": 1, "Wait for a real generation": 2},
    }
