"""ladder: a memory failure on `full` moves to `small`, which comes up ready; both attempts are reported."""

import json
import os
import pathlib

from lab_snapshot import controller_reports
from scenario_fixtures import last_good

UNIT_FILE = "/etc/systemd/system/sglang.service"


def test_first_run_walked_the_ladder_from_full_to_small(host):
    first = controller_reports()["first-" + host.backend.get_hostname()]
    full, small = first["attempts"]
    assert (full["envelope"], full["ready"], full["cause_class"]) == ("full", False, "oom_mem_fraction")
    assert (small["envelope"], small["ready"]) == ("small", True)
    assert first["ok"] is True
    assert first["envelope"] == "small"


def test_second_run_started_from_the_recorded_envelope_without_a_restart(report):
    assert report["ok"] is True
    assert report["changed"] is False
    assert [a["envelope"] for a in report["attempts"]] == ["small"]


def test_service_runs_the_small_envelope(lab_host, lab):
    lines = lab_host.file(UNIT_FILE).content_string.splitlines()
    assert "    --mem-fraction-static 0.95 \\" in lines
    assert "    --context-length 32768 \\" in lines
    assert not lab_host.file("/etc/sglang/sglang.env").contains("SGLANG_SIM_FAULT")
    assert lab_host.service("sglang").is_running
    assert last_good(lab_host)["envelope"] == "small"
    assert lab["generate_with_key"]["body"]["meta_info"]["completion_tokens"] == 8


def _controller_file(name):
    path = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / name
    assert path.is_file(), f"{path} missing: the converge step did not write it"
    return json.loads(path.read_text())


def test_preflight_plan_skipped_the_envelope_that_cannot_fit(host):
    plan = _controller_file(f"plan-{host.backend.get_hostname()}.json")
    assert plan["architecture"] == "hybrid_gdn"
    assert plan["skipped"] == ["huge"] and plan["fitting"] == ["full", "small"]
    huge = plan["plans"][0]
    assert huge["kv_tokens"] < 262144 and "fewer than one request of context_length 262144" in huge["reasons"][0]
    first = controller_reports()["first-" + host.backend.get_hostname()]
    assert [a["envelope"] for a in first["attempts"]] == ["full", "small"]  # huge never started


def test_deploy_with_no_fitting_envelope_refused_before_the_unit_started(lab_host):
    refused = _controller_file("refused-deploy.json")
    assert refused["rc"] != 0
    out = refused["stdout"] + refused["stderr"]
    assert "no envelope of sglang_service_envelope_ladder=['huge'] fits the selected GPUs" in out, out[-4000:]
    assert "fewer than one request of context_length 262144" in out
    assert "TASK [specdec.sglang.sglang_preflight : Plan each envelope from config.json" in out
    assert "Render the unit" not in out and "sglang_runtime : Create the venv" not in out  # stopped in preflight
    # the unit was not restarted: it still serves the envelope the first deploy proved
    assert "    --context-length 32768 \\" in lab_host.file(UNIT_FILE).content_string.splitlines()
    assert lab_host.service("sglang").is_running


def test_a_ladder_whose_first_envelope_serves_tries_no_other(host, lab_host):
    """Ladder [small, full] with small serving: one attempt, no restart, full (a memory fault here) never tried."""
    run = _controller_file("served-first-deploy.json")
    assert run["rc"] == 0, "\n".join(run["tail"])
    name = host.backend.get_hostname()
    path = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports" / "served-first" / f"{name}.json"
    report = json.loads(path.read_text())
    assert report["ok"] is True and report["changed"] is False
    assert [a["envelope"] for a in report["attempts"]] == ["small"]
    assert "    --context-length 32768 \\" in lab_host.file(UNIT_FILE).content_string.splitlines()
    assert lab_host.service("sglang").is_running
