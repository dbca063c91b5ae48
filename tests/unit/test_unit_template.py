"""The sglang_service unit template as Ansible renders it (its flags against real sglang: tests/contract/)."""

from support.unit_template import render_unit


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
