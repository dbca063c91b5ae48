"""nvidia-smi parser: real H200 captures (tests/unit/fixtures/nvidia-smi/real-h200) and constructed failing outputs."""

import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._gpu import nvidia_smi
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import (
    NvidiaSmiParseError,
    assess_health,
    cuda_covers,
    gather,
    host_problems,
    normalize_bus_id,
    parse_compute_apps,
    parse_query_gpu,
    parse_xml,
)

REPO = pathlib.Path(__file__).resolve().parents[5]
REAL = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi" / "real-h200"
CONSTRUCTED = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"
H200_UUID = "GPU-5a6eafee-1932-5f13-42d0-82f42c64e659"
NOHEADER_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
)


def real(name: str) -> str:
    """A real capture; missing shared fixtures are a setup failure, never a skip."""
    path = REAL / name
    if not path.is_file():
        pytest.fail(f"real nvidia-smi fixture missing: {path} (copied from shared/fixtures/nvidia-smi/h200)")
    return path.read_text()


def constructed(scenario: str, name: str) -> str:
    path = CONSTRUCTED / scenario / name
    if not path.is_file():
        pytest.fail(f"constructed fixture missing: {path}")
    return path.read_text()


def scenario(name: str, **kwargs) -> dict:
    d = CONSTRUCTED / name
    read = lambda f: (d / f).read_text() if (d / f).is_file() else None  # noqa: E731
    return gather(
        read("query.csv"),
        read("nvidia-smi-q.xml"),
        read("compute_apps.csv"),
        stderr_text=read("nvidia-smi-q.stderr"),
        **kwargs,
    )


# --- real H200 captures -------------------------------------------------------------------


def test_real_query_with_header_and_units_parses_every_field():
    (gpu,) = parse_query_gpu(real("query.csv"))
    assert gpu["index"] == 0
    assert gpu["uuid"] == H200_UUID
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["driver_version"] == "580.159.04"
    assert (gpu["memory_total_mb"], gpu["memory_used_mb"], gpu["memory_free_mb"]) == (143771, 0, 143156)
    assert gpu["ecc_uncorrected"] == 0
    assert gpu["lost"] is False


def test_real_noheader_nounits_query_needs_and_uses_the_field_list():
    (gpu,) = parse_query_gpu(real("query_noheader.csv"), NOHEADER_FIELDS)
    assert gpu["uuid"] == H200_UUID
    assert gpu["memory_free_mb"] == 143156
    assert gpu["ecc_uncorrected"] is None  # not queried
    with pytest.raises(NvidiaSmiParseError, match="no header"):
        parse_query_gpu(real("query_noheader.csv"))


def test_real_xml_gives_driver_cuda_version_and_ecc_counters():
    xml = parse_xml(real("nvidia-smi-q.xml"))
    assert xml["driver_version"] == "580.159.04"
    assert xml["cuda_version"] == "13.0"
    assert xml["attached_gpus"] == 1
    (gpu,) = xml["gpus"]
    assert gpu["uuid"] == H200_UUID
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["ecc_mode"] == "Enabled"
    assert gpu["ecc_uncorrected"] == 0
    assert gpu["remapped_rows_pending"] is False
    assert gpu["recovery_action"] is None
    assert gpu["processes"] == []
    assert gpu["memory_total_mb"] == 143771


def test_real_compute_apps_header_only_means_no_processes():
    assert parse_compute_apps(real("compute_apps.csv")) == []


def test_real_busy_compute_apps_from_the_recorded_h200_run_parse_pid_and_memory():
    (app,) = parse_compute_apps(real("compute_apps_busy.csv"))
    assert app["pid"] == 1259
    assert app["process_name"] == "python3"
    assert app["used_memory_mb"] == 8710


def test_real_idle_h200_is_usable_and_driver_covers_cuda_13():
    facts = gather(real("query.csv"), real("nvidia-smi-q.xml"), real("compute_apps.csv"))
    assert facts["driver_version"] == "580.159.04"
    assert facts["driver_cuda_version"] == "13.0"
    (gpu,) = facts["gpus"]
    assert gpu["health"] == {"usable": True, "classes": [], "reasons": []}
    assert host_problems(facts, expected_count=1, expected_name="NVIDIA H200", min_cuda_version="13.0") == []


def test_real_noheader_query_merges_with_xml_by_uuid():
    facts = gather(real("query_noheader.csv"), real("nvidia-smi-q.xml"), query_fields=NOHEADER_FIELDS)
    (gpu,) = facts["gpus"]
    assert gpu["ecc_uncorrected"] == 0  # from the XML
    assert gpu["ecc_mode"] == "Enabled"


# --- constructed failing outputs ----------------------------------------------------------


def test_lost_gpu_line_takes_the_index_of_its_position_among_eight():
    facts = scenario("constructed-8gpu-one-lost")
    assert [g["index"] for g in facts["gpus"]] == list(range(8))
    lost = facts["gpus"][3]
    assert lost["lost"] is True
    assert lost["uuid"] is None
    assert lost["pci_bus_id"] == "00000000:41:00.0"
    assert lost["health"]["usable"] is False
    assert lost["health"]["classes"] == ["lost"]
    assert "GPU is lost" in lost["health"]["reasons"][0]
    assert [g["health"]["usable"] for g in facts["gpus"]].count(True) == 7


def test_lost_gpu_makes_an_eight_gpu_host_fail_its_expected_count():
    facts = scenario("constructed-8gpu-one-lost")
    problems = host_problems(facts, expected_count=8)
    assert [p["class"] for p in problems] == ["gpu_count"]
    assert "7 reachable" in problems[0]["message"]


def test_device_handle_unknown_error_marks_ct129_gpu1_lost():
    facts = scenario("constructed-device-handle-unknown-error")
    gpu1 = facts["gpus"][1]
    assert gpu1["index"] == 1
    assert gpu1["lost"] is True
    assert gpu1["pci_bus_id"] == "00000000:2A:00.0"
    assert "Unknown Error" in gpu1["lost_reason"]
    assert all(g["health"]["usable"] for g in facts["gpus"] if g["index"] != 1)


def test_device_handle_error_only_on_stderr_fills_the_index_gap():
    query = constructed("constructed-8gpu-one-lost", "query.csv")
    without_line = "\n".join(ln for ln in query.splitlines() if not ln.startswith("Unable"))
    facts = gather(without_line, stderr_text=constructed("constructed-8gpu-one-lost", "nvidia-smi-q.stderr"))
    lost = [g for g in facts["gpus"] if g["lost"]]
    assert [(g["index"], g["pci_bus_id"]) for g in lost] == [(3, "00000000:41:00.0")]


def test_uncorrected_ecc_errors_and_pending_row_remap_make_a_gpu_unusable():
    facts = scenario("constructed-ecc-errors")
    good, bad = facts["gpus"]
    assert good["health"]["usable"] is True
    assert bad["ecc_uncorrected"] == 2
    assert bad["remapped_rows_pending"] is True
    assert bad["recovery_action"] == "Reset"
    assert bad["health"]["classes"] == ["ecc_uncorrected", "reset_required"]
    assert "2 uncorrected ECC" in bad["health"]["reasons"][0]


def test_ecc_errors_in_the_xml_alone_are_seen():
    xml_only = gather(None, constructed("constructed-ecc-errors", "nvidia-smi-q.xml"))
    assert [g["ecc_uncorrected"] for g in xml_only["gpus"]] == [0, 2]
    assert [g["index"] for g in xml_only["gpus"]] == [0, 1]


def test_training_job_makes_gpus_busy_with_pid_and_memory():
    facts = scenario("constructed-busy-8gpu")
    busy = {g["index"]: g for g in facts["gpus"] if "busy" in g["health"]["classes"]}
    assert sorted(busy) == [0, 2, 3, 5]
    assert busy[0]["processes"] == [
        {"pid": 41000, "process_name": "/usr/bin/python3", "type": "C", "used_memory_mb": 81200}
    ]
    assert "pid 41000 /usr/bin/python3 81200 MiB" in busy[0]["health"]["reasons"][0]
    assert "not visible" in busy[5]["health"]["reasons"][0]
    assert [g["index"] for g in facts["gpus"] if g["health"]["usable"]] == [1, 4, 6, 7]


def test_allow_busy_keeps_busy_gpus_usable_but_still_reports_them():
    facts = scenario("constructed-busy-8gpu", allow_busy=True)
    gpu0 = facts["gpus"][0]
    assert gpu0["health"]["usable"] is True
    assert gpu0["health"]["classes"] == ["busy"]


def test_compute_apps_alone_attach_processes_by_uuid():
    apps = parse_compute_apps(constructed("constructed-busy-8gpu", "compute_apps.csv"))
    assert len(apps) == 3
    facts = gather(
        constructed("constructed-busy-8gpu", "query.csv"),
        None,
        constructed("constructed-busy-8gpu", "compute_apps.csv"),
    )
    assert [g["index"] for g in facts["gpus"] if g["processes"]] == [0, 2, 3]


def test_bracketed_requires_reset_values_mark_the_gpu_lost():
    facts = scenario("constructed-gpu-requires-reset")
    gpu1 = facts["gpus"][1]
    assert gpu1["lost"] is True
    assert gpu1["memory_free_mb"] is None
    assert "[GPU requires reset]" in gpu1["health"]["reasons"][0]
    assert facts["gpus"][0]["health"]["usable"] is True


def test_no_driver_is_a_host_problem_with_no_gpus():
    facts = scenario("constructed-no-driver")
    assert facts["gpus"] == []
    problems = host_problems(facts)
    assert [p["class"] for p in problems] == ["driver_unavailable"]
    assert "couldn't communicate" in problems[0]["message"]


def test_driver_reporting_cuda_12_8_does_not_cover_a_cu130_runtime():
    facts = scenario("constructed-driver-cuda-12-8")
    problems = host_problems(facts, min_cuda_version="13.0")
    assert [p["class"] for p in problems] == ["driver_cuda"]
    assert "12.8" in problems[0]["message"] and "13.0" in problems[0]["message"]
    assert host_problems(facts, min_cuda_version="12.8") == []


def test_expected_gpu_name_is_a_prefix_of_the_reported_name():
    facts = scenario("constructed-busy-8gpu")
    assert host_problems(facts, expected_count=8, expected_name="NVIDIA RTX PRO 6000 Blackwell") == []
    problems = host_problems(facts, expected_name="NVIDIA H200")
    assert [p["class"] for p in problems] == ["gpu_model"]


@pytest.mark.parametrize(
    ("driver", "runtime", "covered"),
    [
        ("13.0", "13.0", True),
        ("13.1", "13.0", True),
        ("12.8", "13.0", False),
        (None, "13.0", False),
        ("12.4", None, True),
    ],
)
def test_cuda_covers(driver, runtime, covered):
    assert cuda_covers(driver, runtime) is covered


def test_bus_ids_normalise_to_nvidia_smi_form():
    assert normalize_bus_id("0000:41:00.0") == "00000000:41:00.0"
    assert normalize_bus_id("00000000:2a:00.0") == "00000000:2A:00.0"


def test_row_with_wrong_field_count_is_a_parse_error_naming_the_row():
    with pytest.raises(NvidiaSmiParseError, match="expected 8"):
        parse_query_gpu("0, GPU-x, NVIDIA H200", NOHEADER_FIELDS)


def test_low_free_memory_is_reported_when_a_minimum_is_set():
    gpu = parse_query_gpu(real("query.csv"))[0]
    health = assess_health(gpu, min_free_mb=200000)
    assert health["usable"] is False
    assert health["classes"] == ["low_memory"]


def test_module_query_fields_match_the_constructed_header():
    header = constructed("constructed-ecc-errors", "query.csv").splitlines()[0]
    names = [nvidia_smi._field_name(h) for h in header.split(",")]
    assert tuple(names) == nvidia_smi.QUERY_GPU_FIELDS


def test_bare_unknown_error_fields_mark_the_gpu_lost_and_are_no_uuid():
    facts = scenario("constructed-bare-unknown-error")
    gpu1 = facts["gpus"][1]
    assert gpu1["lost"] is True
    assert gpu1["uuid"] is None and gpu1["name"] is None
    assert "uuid=Unknown Error" in gpu1["lost_reason"]
    assert gpu1["health"]["classes"] == ["lost"]
    assert [g["index"] for g in facts["gpus"] if g["health"]["usable"]] == [0, 2, 3, 4, 5, 6, 7]


def test_excluded_lost_gpu_is_acknowledged_in_the_count_with_a_warning():
    facts = scenario("constructed-device-handle-unknown-error")
    verdict = nvidia_smi.assess_host(facts, expected_count=8, excluded_gpus=[facts["gpus"][1]])
    assert verdict["problems"] == []
    assert [w["class"] for w in verdict["warnings"]] == ["excluded_gpu_lost"]
    assert "GPU 1 (00000000:2A:00.0)" in verdict["warnings"][0]["message"]


def test_a_gpu_missing_from_the_listing_is_never_acknowledged():
    facts = scenario("constructed-device-handle-unknown-error")
    facts["gpus"] = [g for g in facts["gpus"] if g["index"] != 1]
    facts["attached_gpus"] = 7
    verdict = nvidia_smi.assess_host(facts, expected_count=8, excluded_gpus=[])
    assert [p["class"] for p in verdict["problems"]] == ["gpu_count"]


def test_host_error_without_gpus_adds_no_count_or_no_gpu_problem():
    facts = {"gpus": [], "host_errors": [{"class": "nvidia_smi_hang", "message": "no answer"}]}
    assert [p["class"] for p in host_problems(facts, expected_count=8)] == ["nvidia_smi_hang"]


# --- compute capability -------------------------------------------------------------------


def test_blackwell_rows_report_compute_capability_12_0_and_the_real_h200_capture_none():
    facts = scenario("constructed-rtx-pro-6000-blackwell-8gpu")
    assert [g["compute_capability"] for g in facts["gpus"]] == ["12.0"] * 8
    assert all(g["health"]["usable"] for g in facts["gpus"])
    # The real capture was recorded without compute_cap: unknown, not guessed from "H200".
    real_gpus = gather(real("query.csv"), real("nvidia-smi-q.xml"))["gpus"]
    assert [g["compute_capability"] for g in real_gpus] == [None]


def test_failed_compute_cap_fields_read_none_and_the_lost_gpu_stays_lost():
    facts = scenario("constructed-bare-unknown-error")
    assert facts["gpus"][0]["compute_capability"] == "12.0"
    assert facts["gpus"][1]["compute_capability"] is None
    assert facts["gpus"][1]["lost"] is True


@pytest.mark.parametrize(
    ("value", "expected"),
    [("12.0", "12.0"), (" 9.0 ", "9.0"), ("10.3", "10.3"), ("[N/A]", None), ("Unknown Error", None), ("sm_120", None)],
)
def test_compute_capability_text(value, expected):
    assert nvidia_smi.compute_capability(value) == expected


def test_invalid_field_names_the_field_nvidia_smi_refuses():
    assert nvidia_smi.invalid_field('Field "compute_cap" is not a valid field to query.\n') == "compute_cap"
    assert nvidia_smi.invalid_field("index, uuid\n0, GPU-1\n") is None


def test_an_older_driver_refusing_compute_cap_is_asked_again_without_it():
    argvs = []

    def run(argv, timeout_s):
        argvs.append(argv)
        if "compute_cap" in argv[1]:
            return {
                "rc": 2,
                "stdout": 'Field "compute_cap" is not a valid field to query.\n\n',
                "stderr": "",
                "timed_out": False,
                "missing": False,
            }
        return {"rc": 0, "stdout": "index, name\n0, NVIDIA H200\n", "stderr": "", "timed_out": False, "missing": False}

    calls = nvidia_smi.collect("nvidia-smi", 60, run=run)
    assert calls["unsupported_fields"] == ["compute_cap"]
    assert calls["commands"]["query_gpu"] == 0
    assert "compute_cap" not in argvs[1][1] and argvs[1][1].startswith("--query-gpu=index,uuid,")
    assert calls["query"] == "index, name\n0, NVIDIA H200\n"
