"""The simulator logs what real sglang 0.5.17 logged on the H200 and survived, and both KV-cache
wordings, so that the lab and molecule scenarios meet them; the collection's classifier reads the
simulator's logs the way it reads the real ones (tests/unit/fixtures/sglang-0.5.17-h200/)."""

import signal

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal
from simulator_harness import FAST

SIGKILL = -signal.SIGKILL
HARMONY = (
    "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed "
    "(ModuleNotFoundError: No module named 'openai_harmony')"
)


def test_every_start_logs_the_harmless_module_not_found_error_and_serves(start_sim):
    sim = start_sim(env=FAST, spec=True)
    sim.wait_ready(10)
    err = sim.stderr
    assert HARMONY in err
    assert err.index(HARMONY) < err.index("ready to roll")
    assert "Ignore import error when loading sglang.srt.models.inkling: No module named 'helion'" in err
    assert sim.generate()[0] == 200
    # the noise never classifies: a served start has nothing to blame
    assert fc.classify(err) is None


def test_disable_cuda_graph_prints_the_coloured_deprecation_like_sglang(start_sim):
    sim = start_sim(["--disable-cuda-graph"], env=FAST)
    sim.wait_ready(10)
    assert "\x1b[1;33m'--disable-cuda-graph' is deprecated" in sim.stderr
    assert "\x1b" not in journal.clean(sim.logs)


def test_scheduler_death_after_ready_is_scheduler_died_despite_the_start_up_noise(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "scheduler_death", "SGLANG_SIM_DEATH_GRACE_S": "0.3"}, spec=True)
    sim.wait_ready(10)
    assert sim.wait_exit(10) == SIGKILL
    log = journal.clean(sim.logs)
    traceback, region = journal.fatal_evidence(log)
    assert traceback is None
    assert fc.classify_failure(traceback, region).failure_class == "scheduler_died"
    assert HARMONY in log  # it was there, and it did not decide


def test_both_kv_cache_wordings_are_oom_mem_fraction(start_sim):
    for fault, wording in (
        ("not_enough_memory", "Not enough memory. Please try to increase --mem-fraction-static."),
        ("kv_cache_too_small", "Loaded weights leave no GPU memory for the KV cache"),
    ):
        sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": fault}, spec=True)
        assert sim.wait_exit(10) == SIGKILL
        log = journal.clean(sim.logs)
        assert wording in log
        traceback, region = journal.fatal_evidence(log)
        assert fc.classify_failure(traceback, region).failure_class == "oom_mem_fraction", fault
