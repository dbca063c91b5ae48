"""replica_plan.plan_replicas: the replicas of a host (ports, GPUs, unit names, envelope input) or every error."""

import pathlib

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import validation_rules
from ansible_collections.specdec.sglang.plugins.module_utils._plan.replica_plan import (
    envelope_gpus,
    gateway_workers,
    host_report,
    host_verdict,
    merge_by_name,
    out_of_gateways,
    plan_replicas,
    rolling_order,
    service_replicas,
)

EIGHT = [str(i) for i in range(8)]


def test_no_replica_list_is_todays_single_unit_on_every_gpu():
    replicas, errors = plan_replicas(EIGHT, 8, 30000, [], unit_name="sglang-dflash-smoke")
    assert errors == []
    assert replicas == [
        {
            "name": "",
            "unit": "sglang-dflash-smoke",
            "port": 30000,
            "gpus": EIGHT,
            "envelope_input": {"gpus": EIGHT, "gpu_count": 8, "tp_size": 8},
        }
    ]


def test_single_replica_before_gpu_selection_has_no_gpus_yet():
    replicas, errors = plan_replicas([], 2, 31000, None)
    assert errors == []
    assert replicas[0]["unit"] == "sglang" and replicas[0]["port"] == 31000 and replicas[0]["gpus"] is None
    assert replicas[0]["envelope_input"] == {"gpus": None, "gpu_count": None, "tp_size": 2}


def test_derived_replicas_take_tp_sized_gpu_runs_and_consecutive_ports():
    replicas, errors = plan_replicas(EIGHT, 2, 30000, [{"name": "a"}, {"name": "b"}, {"name": "c"}])
    assert errors == []
    assert [(r["name"], r["unit"], r["port"], r["gpus"]) for r in replicas] == [
        ("a", "sglang-a", 30000, ["0", "1"]),
        ("b", "sglang-b", 30001, ["2", "3"]),
        ("c", "sglang-c", 30002, ["4", "5"]),
    ]
    assert [r["envelope_input"]["gpu_count"] for r in replicas] == [2, 2, 2]


def test_explicit_gpus_and_ports_are_kept():
    replicas, errors = plan_replicas(
        EIGHT, 1, 30000, [{"name": "r7", "gpus": [7], "port": 30107}, {"name": "r0", "gpus": ["0"], "port": "30100"}]
    )
    assert errors == []
    assert [(r["unit"], r["port"], r["gpus"]) for r in replicas] == [
        ("sglang-r7", 30107, ["7"]),
        ("sglang-r0", 30100, ["0"]),
    ]


def test_overlapping_gpus_and_ports_are_both_reported_at_once():
    _, errors = plan_replicas(
        EIGHT,
        1,
        30000,
        [{"name": "a", "gpus": ["0", "1"], "port": 30001}, {"name": "b", "gpus": ["1"], "port": 30001}],
    )
    assert any("GPU 1 is in both a and b" in e for e in errors), errors
    assert any("port 30001 is used by a, b" in e for e in errors), errors


def test_tp_size_not_dividing_a_replica_is_refused_naming_the_allowed_sizes():
    replicas, errors = plan_replicas(EIGHT, 2, 30000, [{"name": "a", "gpus": ["0", "1", "2"]}])
    assert replicas == []
    assert errors == [
        "sglang_service_tp_size=2 does not divide the 3 GPU(s) of replica a (0, 1, 2); allowed: a tp size of 1, 3,"
        " or 2 GPUs per replica"
    ]


@pytest.mark.parametrize("port", [80, 65536, "x", True])
def test_port_out_of_range_is_refused(port):
    _, errors = plan_replicas(EIGHT, 1, 30000, [{"name": "a", "port": port}])
    assert len(errors) == 1 and errors[0].startswith("sglang_service_replicas[0].port=") and "1024-65535" in errors[0]


def test_derived_port_past_the_range_is_refused():
    _, errors = plan_replicas(EIGHT, 1, 65535, [{"name": "a"}, {"name": "b"}])
    assert errors == [
        "sglang_service_replicas (b): derived port 65536 (sglang_service_port=65535 + position) is out of range;"
        " allowed: 1024-65535"
    ]


@pytest.mark.parametrize("name", ["", "A", "-a", "a_b", "a.service", "a" * 33, 3, None])
def test_names_that_are_not_unit_safe_are_refused(name):
    _, errors = plan_replicas(EIGHT, 1, 30000, [{"name": name}])
    assert len(errors) == 1 and "not unit-safe" in errors[0] and "[a-z0-9-]" in errors[0]


def test_duplicate_names_unknown_keys_and_non_mappings_are_all_reported():
    _, errors = plan_replicas(EIGHT, 1, 30000, [{"name": "a", "gpu": [0]}, "b"])
    assert errors[0] == "sglang_service_replicas[0]: unknown key(s) gpu; allowed: name, gpus, port"
    assert errors[1].startswith("sglang_service_replicas[1]='b': not a mapping")
    _, errors = plan_replicas(EIGHT, 1, 30000, [{"name": "a"}, {"name": "a"}])
    assert errors == ["sglang_service_replicas: name(s) a used more than once; allowed: each name once"]


def test_more_derived_replicas_than_gpus_is_refused():
    _, errors = plan_replicas(["0", "1", "2"], 2, 30000, [{"name": "a"}, {"name": "b"}])
    assert errors == [
        "sglang_service_replicas[1] (b): no GPUs left to derive from: 2 replicas at sglang_service_tp_size=2 need 4"
        " GPUs, 3 selected; allowed: at most 1 derived replica(s), or list each replica's gpus"
    ]


def test_gpus_outside_the_selection_are_refused_only_when_the_selection_is_known():
    _, errors = plan_replicas(["0", "1"], 1, 30000, [{"name": "a", "gpus": ["5"]}])
    assert errors == [
        "sglang_service_replicas (a): GPU(s) 5 are not among the selected GPUs (0, 1); allowed: GPUs of"
        " sglang_preflight_gpus"
    ]
    replicas, errors = plan_replicas([], 1, 30000, [{"name": "a", "gpus": ["5"]}, {"name": "b"}])
    assert errors == [] and replicas[1]["gpus"] is None


def test_bad_tp_size_is_one_error():
    assert plan_replicas(EIGHT, 0, 30000, [{"name": "a"}]) == (
        [],
        ["sglang_service_tp_size=0: allowed: an integer of at least 1"],
    )


def test_gateway_workers_list_every_replica_of_every_host_with_bracketed_ipv6():
    one, _ = plan_replicas([], 1, 30000, [])
    two, _ = plan_replicas(["0", "1"], 1, 31000, [{"name": "a"}, {"name": "b"}])
    workers = gateway_workers(
        {"lab2": {"address": "fd00::2", "replicas": two}, "lab1": {"address": "192.0.2.1", "replicas": one}}
    )
    assert [w["url"] for w in workers] == ["http://192.0.2.1:30000", "http://[fd00::2]:31000", "http://[fd00::2]:31001"]
    assert [(w["host"], w["unit"]) for w in workers] == [("lab1", "sglang"), ("lab2", "sglang-a"), ("lab2", "sglang-b")]


# --- the cross-role rule of validation_rules.check_inputs -------------------------------------------------

REPO = pathlib.Path(__file__).resolve().parents[5]
SPECS = {
    role: yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    for role in validation_rules.ROLES
}


def _replica_errors(values: dict) -> list[str]:
    errors = validation_rules.check_inputs(values, SPECS, roles=("sglang_service", "sglang_preflight"))
    return [e for e in errors if "replica" in e]


def test_validation_refuses_overlapping_replica_gpus_and_ports_before_any_host():
    values = {
        "sglang_preflight_gpus": ["0", "1", "2", "3"],
        "sglang_service_replicas": [
            {"name": "a", "gpus": ["0", "1"], "port": 30001},
            {"name": "b", "gpus": ["1"], "port": 30001},
        ],
    }
    assert _replica_errors(values) == [
        "sglang_service_replicas: port 30001 is used by a, b; allowed: one port per replica",
        "sglang_service_replicas: GPU 1 is in both a and b; allowed: each GPU in one replica",
    ]


def test_validation_passes_the_default_and_a_valid_replica_list():
    assert _replica_errors({}) == []
    values = {"sglang_preflight_gpus": ["0", "1"], "sglang_service_replicas": [{"name": "a"}, {"name": "b"}]}
    assert _replica_errors(values) == []


def test_min_serving_below_one_is_refused_before_any_host():
    errors = validation_rules.check_inputs({"sglang_deploy_min_serving": 0}, SPECS, play="deploy")
    assert any(e.startswith("sglang_deploy_min_serving") for e in errors), errors
    assert not [
        e
        for e in validation_rules.check_inputs({"sglang_deploy_min_serving": 2}, SPECS, play="deploy")
        if "min_serving" in e
    ]


# -- served replicas ---------------------------------------------------------------------------------------------
UUIDS = [f"GPU-{i}" for i in range(8)]
PATHS = {"unit_name": "sglang", "config_dir": "/etc/sglang", "runtime_root": "/opt/sglang"}


def test_no_replica_list_serves_todays_unit_files_and_state():
    (single,) = service_replicas(EIGHT, UUIDS, 8, 30000, [], **PATHS)
    assert single == {
        "name": "",
        "unit": "sglang",
        "port": 30000,
        "gpus": UUIDS,
        "unit_path": "/etc/systemd/system/sglang.service",
        "env_path": "/etc/sglang/sglang.env",
        "config_path": "/etc/sglang/sglang.yaml",
        "state_dir": "/opt/sglang/state/last_good",
        "readiness_job": "/opt/sglang/state/readiness.job",
        "deploy_marker": "/run/sglang-deploying",
    }


def test_each_replica_has_its_own_unit_files_state_port_and_gpu_uuids():
    a, b = service_replicas(
        EIGHT, UUIDS, 1, 30000, [{"name": "a", "gpus": ["3"]}, {"name": "b", "gpus": ["5"], "port": 31000}], **PATHS
    )
    assert (a["unit"], a["port"], a["gpus"], a["env_path"], a["state_dir"], a["readiness_job"]) == (
        "sglang-a",
        30000,
        ["GPU-3"],
        "/etc/sglang/sglang-a.env",
        "/opt/sglang/state/last_good-a",
        "/opt/sglang/state/readiness-a.job",
    )
    assert (b["unit_path"], b["config_path"], b["port"], b["gpus"], b["deploy_marker"]) == (
        "/etc/systemd/system/sglang-b.service",
        "/etc/sglang/sglang-b.yaml",
        31000,
        ["GPU-5"],
        "/run/sglang-b-deploying",
    )


def test_derived_replicas_take_runs_of_the_selected_uuids_under_automatic_selection():
    replicas = service_replicas([], UUIDS[:4], 2, 30000, [{"name": "a"}, {"name": "b"}], **PATHS)
    assert [r["gpus"] for r in replicas] == [["GPU-0", "GPU-1"], ["GPU-2", "GPU-3"]]


def test_lab_replicas_without_gpus_pin_none():
    replicas = service_replicas([], [], 1, 30000, [{"name": "a"}, {"name": "b"}], **PATHS)
    assert [(r["unit"], r["port"], r["gpus"]) for r in replicas] == [("sglang-a", 30000, []), ("sglang-b", 30001, [])]


def test_a_bad_replica_list_raises_every_error():
    with pytest.raises(ValueError, match="port 30001 is used by a, b"):
        service_replicas([], [], 1, 30000, [{"name": "a", "port": 30001}, {"name": "b", "port": 30001}], **PATHS)


def test_one_replica_not_ready_fails_the_host():
    assert host_verdict([{"name": "a", "outcome": "ready"}, {"name": "b", "outcome": "ready"}])["ready"]
    verdict = host_verdict([{"name": "a", "outcome": "ready"}, {"name": "b", "outcome": "failed"}])
    assert verdict == {"ready": False, "failed": True, "ready_replicas": ["a"], "failed_replicas": ["b"]}
    assert host_verdict([])["failed"]


def test_host_report_is_ok_only_when_every_replica_serves_and_names_the_failed_one():
    good = {
        "replica": "a",
        "ok": True,
        "unit": "sglang-a",
        "release_id": "r2",
        "time_to_ready_s": 4.0,
        "spec_accept_length": 3.5,
        "speculative_algorithm": "DFLASH",
        "changed": True,
        "attempts": [{"envelope": "e"}],
    }
    fast = dict(good, replica="b", unit="sglang-b", time_to_ready_s=2.0, spec_accept_length=2.5)
    out = host_report("h1", [good, fast], [["a ok"], ["b ok"]])
    assert (
        out["report"]["ok"] and out["report"]["time_to_ready_s"] == 4.0 and out["report"]["spec_accept_length"] == 2.5
    )
    assert out["report"]["attempts"] == [{"envelope": "e", "replica": "a"}, {"envelope": "e", "replica": "b"}]
    assert out["text"] == ["h1: 2 replica(s), all serve", "[a] a ok", "[b] b ok"]
    assert "attempts" not in out["stats"] and set(out["stats"]["replicas"]) == {"a", "b"}
    bad = {
        "replica": "b",
        "ok": False,
        "unit": "sglang-b",
        "release_id": "r2",
        "failure_class": "crashed_on_start",
        "reason": "died",
        "rollback": {"state": "release r1 serves again"},
        "attempts": [],
    }
    out = host_report("h1", [good, bad], [["a ok"], ["b failed"]])
    assert not out["report"]["ok"] and out["report"]["failed_replicas"] == ["b"]
    assert out["report"]["failure_class"] == "crashed_on_start" and out["report"]["rollback"]["state"].endswith("again")
    assert out["text"][0] == "h1: 2 replica(s), FAILED: b"


def test_rolling_order_keeps_min_serving_healthy_and_refuses_what_leaves_none_to_restart():
    workers = [
        {"host": "h1", "replica": "a", "unit": "sglang-a", "url": "http://192.0.2.1:30000"},
        {"host": "h1", "replica": "b", "unit": "sglang-b", "url": "http://192.0.2.1:30001"},
        {"host": "h2", "replica": "a", "unit": "sglang-a", "url": "http://192.0.2.2:30000"},
    ]
    order, errors = rolling_order(workers, 2)
    assert errors == [] and [(s["url"], s["needs_healthy"], s["position"]) for s in order] == [
        ("http://192.0.2.1:30000", 3, 0),
        ("http://192.0.2.1:30001", 3, 1),
        ("http://192.0.2.2:30000", 3, 2),
    ]
    assert rolling_order(workers, 3)[1] == [
        "sglang_deploy_min_serving=3 leaves no replica to restart: 3 replica(s) behind the gateway, one at a time out;"
        " allowed: 1 to 2"
    ]
    assert rolling_order(workers, 0)[1] == ["sglang_deploy_min_serving=0: allowed: an integer of at least 1"]
    assert rolling_order(workers[:1], 1)[1][0].endswith("allowed: 1 to 1, and at least 2 replicas")


def test_a_replica_rolled_back_with_the_host_keeps_its_ready_verdict_and_says_where_it_was_left():
    good = {"replica": "a", "ok": True, "unit": "sglang-a", "release_id": "r2", "attempts": []}
    bad = {"replica": "b", "ok": False, "unit": "sglang-b", "release_id": "r2", "failure_class": "crashed_on_start"}
    rollbacks = {
        "a": {"target": "r1", "unit": "sglang-a", "readiness": {"ready": True, "probe": {"completion_tokens": 4}}},
        "b": {"target": "", "unit": "sglang-b", "readiness": None},
    }
    out = host_report("h1", [good, bad], [["a ok"], ["b failed"]], rollbacks)
    assert not out["report"]["ok"] and out["report"]["replicas"]["a"]["ok"]
    assert out["report"]["replicas"]["a"]["rolled_back_with_host"].startswith("release r1 serves again")
    assert "[a] rolled back with the host: release r1 serves again" in out["text"][2]


def test_merge_by_name_puts_later_results_in_their_replicas_entry():
    results = [{"name": "a", "verdict": {"outcome": "ready"}}, {"name": "b", "verdict": {"outcome": "ready"}}]
    merged = merge_by_name(results, [{"name": "b", "verdict": {"outcome": "failed"}}, {"name": "b", "rollback": {}}])
    assert merged == [results[0], {"name": "b", "verdict": {"outcome": "failed"}, "rollback": {}}]


# -- the envelope planner's input per replica: its own GPUs --------------------------------------------------------
PORT = 30000
CARDS = [f"GPU-{i}" for i in range(4)]
FACTS = [
    {"uuid": u, "memory_total_mb": 97_000 - 1000 * i, "memory_free_mb": 96_000 - 1000 * i} for i, u in enumerate(CARDS)
]


def test_each_replica_is_sized_on_its_own_gpus_facts_not_on_the_hosts_selection():
    out = envelope_gpus(["0", "1", "2", "3"], CARDS, 2, [{"name": "a"}, {"name": "b"}], port=PORT, gpu_facts=FACTS)
    assert [(r["name"], r["unit"]) for r in out] == [("a", "sglang-a"), ("b", "sglang-b")]
    assert [[g["uuid"] for g in r["gpus"]] for r in out] == [["GPU-0", "GPU-1"], ["GPU-2", "GPU-3"]]
    assert out[1]["gpus"][1]["memory_free_mb"] == 93_000  # b's smallest card is its own, not a's


def test_explicit_replica_gpus_are_mapped_by_selection_position_to_their_facts():
    out = envelope_gpus(
        ["0", "1", "2", "3"],
        CARDS,
        1,
        [{"name": "x", "gpus": ["3"]}, {"name": "y", "gpus": ["0"]}],
        port=PORT,
        gpu_facts=FACTS,
    )
    assert [[g["uuid"] for g in r["gpus"]] for r in out] == [["GPU-3"], ["GPU-0"]]


def test_derived_replica_count_plans_one_item_per_replica():
    out = envelope_gpus([], CARDS, 1, [], count=4, port=PORT, gpu_facts=FACTS)
    assert [r["unit"] for r in out] == ["sglang-r0", "sglang-r1", "sglang-r2", "sglang-r3"]
    assert [r["gpus"][0]["uuid"] for r in out] == CARDS


def test_the_single_replica_is_planned_on_every_selected_gpu_as_without_replicas():
    (single,) = envelope_gpus([], CARDS[:2], 2, [], port=PORT, gpu_facts=FACTS)
    assert single["name"] == "" and single["unit"] == "sglang"
    assert [g["uuid"] for g in single["gpus"]] == ["GPU-0", "GPU-1"]


def test_without_gpu_facts_each_replica_gets_tp_size_gpus_of_the_assumed_memory():
    out = envelope_gpus([], [], 2, [{"name": "a"}, {"name": "b"}], port=PORT, assumed_memory_mb=48_000)
    assert [r["gpus"] for r in out] == [[{"memory_total_mb": 48_000, "memory_free_mb": 48_000}] * 2] * 2
    (single,) = envelope_gpus([], [], 1, [], port=PORT, assumed_memory_mb=24_000)
    assert single["gpus"] == [{"memory_total_mb": 24_000, "memory_free_mb": 24_000}]


def test_a_replica_gpu_without_facts_or_a_bad_replica_list_is_refused():
    with pytest.raises(ValueError, match="replica b: no GPU facts for GPU-3"):
        envelope_gpus(["0", "1", "2", "3"], CARDS, 2, [{"name": "a"}, {"name": "b"}], port=PORT, gpu_facts=FACTS[:3])
    with pytest.raises(ValueError, match="GPU 0 is in both a and b"):
        envelope_gpus(["0", "1"], CARDS[:2], 1, [{"name": "a", "gpus": ["0"]}, {"name": "b", "gpus": ["0"]}], port=PORT)


# -- a gateway-aware deploy's report: which replicas it left out of the gateways ------------------------------------
def test_the_replica_that_failed_stays_out_of_the_gateways_and_the_report_says_so():
    good = {"replica": "a", "ok": True, "unit": "sglang-a", "release_id": "r2", "attempts": []}
    bad = {"replica": "b", "ok": False, "unit": "sglang-b", "release_id": "r2", "failure_class": "crashed_on_start"}
    served = {"readiness": {"ready": True, "probe": {}}, "target": "r1", "unit": "sglang-a"}
    out = host_report("h2", [good, bad], [["a ok"], ["b failed"]], {"a": served, "b": served}, ["gw1"])
    assert out["report"]["out_of_gateways"] == ["b"]
    assert "[b] left out of the gateway(s) gw1: put it back once it serves" in " ".join(out["text"])
    assert not any(line.startswith("[a] left out") for line in out["text"])
    # without gateways nothing is said about them
    assert host_report("h2", [good, bad], [[], []], {"a": served})["report"]["out_of_gateways"] == []


def test_a_sibling_whose_rollback_did_not_serve_stays_out_too():
    good = {"replica": "a", "ok": True}
    bad = {"replica": "b", "ok": False}
    assert out_of_gateways([good, bad], {"a": {"readiness": {"ready": False}}}, ["gw1"]) == ["a", "b"]
    assert out_of_gateways([good, bad], {"a": {"readiness": None}}, ["gw1"]) == ["a", "b"]  # nothing restored
    assert out_of_gateways([good, bad], {"a": {"readiness": {"ready": True}}}, ["gw1"]) == ["b"]
    assert out_of_gateways([good], {}, ["gw1"]) == [] and out_of_gateways([bad], {}, []) == []
