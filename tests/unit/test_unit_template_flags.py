"""The sglang_service unit template renders only flags real sglang 0.5.23 accepts.

The template is rendered with Ansible's own templating (the role's defaults and vars, every
optional flag switched on), the ExecStart flags are read back, and each is checked against the
flags parsed from the real sglang source tree (tests/support/sglang_flags.py).
"""

import pathlib
import shlex

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from support.sglang_flags import unknown_flags

ROLE = pathlib.Path(__file__).resolve().parents[2] / "roles" / "sglang_service"

ALL_OPTIONS_ON = {
    "sglang_service_served_model_name": "qwen3.6-27b",
    "sglang_service_attention_backend": "triton",
    "sglang_service_trust_remote_code": True,
    "sglang_service_api_key": "not-a-real-key",
    "sglang_service_tp_size": 2,
    "sglang_service_extra_flags": ["--enable-metrics", "--log-level=info"],
    "sglang_service_envelopes": {
        "everything": {
            "context_length": 32768,
            "mem_fraction_static": 0.9,
            "max_running_requests": 4,
            "cuda_graph": False,
        }
    },
    "sglang_service_envelope_ladder": ["everything"],
    "_sglang_service_envelope_name": "everything",
}


def trusted(value):
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [trusted(item) for item in value]
    return value


def render_unit(launch_style: str, **overrides) -> str:
    loader = DataLoader()
    variables = {"ansible_managed": "Ansible managed", "sglang_runtime_root": "/opt/sglang"}
    for name in ("defaults", "vars"):
        # role files are trusted templates to Ansible: their "{{ ... }}" defaults are rendered
        variables.update(trusted(loader.load_from_file(str(ROLE / name / "main.yml"))))
    variables.update(ALL_OPTIONS_ON, sglang_service_launch_style=launch_style, **overrides)
    templar = Templar(loader=loader, variables=variables)
    return templar.template(trust_as_template((ROLE / "templates" / "sglang.service.j2").read_text()))


def exec_start(unit: str) -> list[str]:
    """The ExecStart command line as systemd would split it (continuation lines joined)."""
    lines = unit.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("ExecStart="))
    command = []
    for line in lines[start:]:
        command.append(line.rstrip("\\").strip())
        if not line.endswith("\\"):
            break
    return shlex.split(" ".join(command).removeprefix("ExecStart="))


def flags_of(argv: list[str]) -> list[str]:
    return [arg for arg in argv if arg.startswith("--")]


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
        "--trust-remote-code",
        "--api-key",
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


def test_api_key_is_referenced_never_rendered():
    unit = render_unit("serve")
    assert "not-a-real-key" not in unit
    assert "--api-key ${SGLANG_API_KEY}" in unit


def test_unit_starts_with_the_managed_header_and_keeps_one_directive_per_line():
    lines = render_unit("serve").splitlines()
    assert lines[0] == "#" and lines[1] == "# Ansible managed"
    directives = [line for line in lines if "=" in line and not line.startswith(("#", " "))]
    assert all(line.count("=") >= 1 and not line.startswith("=") for line in directives)
    assert len([line for line in directives if line.startswith("ExecStart=")]) == 1
