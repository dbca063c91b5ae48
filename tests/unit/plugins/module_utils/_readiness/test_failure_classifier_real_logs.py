"""Every real sglang 0.5.17 log of the recorded H200 run is a test case (issue 9).

The logs are in tests/unit/fixtures/sglang-0.5.17-h200/, byte for byte as the servers wrote them.
Each death goes through the readiness state machine (fake clock, a watcher that reads the real log)
and must get the verdict the run got; the served logs must clean up and never classify from noise.
"""

import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness
from support.log_replay import Clock, DeadAfterOnePoll, Refused

FIXTURES = pathlib.Path(__file__).resolve().parents[4] / "unit" / "fixtures" / "sglang-0.5.17-h200"


def real_log(name):
    return (FIXTURES / name).read_text(encoding="utf-8", errors="replace")


def verdict(name):
    clock = Clock()
    readiness = Readiness(DeadAfterOnePoll(real_log(name)), Refused(), Params(), clock=clock, sleep=clock.sleep)
    return readiness.run()


@pytest.mark.parametrize(
    ("name", "failure_class", "phase", "exception"),
    [
        (
            "target-scheduler-sigkill-after-ready.log",
            "scheduler_died",
            "serving",
            "Subprocess scheduler_0 (pid=6635) crashed with exit code -9",
        ),
        (
            "kv-cache-too-small.log",
            "oom_mem_fraction",
            "loading",
            "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.0001",
        ),
        (
            "missing-draft.log",
            "missing_model",
            "loading",
            "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name'",
        ),
    ],
)
def test_each_real_death_gets_the_verdict_of_the_recorded_run(name, failure_class, phase, exception):
    result = verdict(name)
    assert result["ready"] is False
    assert result["failure_class"] == failure_class
    assert result["failed_in_phase"] == phase
    assert exception in result["exception_line"]
    assert "\x1b" not in result["journal"]


def test_the_old_whole_log_reading_would_have_said_import_error():
    """What the issue saw: classifying the whole log picked the harmless openai_harmony line."""
    text = real_log("target-scheduler-sigkill-after-ready.log")
    assert "No module named 'openai_harmony'" in text
    assert fc.classify(text).failure_class == "scheduler_died"  # benign lines never match now
    assert fc.BENIGN.search(text)


@pytest.mark.parametrize("name", ["dflash-served-then-wedged.log", "ddtree-served.log"])
def test_served_logs_clean_up_and_their_noise_never_classifies(name):
    text = real_log(name)
    assert "\x1b[" in text and journal.saw_ready_line(text)
    cleaned = journal.clean(text)
    assert "\x1b" not in cleaned
    assert cleaned.count("GET /health") < text.count("GET /health")
    start_up = text[: text.index(journal.READY_LINE)]
    assert fc.classify(start_up) is None, "a line logged and survived during start-up classified"


def test_the_real_poll_lines_collapse_to_a_summary():
    text = real_log("dflash-served-then-wedged.log")
    polls = text.count('"GET /health HTTP/1.1" 503')
    assert polls > 50
    cleaned = journal.clean(text)
    assert "more health-poll access lines" in cleaned
    assert len(cleaned) < len(text)


def test_every_fixture_has_a_test():
    names = {p.name for p in FIXTURES.glob("*.log")}
    assert names == {
        "target-scheduler-sigkill-after-ready.log",
        "kv-cache-too-small.log",
        "missing-draft.log",
        "dflash-served-then-wedged.log",
        "ddtree-served.log",
    }
