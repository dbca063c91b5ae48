"""ansible-navigator.yml, the operators' way to run the playbooks in the execution environment.

Checked with ansible-navigator itself (requirements/venv-tools.txt): its effective settings, and a
misspelt key refused by its schema. tests/ee builds the image this file names and runs a deploy in it.
"""

import os
import pathlib
import subprocess

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]


def navigator_settings(tmp_path, settings_file):
    """`ansible-navigator settings --effective` for a settings file (the tools venv's navigator)."""
    tools = REPO / ".cache" / "venvs" / "tools" / "bin"
    assert (tools / "ansible-navigator").is_file(), "scripts/bootstrap makes it (requirements/venv-tools.txt)"
    return subprocess.run(
        [tools / "ansible-navigator", "settings", "--effective", "--mode", "stdout", "--ee", "false"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=dict(os.environ, ANSIBLE_NAVIGATOR_CONFIG=str(settings_file), PATH=f"{tools}:{os.environ['PATH']}"),
        check=False,
    )


def test_the_operators_navigator_settings_run_the_lab_image(tmp_path):
    done = navigator_settings(tmp_path, REPO / "ansible-navigator.yml")
    assert done.returncode == 0 and "Error" not in done.stdout + done.stderr, done.stdout + done.stderr
    effective = yaml.safe_load(done.stdout)["ansible-navigator"]["execution-environment"]
    assert effective["container-engine"] == "podman"
    assert effective["image"] == "localhost/specdec-sglang-ee:lab"  # what scripts/ee-lab builds


def test_a_misspelt_navigator_setting_is_refused(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("---\nansible-navigator:\n  execution-environment:\n    enabeld: true\n")
    done = navigator_settings(tmp_path, bad)
    assert "'enabeld' was unexpected" in " ".join((done.stdout + done.stderr).split())
