"""Start-up refusals: argparse errors (2), main-process errors (1), bad simulator settings (2)."""

import pytest
from simulator_harness import FAST, free_port


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        (["--mem-fraction-statik", "0.9"], "unrecognized arguments: --mem-fraction-statik"),
        (["--mem-frac", "0.9"], "unrecognized arguments: --mem-frac"),  # no prefix abbreviations
        (["--tp-size", "two"], "argument --tp-size/--tensor-parallel-size: invalid int value: 'two'"),
        (["--mem-fraction-static", "lots"], "argument --mem-fraction-static: invalid float value: 'lots'"),
        (["--attention-backend", "magic"], "argument --attention-backend: invalid choice: 'magic'"),
        # sglang 0.5.17 refuses what its SAMPLING_BACKEND_CHOICES lacks (the role renders pytorch by default)
        (["--sampling-backend", "triton"], "argument --sampling-backend: invalid choice: 'triton'"),
        (["--context-length", "1.5Ki"], "argument --context-length: Decimals are not allowed"),
    ],
)
def test_unknown_flags_and_bad_values_exit_2_with_argparse_message(start_sim, extra, message):
    sim = start_sim(extra)
    assert sim.wait_exit(10) == 2
    assert message in sim.stderr
    assert "usage: sglang-engine-simulator" in sim.stderr


def test_missing_model_path_is_required_and_exits_2(start_sim, tmp_path):
    from simulator_harness import Sim  # noqa: PLC0415

    sim = Sim(tmp_path, ["--port", str(free_port())], {}, 0)
    assert sim.wait_exit(10) == 2
    assert "the following arguments are required: --model-path/--model" in sim.stderr


@pytest.mark.parametrize("which", ["target", "draft"])
def test_model_directory_that_does_not_exist_fails_with_hf_oserror_traceback_and_exit_1(start_sim, model_dirs, which):
    missing = "/nonexistent/models/Qwen3.6-27B"
    extra = ["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", missing]
    sim = start_sim(extra if which == "draft" else [], model_path=missing if which == "target" else None)
    assert sim.wait_exit(10) == 1
    err = sim.stderr
    assert "Traceback (most recent call last):" in err
    assert "huggingface_hub.errors.HFValidationError: Repo id must be in the form" in err
    assert f"OSError: Incorrect path_or_model_id: '{missing}'" in err
    assert "ready to roll" not in err
    assert not sim.port_open()


def test_dflash_without_draft_path_fails_with_value_error_and_exit_1(start_sim):
    sim = start_sim(["--speculative-algorithm", "DFLASH"])
    assert sim.wait_exit(10) == 1
    assert "ValueError: DFLASH speculative decoding requires setting --speculative-draft-model-path." in sim.stderr


def test_dflash_block_size_must_match_num_draft_tokens(start_sim):
    sim = start_sim(["--speculative-dflash-block-size", "8"], spec=True)
    assert sim.wait_exit(10) == 1
    assert "ValueError: Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set" in sim.stderr


def test_unknown_speculative_algorithm_fails_at_resolution_with_exit_1(start_sim):
    sim = start_sim(["--speculative-algorithm", "MAGIC"])
    assert sim.wait_exit(10) == 1
    assert "ValueError: Unknown speculative algorithm name: MAGIC" in sim.stderr


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SGLANG_SIM_FAULT": "explode"}, "SGLANG_SIM_FAULT='explode' is not a fault mode; use one of: none,"),
        ({"SGLANG_SIM_LOAD_S": "soon"}, "SGLANG_SIM_LOAD_S='soon' is not a non-negative number of seconds"),
        ({"SGLANG_SIM_WARMUP_S": "-1"}, "SGLANG_SIM_WARMUP_S='-1' is not a non-negative number of seconds"),
        ({"SGLANG_SIM_TOKENS_PER_S": "0"}, "SGLANG_SIM_TOKENS_PER_S='0' is not a positive number"),
    ],
)
def test_invalid_simulator_environment_exits_2_naming_the_variable(start_sim, env, message):
    sim = start_sim(env=env)
    assert sim.wait_exit(10) == 2
    assert message in sim.stderr


def test_abi_mismatch_is_an_import_error_with_undefined_symbol_and_exit_1(start_sim):
    sim = start_sim(env={**FAST, "SGLANG_SIM_FAULT": "abi_mismatch"})
    assert sim.wait_exit(10) == 1
    assert 0.4 <= sim.elapsed() < 5
    err = sim.stderr
    assert "Traceback (most recent call last):" in err
    assert "sgl_kernel/sm100/common_ops.abi3.so: undefined symbol: _ZN3c10" in err
    assert err.rstrip().splitlines()[-1].startswith("ImportError: ")
    assert not sim.port_open()


def test_port_in_use_fails_for_real_with_errno_98(start_sim):
    import socket  # noqa: PLC0415

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        sim = start_sim(env=FAST, port=holder.getsockname()[1])
        assert sim.wait_exit(10) == 1
    err = sim.stderr
    assert "OSError: [Errno 98] Address already in use" in err
    assert "[Errno 98] error while attempting to bind on address ('127.0.0.1'" in err
    assert "ready to roll" not in err
