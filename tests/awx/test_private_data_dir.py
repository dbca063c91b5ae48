"""The private data dir awx/runner/awx_job.py writes, as ansible-runner reads it (no host needed)."""

import awx_job
import yaml
from ansible_runner.config.runner import RunnerConfig

DEPLOY = awx_job.job_template("sglang deploy")


def build(tmp_path, **kwargs):
    return awx_job.build_private_data_dir(
        tmp_path / "pdd",
        DEPLOY,
        envvars={"SPECDEC_LAB_PREFIX": "specdec-x-"},
        host_vars={"lab1": {"sglang_service_settle_s": 2}},
        **kwargs,
    )


def test_layout_and_what_ansible_runner_makes_of_it(tmp_path):
    pdd = build(
        tmp_path,
        answers={"sglang_deploy_serial": 2, "sglang_preflight_gpus": ["1", "3"]},
        launch={"limit": "lab1", "job_type": "check"},
    )
    assert pdd.errors == []
    root = pdd.path
    assert (root / "project" / "deploy.yml").is_file()
    assert (root / "project" / "collections" / "ansible_collections" / "specdec" / "sglang").is_symlink()
    inventory = yaml.safe_load((root / "inventory" / "hosts").read_text())
    lab = inventory["all"]["children"]["lab"]
    assert lab["hosts"]["lab1"] == {"sglang_service_settle_s": 2}  # a host variable set in AWX
    assert lab["vars"]["ansible_connection"] == "ssh"  # imported from the SCM source
    extravars = (root / "env" / "extravars").read_text()
    assert "sglang_deploy_serial: 2\n" in extravars  # an integer answer stays an integer
    assert "- !unsafe '1'" in extravars  # answers are never templated
    assert "specdec_awx_envelope_ladder: !unsafe 'full'" in extravars  # the default AWX sends
    assert "sglang_service_envelope_ladder: '{{ specdec_awx_envelope_ladder | split('','') }}'" in extravars
    assert yaml.safe_load((root / "env" / "envvars").read_text())["SPECDEC_LAB_PREFIX"] == "specdec-x-"
    assert yaml.safe_load((root / "env" / "settings").read_text())["suppress_ansible_output"] is True

    inventory_path = str(root / "inventory" / "hosts")
    config = RunnerConfig(private_data_dir=str(root), playbook=pdd.playbook, inventory=inventory_path)
    config.prepare()
    command = config.command
    assert command[0] == "ansible-playbook"
    assert command[command.index("--limit") + 1] == "lab1"
    assert command[command.index("--forks") + 1] == str(DEPLOY["forks"])
    assert "--check" in command
    assert f"@{root / 'env' / 'extravars'}" in command
    assert config.env["SPECDEC_LAB_PREFIX"] == "specdec-x-"
    assert config.cwd == str(root / "project")


def test_job_type_and_limit_follow_the_templates_prompts(tmp_path):
    rollback = awx_job.job_template("sglang rollback")
    assert awx_job.cmdline_args(rollback, {"limit": "ct200", "job_type": "check"}) == [
        "--limit",
        "ct200",
        "--forks",
        str(rollback["forks"]),
    ]  # the rollback template does not prompt for the job type: a check request is not honoured
    assert "--check" in awx_job.cmdline_args(DEPLOY, {"job_type": "check"})


def test_a_refused_launch_writes_nothing(tmp_path):
    pdd = build(tmp_path, answers={"sglang_deploy_serial": "banana"}, launch={"limit": "lab1"})
    assert pdd.errors == ["value 'banana' for 'sglang_deploy_serial' expected to be an integer"]
    assert not pdd.path.exists()
