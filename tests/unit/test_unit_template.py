"""The sglang_service unit template as Ansible renders it (its flags against real sglang: tests/contract/)."""

import pytest
from support.unit_template import ALL_OPTIONS_ON, exec_start, flags_of, render_env, render_unit


def test_api_key_is_read_from_the_config_file_never_rendered_or_passed():
    unit = render_unit("serve")
    assert "not-a-real-key" not in unit
    assert any(line.startswith('    --config "/etc/sglang/sglang.yaml"') for line in unit.splitlines())
    assert "--api-key" not in unit


def test_without_a_key_no_config_file_is_passed():
    assert "--config" not in render_unit("serve", sglang_service_api_key="")


def test_unit_starts_with_the_managed_header_and_keeps_one_directive_per_line():
    lines = render_unit("serve").splitlines()
    assert lines[0] == "#" and lines[1] == "# Ansible managed"
    directives = [line for line in lines if "=" in line and not line.startswith(("#", " "))]
    assert all(line.count("=") >= 1 and not line.startswith("=") for line in directives)
    assert len([line for line in directives if line.startswith("ExecStart=")]) == 1


def test_stop_sends_sigterm_to_the_main_process_only_so_sglang_drains():
    lines = render_unit("serve", sglang_service_stop_timeout_s=90).splitlines()
    assert "KillMode=mixed" in lines
    assert "KillMode=control-group" not in lines
    assert "TimeoutStopSec=90" in lines


def test_sglang_metrics_are_on_by_default_and_can_be_turned_off():
    assert "--enable-metrics" in flags_of(exec_start(render_unit("serve")))
    assert "--enable-metrics" not in flags_of(exec_start(render_unit("serve", sglang_service_enable_metrics=False)))


def _value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_the_roles_default_backends_are_the_ones_the_gpu_records_ran():
    """triton attention and pytorch sampling (tests/device/records/*: every harness passed both)."""
    unset = {name: value for name, value in ALL_OPTIONS_ON.items() if not name.endswith("_backend")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("support.unit_template.ALL_OPTIONS_ON", unset)
        argv = exec_start(render_unit("serve"))
    assert (_value(argv, "--attention-backend"), _value(argv, "--sampling-backend")) == ("triton", "pytorch")
    assert argv.count("--attention-backend") == 1 and argv.count("--sampling-backend") == 1


@pytest.mark.parametrize("sampling", ["pytorch", "flashinfer"])
def test_the_sampling_backend_is_rendered_next_to_the_attention_backend(sampling):
    argv = exec_start(render_unit("serve", sglang_service_sampling_backend=sampling))
    flags = flags_of(argv)
    assert flags.index("--sampling-backend") == flags.index("--attention-backend") + 1
    assert _value(argv, "--sampling-backend") == sampling


def test_empty_backends_leave_sglang_its_own_choice():
    argv = exec_start(render_unit("serve", sglang_service_attention_backend="", sglang_service_sampling_backend=""))
    assert "--attention-backend" not in argv and "--sampling-backend" not in argv


def test_the_ddtree_knobs_reach_the_environment_file_only_when_set():
    env = render_env(sglang_service_speculative_algorithm="DDTREE")
    knobs = ("SGLANG_DDTREE_TREE_BUILDER", "SGLANG_DDTREE_BUDGET", "SGLANG_DDTREE_STEP_GRAPH")
    assert not [k for k in knobs if k in env]  # the set's defaults
    env = render_env(
        sglang_service_speculative_algorithm="DDTREE",
        sglang_service_ddtree_budget=16,
        sglang_service_ddtree_tree_builder="graph",
        sglang_service_ddtree_step_graph=0,  # YAML's 0: an int, rendered as the set reads it
    )
    lines = env.splitlines()
    assert 'SGLANG_DDTREE_BUDGET="16"' in lines and 'SGLANG_DDTREE_TREE_BUILDER="graph"' in lines
    assert 'SGLANG_DDTREE_STEP_GRAPH="0"' in lines
