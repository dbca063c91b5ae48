"""The fleet summary (the last play of playbooks/deploy.yml) on recorded deploy reports.

The play is taken from playbooks/deploy.yml as it is and run by ansible-playbook on the controller,
with the real community.general.json_query (jmespath) from .venv; each recorded report
(fixtures/fleet-reports/, see its README) is given to its host as the registered
``_sglang_service_report`` of roles/sglang_service/tasks/report.yml. What set_stats publishes
is read from the ansible.posix.json callback's custom stats.
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
REPORTS = pathlib.Path(__file__).parent / "fixtures" / "fleet-reports"


def _fleet_play():
    plays = yaml.safe_load((REPO / "playbooks/deploy.yml").read_text())
    (play,) = [p for p in plays if p.get("name") == "Fleet summary"]
    assert play is plays[-1], "the fleet summary is the last play of playbooks/deploy.yml"
    return play


def run_summary(tmp_path, reports, extra_hosts=()):
    """Run the fleet-summary play over hosts holding ``reports``; return (custom stats, rc, output)."""
    hosts = {name: {"_sglang_service_report": {"report": report}} for name, report in reports.items()}
    hosts.update({name: {} for name in extra_hosts})  # in the inventory, not deployed
    for vars_ in hosts.values():
        vars_["ansible_connection"] = "local"
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (tmp_path / "fleet.yml").write_text(yaml.safe_dump([_fleet_play()], sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_SHOW_CUSTOM_STATS="1",
        ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"),
        ANSIBLE_NOCOLOR="1",
    )
    done = subprocess.run(
        [BIN / "ansible-playbook", "-i", tmp_path / "inventory.yml", tmp_path / "fleet.yml"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    out = json.loads(done.stdout) if done.stdout.lstrip().startswith("{") else {}
    return out.get("global_custom_stats", {}), done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def recorded():
    return {p.stem: json.loads(p.read_text()) for p in sorted(REPORTS.glob("*.json"))}


@pytest.fixture(scope="module")
def fleet(recorded, tmp_path_factory):
    stats, rc, output = run_summary(tmp_path_factory.mktemp("fleet"), recorded, extra_hosts=["ct200"])
    assert rc == 0, output[-3000:]
    return stats["sglang_deploy_fleet"]


def test_the_recorded_reports_are_what_the_deploy_writes(recorded):
    assert sorted(recorded) == ["lab1", "lab2", "lab3", "lab4"]
    assert [r["host"] for r in recorded.values()] == sorted(recorded)
    assert [r["ok"] for r in recorded.values()] == [True, True, False, True]


def test_hosts_by_release(fleet):
    # ct200 is in the inventory but has no report: it is not in the summary
    assert fleet["hosts_by_release"] == {"124c2bb75785": ["lab1", "lab2"], "0f3a9b1c2d4e": ["lab4"]}
    assert (fleet["hosts_ok"], fleet["hosts_failed"]) == (3, 1)


def test_slowest_time_to_ready(fleet):
    assert fleet["slowest_time_to_ready"] == {"host": "lab2", "release_id": "124c2bb75785", "time_to_ready_s": 5.255}


def test_lowest_accept_length(fleet):
    assert fleet["lowest_accept_length"] == {
        "host": "lab4",
        "release_id": "0f3a9b1c2d4e",
        "speculative_algorithm": "DFLASH",
        "spec_accept_length": 2.6,
    }


def test_failed_hosts_with_the_rollback_state(fleet):
    assert fleet["failed"] == [
        {
            "host": "lab3",
            "release_id": "124c2bb75785",
            "failure_class": "restart_loop",
            "rollback": "no last good release: sglang.service left stopped and disabled",
        }
    ]


def test_a_failed_fleet_has_no_slowest_or_lowest(recorded, tmp_path):
    stats, rc, output = run_summary(tmp_path, {"lab3": recorded["lab3"]})
    assert rc == 0, output[-3000:]
    fleet = stats["sglang_deploy_fleet"]
    assert fleet["hosts_by_release"] == {}
    assert fleet["slowest_time_to_ready"] is None and fleet["lowest_accept_length"] is None
    assert [f["host"] for f in fleet["failed"]] == ["lab3"]


def test_a_report_without_accept_length_is_left_out_of_the_lowest(recorded, tmp_path):
    # a deploy without speculation (no accept length) must not count as the lowest accept length
    plain = dict(recorded["lab4"], spec_accept_length=None, speculative_algorithm=None)
    stats, rc, output = run_summary(tmp_path, {"lab1": recorded["lab1"], "lab4": plain})
    assert rc == 0, output[-3000:]
    assert stats["sglang_deploy_fleet"]["lowest_accept_length"]["host"] == "lab1"
