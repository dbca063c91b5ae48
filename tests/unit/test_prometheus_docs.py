"""docs/prometheus: the scrape config and the alert rules are valid and use the metrics the collection writes.

The YAML schema check always runs. promtool (Prometheus's own checker) runs too when it is on PATH; when it is
not, the test says so with a warning (never a silent skip) and the schema check stands alone.
"""

import pathlib
import re
import shutil
import subprocess
import warnings

import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import watchdog
from prometheus_client.parser import text_string_to_metric_families

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs" / "prometheus"
RULES = DOCS / "sglang-alerts.yml"
SCRAPE = DOCS / "scrape.yml"
DURATION = re.compile(r"^[0-9]+(ms|s|m|h|d|w|y)$")
WATCH_METRICS = {name for name, _kind, _help in watchdog.METRICS}


def rules():
    return yaml.safe_load(RULES.read_text())


def test_alert_rules_have_the_prometheus_rule_file_shape():
    data = rules()
    assert set(data) == {"groups"}
    names = []
    for group in data["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["name"] and group["rules"]
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
            assert isinstance(rule["alert"], str) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", rule["alert"])
            assert isinstance(rule["expr"], str) and rule["expr"].strip()
            assert DURATION.match(rule.get("for", "0s")), rule["for"]
            assert rule["labels"]["severity"] in ("critical", "warning")
            assert {"summary", "description"} <= set(rule["annotations"])
            names.append(rule["alert"])
    assert {"SGLangWedged", "SGLangDead", "SGLangAcceptLengthCollapse"} <= set(names)


def test_every_watchdog_metric_an_alert_uses_is_one_the_watchdog_writes():
    used = set()
    for group in rules()["groups"]:
        for rule in group["rules"]:
            used |= set(re.findall(r"\bsglang_watch_[a-z_]+", rule["expr"]))
    assert used and used <= WATCH_METRICS, used - WATCH_METRICS
    verdict_classes = set(
        re.findall(r'class=~?"([^"]+)"', " ".join(r["expr"] for g in rules()["groups"] for r in g["rules"]))
    )
    for alternatives in verdict_classes:
        assert set(alternatives.split("|")) <= set(watchdog.VERDICTS), alternatives


def test_the_alerts_fire_on_the_textfile_of_a_wedge():
    text = watchdog.render_metrics(
        {"ok": False, "verdict": "wedged", "at": 1.0, "release_id": "r1"}, {"unit": "sglang.service"}
    )
    samples = {
        (s.name, s.labels.get("class")): s.value for f in text_string_to_metric_families(text) for s in f.samples
    }
    assert samples[("sglang_watch_verdict", "wedged")] == 1
    assert samples[("sglang_watch_verdict", "ok")] == 0


def test_scrape_config_names_both_jobs():
    data = yaml.safe_load(SCRAPE.read_text())
    jobs = {job["job_name"]: job for job in data["scrape_configs"]}
    assert jobs["sglang"]["metrics_path"] == "/metrics"
    assert jobs["sglang"]["static_configs"][0]["targets"] == ["127.0.0.1:30000"]
    assert "node" in jobs


def test_promtool_accepts_the_rules_when_it_is_installed():
    bundled = DOCS.parents[1] / ".cache" / "prometheus" / "usr" / "bin" / "promtool"  # scripts/bootstrap
    promtool = str(bundled) if bundled.is_file() else shutil.which("promtool")
    if promtool is None:
        warnings.warn(
            "promtool is not installed (scripts/bootstrap unpacks it into .cache/prometheus): only the YAML schema "
            "check of docs/prometheus ran",
            stacklevel=1,
        )
        return
    proc = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run([promtool, "check", "config", str(SCRAPE)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


pytestmark = pytest.mark.filterwarnings("default::UserWarning")
