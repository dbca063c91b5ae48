"""dies_after_first_answer: the first client generation is answered, then the engine dies."""

import time

from simulator_harness import FAST

SIGKILL = -9


def test_the_engine_answers_once_then_dies_fault_after_s_after_that_answer(start_sim):
    env = {**FAST, "SGLANG_SIM_FAULT": "dies_after_first_answer", "SGLANG_SIM_FAULT_AFTER_S": "1.0"}
    sim = start_sim(env={**env, "SGLANG_SIM_DEATH_GRACE_S": "0"}, spec=True)
    sim.wait_ready(10)
    time.sleep(1.5)  # no client generation yet: the engine stays up however long it waits
    assert sim.proc.poll() is None
    assert "Subprocess scheduler_0" not in sim.stderr
    status, body = sim.generate(timeout=2)
    answered_s = sim.elapsed()
    assert status == 200
    assert body["meta_info"]["completion_tokens"] == 16
    crash_s = sim.wait_log("Subprocess scheduler_0 (pid=", 5)
    assert sim.wait_exit(5) == SIGKILL
    assert 0.8 <= crash_s - answered_s < 2.0, f"died {crash_s - answered_s:.2f} s after the answer (FAULT_AFTER_S=1)"
    assert "crashed with exit code -9. Triggering SIGQUIT for cleanup..." in sim.stderr
