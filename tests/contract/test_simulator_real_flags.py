"""Contract: the simulator's flags are real sglang 0.5.23 flags, and the flag check catches ones that are not."""

import json

import pytest
from sglang_engine_simulator.cli import accepted_flags, build_parser
from support.sglang_flags import SglangFlagsError, sglang_cli_flags, unknown_flags

# The launch flags this collection renders (issue 3); the simulator must take every one.
DEPLOY_FLAGS = [
    "--model-path", "--served-model-name", "--host", "--port", "--tp-size", "--context-length",
    "--mem-fraction-static", "--max-running-requests", "--disable-cuda-graph", "--attention-backend",
    "--sampling-backend", "--speculative-algorithm", "--speculative-draft-model-path",
    "--speculative-num-draft-tokens",
    "--speculative-dflash-block-size", "--api-key", "--trust-remote-code",
]  # fmt: skip


@pytest.fixture
def model_dirs(tmp_path) -> dict:
    """Target and draft model directories with a config.json each, as the simulator reads them."""
    dirs = {"target": tmp_path / "Qwen3.6-27B", "draft": tmp_path / "Qwen3.6-27B-DFlash"}
    for name, path in dirs.items():
        path.mkdir()
        arch = "DFlashDraftModel" if name == "draft" else "Qwen3NextForCausalLM"
        (path / "config.json").write_text(json.dumps({"architectures": [arch], "model_type": "qwen3_next"}))
    return {name: str(path) for name, path in dirs.items()}


def test_every_flag_the_simulator_accepts_exists_in_sglang_0_5_23(sglang_source_tree):
    flags = accepted_flags()
    assert len(flags) > 40
    assert unknown_flags(flags, sglang_source_tree) == []


def test_flag_check_reports_a_bogus_flag_and_only_it(sglang_source_tree):
    assert unknown_flags(["--model-path", "--bogus-flag", "--port=30000"], sglang_source_tree) == ["--bogus-flag"]


def test_flag_check_reports_a_typo_of_a_real_flag(sglang_source_tree):
    assert unknown_flags(["--mem-fraction-statik", "--tp"], sglang_source_tree) == ["--mem-fraction-statik", "--tp"]


def test_flag_check_fails_when_a_bogus_flag_is_added_to_the_simulator(sglang_source_tree, monkeypatch):
    """What CI shows if someone adds a flag sglang does not have to the simulator's parser."""
    from sglang_engine_simulator import cli  # noqa: PLC0415

    real_build = cli.build_parser

    def build_with_bogus():
        parser = real_build()
        parser.add_argument("--speculative-dflash-blocksize", type=int)
        return parser

    monkeypatch.setattr(cli, "build_parser", build_with_bogus)
    assert unknown_flags(cli.accepted_flags(), sglang_source_tree) == ["--speculative-dflash-blocksize"]


def test_flag_check_knows_aliases_deprecated_and_hand_registered_flags(sglang_source_tree):
    real = sglang_cli_flags(sglang_source_tree)
    # aliases (Arg(aliases=...)), cli_name overrides, and parser.add_argument registrations
    for flag in ("--model", "--tensor-parallel-size", "--ep", "--fp8-gemm-backend", "--disable-cuda-graph", "--config"):
        assert flag in real
    # fields declared no_cli=True have no flag of their own
    assert "--speculative-boundary-reduction" not in real
    assert "--grpc-worker-threads" not in real


def test_model_type_is_a_flag_of_sglang_serve_only(sglang_source_tree):
    assert unknown_flags(["--model-type"], sglang_source_tree) == ["--model-type"]
    assert unknown_flags(["--model-type"], sglang_source_tree, entrypoint="serve") == []


def test_flag_reader_refuses_a_tree_it_does_not_understand(tmp_path):
    srt = tmp_path / "sglang" / "srt"
    srt.mkdir(parents=True)
    (srt / "server_args.py").write_text("import argparse\nparser = argparse.ArgumentParser()\n")
    with pytest.raises(SglangFlagsError, match="_INPUT_NAMESPACES"):
        unknown_flags(["--port"], tmp_path)


def test_simulator_accepts_every_flag_the_deploy_renders(sglang_source_tree, model_dirs):
    assert unknown_flags(DEPLOY_FLAGS, sglang_source_tree) == []
    argv = [
        "--model-path", model_dirs["target"], "--served-model-name", "qwen", "--host", "0.0.0.0", "--port", "30001",
        "--tp-size", "2", "--context-length", "32k", "--mem-fraction-static", "0.88", "--max-running-requests", "16",
        "--disable-cuda-graph", "--attention-backend", "flashinfer", "--sampling-backend", "pytorch",
        "--speculative-algorithm", "DDTREE",
        "--speculative-draft-model-path", model_dirs["draft"], "--speculative-num-draft-tokens", "16",
        "--speculative-dflash-block-size", "16", "--api-key", "secret", "--trust-remote-code",
    ]  # fmt: skip
    args = build_parser().parse_args(argv)
    assert (args.tp_size, args.context_length, args.mem_fraction_static) == (2, 32000, 0.88)
    assert args.disable_cuda_graph and args.trust_remote_code and args.speculative_algorithm == "DDTREE"
    assert (args.attention_backend, args.sampling_backend) == ("flashinfer", "pytorch")
