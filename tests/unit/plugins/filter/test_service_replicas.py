"""Filters service_replicas, replica_host_report and rolling_order (plugins/filter/service_replicas.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specdec.sglang.plugins.filter.service_replicas import FilterModule
from support.unit_template import ROLE

FILTERS = FilterModule().filters()
PATHS = {
    "tp_size": "1",
    "port": "30000",
    "unit_name": "sglang",
    "config_dir": "/etc/sglang",
    "runtime_root": "/opt/sglang",
}


def test_the_roles_single_replica_is_the_filters_plan_of_an_empty_list():
    """vars/main.yml takes the single replica from service_replicas (no second spelling of its paths), with the same
    arguments as the replicas' own call."""
    text = (ROLE / "vars" / "main.yml").read_text()
    single = text[text.index("_sglang_service_single_replica:") :].split("\n_", 1)[0]
    several = text[text.index("_sglang_service_replicas:") :].split("\n#", 1)[0]
    assert "([] | specdec.sglang.service_replicas(" in single and single.rstrip().endswith(")[0] }}")
    for argument in ("tp_size=sglang_service_tp_size", "port=sglang_service_port", "unit_name=sglang_service_unit_name",
                     "config_dir=sglang_service_config_dir", "runtime_root=sglang_service_runtime_root"):  # fmt: skip
        assert argument in single and argument in several
    (planned,) = FILTERS["service_replicas"]([], [], ["GPU-a", "GPU-b"], **dict(PATHS, tp_size=2))
    assert planned["state_dir"].endswith("/state/last_good") and planned["gpus"] == ["GPU-a", "GPU-b"]


def test_the_filter_takes_template_strings_and_names_every_replica_error():
    a, b = FILTERS["service_replicas"]([{"name": "a"}, {"name": "b"}], [], [], **PATHS)
    assert (a["unit"], a["port"], b["unit"], b["port"]) == ("sglang-a", 30000, "sglang-b", 30001)
    with pytest.raises(AnsibleFilterError, match="used more than once"):
        FILTERS["service_replicas"]([{"name": "a"}, {"name": "a"}], [], [], **PATHS)


def test_replica_host_report_names_each_report_by_its_loop_item():
    results = [
        {"_sglang_service_replica_item": {"name": "a"}, "report": {"ok": True, "unit": "sglang-a"}, "text": ["x"]},
        {"_sglang_service_replica_item": {"name": "b"}, "report": {"ok": False, "unit": "sglang-b"}, "text": ["y"]},
    ]
    out = FILTERS["replica_host_report"](results, "lab1")
    assert out["report"]["failed_replicas"] == ["b"] and out["text"] == [
        "lab1: 2 replica(s), FAILED: b",
        "[a] x",
        "[b] y",
    ]


def test_rolling_order_reads_a_survey_answer_and_fails_the_play_on_a_bad_one():
    workers = [{"url": "u1"}, {"url": "u2"}]
    assert [s["needs_healthy"] for s in FILTERS["rolling_order"](workers, "1")] == [2, 2]
    with pytest.raises(AnsibleFilterError, match="leaves no replica to restart"):
        FILTERS["rolling_order"](workers, 2)


def test_replica_host_report_reads_where_each_rollback_left_its_replica():
    results = [{"_sglang_service_replica_item": {"name": "a"}, "report": {"ok": True, "unit": "sglang-a"}, "text": []}]
    rollbacks = [
        {
            "name": "a",
            "unit": "sglang-a",
            "rollback": {"restored": True, "target": "r1"},
            "rollback_readiness": {"ready": True, "probe": {"completion_tokens": 4, "latency_s": 0.1}},
        }
    ]
    out = FILTERS["replica_host_report"](results, "lab1", rollbacks)
    assert not out["report"]["ok"]
    assert out["report"]["replicas"]["a"]["rolled_back_with_host"].startswith("release r1 serves again")
    out = FILTERS["replica_host_report"](
        results, "lab1", [dict(rollbacks[0], rollback={"restored": False, "target": ""})]
    )
    assert (
        out["report"]["replicas"]["a"]["rolled_back_with_host"]
        == "no last good release: sglang-a left stopped and disabled"
    )
