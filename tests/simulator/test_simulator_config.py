"""`--config <file>.yaml`: server options from a file, like sglang (the API key stays out of argv)."""

import pathlib

import pytest
from simulator_harness import FAST


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_api_key_from_the_config_file_is_enforced_and_not_in_the_command_line(start_sim, tmp_path):
    config = write(tmp_path, "sglang.yaml", '# managed\napi-key: "k\\"ey from file"\nenable-metrics: true\n')
    sim = start_sim(["--config", config], env=FAST)
    sim.wait_ready()
    assert sim.generate()[0] == 401
    assert sim.generate(headers={"Authorization": 'Bearer k"ey from file'})[0] == 200
    cmdline = pathlib.Path(f"/proc/{sim.proc.pid}/cmdline").read_bytes().decode()
    assert "ey from file" not in cmdline
    assert "--config" in cmdline


def test_the_command_line_wins_over_the_config_file(start_sim, tmp_path):
    config = write(tmp_path, "sglang.yml", "served-model-name: from-file\n")
    sim = start_sim(["--config", config, "--served-model-name", "from-argv"], env=FAST)
    sim.wait_ready()
    status, models = sim.http("GET", "/v1/models")
    assert status == 200
    assert [m["id"] for m in models["data"]] == ["from-argv"]


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("sglang.json", "{}", "Config file must be YAML format, got: .json"),
        ("missing.yaml", None, "Config file not found"),
        ("nested.yaml", "api-key:\n  nested: 1\n", "expected `key: value` at the top level"),
    ],
)
def test_unusable_config_files_exit_1_with_a_message(start_sim, tmp_path, name, text, message):
    path = write(tmp_path, name, text) if text is not None else str(tmp_path / name)
    sim = start_sim(["--config", path], env=FAST)
    assert sim.wait_exit(10) == 1
    assert message in sim.logs


def test_a_second_config_file_is_refused(start_sim, tmp_path):
    config = write(tmp_path, "a.yaml", "")
    sim = start_sim(["--config", config, "--config", config], env=FAST)
    assert sim.wait_exit(10) == 1
    assert "Multiple config files specified! Only one allowed." in sim.logs
