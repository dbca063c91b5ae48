"""The mission hosts' envelopes are the envelope planner's answer (scripts/plan-envelopes --check)."""

import importlib.machinery
import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[5]


def load_script():
    path = REPO / "scripts" / "plan-envelopes"
    loader = importlib.machinery.SourceFileLoader("plan_envelopes", str(path))
    spec = importlib.util.spec_from_loader("plan_envelopes", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_defaults_host_vars_and_docs_equal_the_planners_answer():
    script = load_script()
    assert script.check() == []


def test_every_default_envelope_fits_its_host_and_tp2_serves_more_requests():
    script = load_script()
    tp1, tp2 = script.answer(1), script.answer(2)
    assert [e["name"] for e in tp1] == [e["name"] for e in tp2] == ["full", "small", "small-nograph"]
    for envelope in tp1 + tp2:
        plan = envelope["plan"]
        assert plan["fits"] and plan["error"] is None
        assert plan["max_running_requests"] == envelope["max_running_requests"]
        assert plan["kv_tokens"] >= envelope["context_length"]
    assert tp2[0]["max_running_requests"] > tp1[0]["max_running_requests"]


def test_check_names_a_drifted_number(tmp_path, monkeypatch):
    script = load_script()
    drifted = tmp_path / "main.yml"
    drifted.write_text(
        "sglang_service_envelopes:\n  full: {context_length: 131072, mem_fraction_static: 0.88,"
        " max_running_requests: 16, cuda_graph: true}\n"
    )
    monkeypatch.setitem(script.HOSTS, "ct200", (1, drifted))
    monkeypatch.setattr(script, "REPO", tmp_path.parent)
    problems = script.check()
    assert any("main.yml: sglang_service_envelopes" in p and "'max_running_requests': 16" in p for p in problems)
