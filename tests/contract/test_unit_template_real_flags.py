"""Contract: the sglang_service unit template renders only flags real sglang 0.5.23 accepts.

The template is rendered by tests/support/unit_template.py (Ansible's own templating,
every optional flag on); its ExecStart flags are checked against the flags parsed from the real sglang
source tree (tests/support/sglang_flags.py).
"""

import pytest
from support.sglang_flags import unknown_flags
from support.unit_template import exec_start, flags_of, render_unit


@pytest.mark.parametrize(
    ("launch_style", "entrypoint", "program"),
    [
        ("serve", "serve", ["/opt/sglang/current/venv/bin/sglang", "serve"]),
        ("launch_server", "launch_server", ["/opt/sglang/current/venv/bin/python", "-m", "sglang.launch_server"]),
    ],
)
def test_unit_template_renders_only_real_sglang_flags(sglang_source_tree, launch_style, entrypoint, program):
    argv = exec_start(render_unit(launch_style))
    assert argv[: len(program)] == program
    flags = flags_of(argv)
    # every optional flag is really on, so the check covers the whole template
    for expected in (
        "--served-model-name",
        "--attention-backend",
        "--sampling-backend",
        "--trust-remote-code",
        "--config",
        "--context-length",
        "--disable-cuda-graph",
        "--speculative-dflash-block-size",
        "--speculative-num-draft-tokens",
        "--enable-metrics",
    ):
        assert expected in flags
    assert unknown_flags(flags, sglang_source_tree, entrypoint) == []


def test_a_flag_sglang_lacks_is_reported(sglang_source_tree):
    argv = exec_start(render_unit("serve", sglang_service_extra_flags=["--no-such-sglang-flag"]))
    assert unknown_flags(flags_of(argv), sglang_source_tree, "serve") == ["--no-such-sglang-flag"]
