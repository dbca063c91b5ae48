"""The deploy report's speculation verdict (roles/sglang_service/tasks/speculation.yml, from report.yml).

The role's own task file runs in ansible-playbook on the controller, with the shipped cost table
(files/speculation-cost.json, found by the role's file lookup) and the collection's filter: for the
recorded H200, a DDTREE N=16 accept length above the record's break-even pays and one below it does not;
an RTX PRO 6000 (no record), the default N=64 (refused on the H200, so not recorded) and N=32 (not measured
with the set's graphed tree builder) are unknown. report.yml puts the verdict in the summary, the report
file and set_stats.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
TABLE = json.loads((REPO / "roles/sglang_service/files/speculation-cost.json").read_text())


def _break_even(algorithm, budget, batch=1):
    (entry,) = TABLE["gpu_classes"]
    (row,) = [
        m
        for m in entry["modes"]
        if m["algorithm"] == algorithm and (m["budget"] or 0) == budget and m["batch"] == batch
    ]
    return row["break_even"]


def test_the_roles_speculation_task_gives_the_verdict_per_gpu_and_budget(tmp_path):
    tau_star = _break_even("DDTREE", 16)
    hosts = {
        "h200_pays": ("NVIDIA H200", "DDTREE", 16, tau_star + 0.3),
        "h200_does_not_pay": ("NVIDIA H200", "DDTREE", 16, tau_star - 0.3),
        # the trained tiny pair's DDTREE N=16 accept length (2026-12-05-h200-ddtree-e2e), at a budget with no record
        # (N=64 did not start at the 27B geometry: 2026-12-06-h200-ddtree-level2-cost)
        "h200_n64": ("NVIDIA H200", "DDTREE", 64, 3.99),
        "h200_default_budget": ("NVIDIA H200", "DDTREE", 0, 9.0),
        "rtx_pro_6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "DFLASH", 0, 3.0),
    }
    inventory = {
        name: {
            "ansible_connection": "local",
            "sglang_preflight_gpus_facts": [{"uuid": "GPU-%s" % name, "name": gpu}],
            "sglang_preflight_gpu_uuids": ["GPU-%s" % name],
            "sglang_service_speculative_algorithm": algorithm,
            "sglang_service_ddtree_budget": budget,
            "_sglang_service_report": {"report": {"ok": True, "spec_accept_length": tau}},
        }
        for name, (gpu, algorithm, budget, tau) in hosts.items()
    }
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": inventory}}))
    play = [
        {
            "name": "speculation verdict",
            "hosts": "all",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "The role's task file",
                    "ansible.builtin.include_role": {
                        "name": "specdec.sglang.sglang_service",
                        "tasks_from": "speculation",
                    },
                },
                {
                    "name": "Keep the verdict",
                    "delegate_to": "localhost",
                    "ansible.builtin.copy": {
                        "content": "{{ _sglang_service_speculation | to_json }}",
                        "dest": str(tmp_path) + "/{{ inventory_hostname }}.json",
                        "mode": "0600",
                    },
                },
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1")
    done = subprocess.run(
        [BIN / "ansible-playbook", "-i", tmp_path / "inventory.yml", tmp_path / "play.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    got = {name: json.loads((tmp_path / ("%s.json" % name)).read_text()) for name in hosts}
    assert got["h200_pays"]["verdict"] == "pays"
    assert got["h200_pays"]["break_even"] == tau_star
    assert got["h200_pays"]["record"] == TABLE["gpu_classes"][0]["record"]
    assert (REPO / got["h200_pays"]["record"] / "RECORD.yml").is_file()
    assert got["h200_pays"]["summary"].startswith("speculation: pays (DDTREE B=16 N=16 on nvidia h200")
    assert got["h200_does_not_pay"]["verdict"] == "does not pay"
    assert got["h200_does_not_pay"]["accept_length"] == pytest.approx(tau_star - 0.3)
    assert got["h200_n64"]["verdict"] == "unknown" and got["h200_n64"]["budget"] == 64
    assert "no step cost recorded for DDTREE B=16 N=64" in got["h200_n64"]["reason"]
    # the default budget (0) is the set's 2 x B = 32, judged by its own recorded row
    assert got["h200_default_budget"]["verdict"] == "pays" and got["h200_default_budget"]["budget"] == 32
    assert got["h200_default_budget"]["break_even"] == _break_even("DDTREE", 32)
    assert got["rtx_pro_6000"]["verdict"] == "unknown"
    assert "no step-cost record for GPU class" in got["rtx_pro_6000"]["reason"]


def test_report_yml_carries_the_verdict_to_summary_file_and_stats():
    tasks = yaml.safe_load((REPO / "roles/sglang_service/tasks/report.yml").read_text())
    by_name = {t["name"]: t for t in tasks}
    include = by_name["Say whether speculation pays on this GPU"]
    assert include["ansible.builtin.include_tasks"] == "speculation.yml"
    assert "_sglang_service_speculation.summary" in by_name["Summarise the deploy"]["ansible.builtin.debug"]["msg"]
    stats = by_name["Publish the deploy statistics"]["ansible.builtin.set_stats"]["data"]
    assert "_sglang_service_speculation" in stats["sglang_deploy_speculation"]
    (write,) = [t for t in by_name["Write the deploy report to the controller"]["block"] if "ansible.builtin.copy" in t]
    assert "'speculation': _sglang_service_speculation" in write["ansible.builtin.copy"]["content"]
