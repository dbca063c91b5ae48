"""ladder: a memory failure on `full` moves to `small`, which comes up ready; both attempts are reported."""

from lab_snapshot import controller_reports


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


def test_service_runs_the_small_envelope(lab):
    lines = lab["unit_file"]["content"].splitlines()
    assert "    --mem-fraction-static 0.95 \\" in lines
    assert "    --context-length 32768 \\" in lines
    assert "SGLANG_SIM_FAULT" not in lab["env_file"]["content"]
    assert lab["show"]["ActiveState"] == "active"
    assert lab["last_good"]["envelope"] == "small"
    assert lab["generate_with_key"]["body"]["meta_info"]["completion_tokens"] == 8
