"""What RTX PRO 6000 Blackwell (12.0) hosts meet, played by the simulator and read by the collection's
classifier as it reads a real journal (issue 34): a library with no code for the GPU, a run-time kernel
compile without nvcc, and an illegal address in a CUDA-graph replay long after the ready line."""

import signal

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier as fc
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal
from simulator_harness import FAST

SIGKILL = -signal.SIGKILL


@pytest.mark.parametrize(
    ("fault", "wording", "failure_class"),
    [
        (
            "no_kernel_image",
            "torch.AcceleratorError: CUDA error: no kernel image is available for execution on the device",
            "no_kernel_image",
        ),
        (
            "jit_compiler_missing",
            "RuntimeError: Could not find nvcc and default cuda_home='/usr/local/cuda' doesn't exist",
            "jit_compiler_missing",
        ),
    ],
)
def test_start_time_blackwell_faults_die_before_ready_and_get_their_class(start_sim, fault, wording, failure_class):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": fault}, spec=True)
    assert sim.wait_exit(10) == SIGKILL
    log = journal.clean(sim.logs)
    assert wording in log
    assert "ready to roll" not in log
    traceback, region = journal.fatal_evidence(log)
    found = fc.classify_failure(traceback, region)
    assert found.failure_class == failure_class
    assert found.line == wording


def test_the_nvcc_warning_sglang_logs_and_survives_is_not_a_cause():
    assert (
        fc.classify(
            "Cannot run `/usr/local/cuda/bin/nvcc --version`: [Errno 2] No such file or directory: "
            "'/usr/local/cuda/bin/nvcc'"
        )
        is None
    )


def test_illegal_address_in_a_graph_replay_after_the_ready_line_is_its_own_class(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "illegal_address_replay", "SGLANG_SIM_FAULT_AFTER_S": "0.5"})
    ready_s = sim.wait_ready(10)
    assert sim.generate(timeout=2)[0] == 200  # it served before the fault
    assert sim.wait_exit(10) == SIGKILL
    assert sim.elapsed() - ready_s >= 0.4
    log = journal.clean(sim.logs)
    assert log.index("ready to roll") < log.index("in replay")
    traceback, region = journal.fatal_evidence(log)
    found = fc.classify_failure(traceback, region)
    assert found.failure_class == "illegal_address_graph_replay"
    assert found.line == "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"


def test_an_illegal_address_outside_a_replay_stays_a_cuda_error(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "cuda_error"}, spec=True)
    assert sim.wait_exit(10) == SIGKILL
    traceback, region = journal.fatal_evidence(journal.clean(sim.logs))
    assert fc.classify_failure(traceback, region).failure_class == "cuda_error"


def test_the_replay_fault_can_be_injected_into_a_serving_engine(start_sim):
    sim = start_sim(env=FAST)
    sim.wait_ready(10)
    assert sim.generate(timeout=2)[0] == 200
    sim.proc.send_signal(signal.SIGWINCH)
    assert sim.wait_exit(10) == SIGKILL
    traceback, region = journal.fatal_evidence(journal.clean(sim.logs))
    assert fc.classify_failure(traceback, region).failure_class == "illegal_address_graph_replay"
