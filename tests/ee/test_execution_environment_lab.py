"""The execution environment for real: built with podman, and a deploy run inside it.

scripts/ee-lab builds awx/execution-environment.yml with ansible-builder on the lab's base image
(no registry here; awx/lab/Containerfile). A lab host gets an SSH server (a GPU host has one; the
lab image does not), and the "sglang deploy" job template runs the way AWX runs it: awx_job's private
data dir, ansible-runner with process isolation (podman) in that image, reaching the host over SSH
with a key from the private data dir. The job must succeed with the image's own ansible-core, publish
its artifacts, and leave the service serving.
"""

import json
import os
import pathlib
import shlex
import subprocess
import sys

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "awx" / "runner"))
import awx_job  # noqa: E402

PREFIX = "specdec-ee-"
HOST = "lab1"
CONTAINER = PREFIX + HOST
EE = yaml.safe_load((REPO / "awx" / "execution-environment.yml").read_text())


def env():
    return dict(os.environ, CONTAINERS_CONF=str(REPO / "lab" / "containers.conf"), SPECDEC_LAB_PREFIX=PREFIX)


def sh(argv, timeout=600, check=True, **kwargs):
    proc = subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env=env(), cwd=REPO, check=False, **kwargs
    )
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{shlex.join(map(str, argv))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def on_host(script, check=True):
    return sh(["podman", "exec", CONTAINER, "sh", "-c", script], timeout=300, check=check)


@pytest.fixture(scope="module")
def image():
    return sh([str(REPO / "scripts" / "ee-lab")], timeout=1200).stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A lab host, reached over the network on port 22 with the key of the job's Machine credential."""
    tmp = tmp_path_factory.mktemp("ee")
    lab_bin = str(REPO / "lab" / "bin" / "lab")
    sh([lab_bin, "down"], timeout=120, check=False)
    sh([lab_bin, "up", "1"], timeout=900)
    try:
        # the lab image has OpenSSH's server, as a GPU host does (lab/image/recipe); it listens on port 22
        on_host("systemctl is-active ssh || systemctl start ssh")
        sh(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / "key")])
        sh(
            [
                "podman",
                "exec",
                "-i",
                CONTAINER,
                "sh",
                "-c",
                "install -d -m 700 /root/.ssh && cat > /root/.ssh/authorized_keys",
            ],
            input=(tmp / "key.pub").read_text(),
        )
        address = sh(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", CONTAINER]).stdout.strip()
        assert address, "the lab host has no address on podman's network"
        sh(
            [str(pathlib.Path(sys.executable).parent / "ansible-playbook"), "lab/playbooks/lab.yml", "-l", HOST],
            timeout=900,
        )
        yield {"address": address, "key": tmp / "key", "tmp": tmp}
    finally:
        sh([lab_bin, "down"], timeout=120, check=False)


def in_image(image, *argv):
    return sh(["podman", "run", "--rm", "--user", "root", image, *argv], timeout=300).stdout


def test_the_image_holds_the_pinned_tooling(image):
    deps = EE["dependencies"]
    core = deps["ansible_core"]["package_pip"].split("==")[1]
    assert f"core {core}]" in in_image(image, "ansible", "--version").splitlines()[0]
    runner = deps["ansible_runner"]["package_pip"].split("==")[1]
    assert in_image(image, "ansible-runner", "--version").strip() == runner
    pins = dict(req.split("==") for req in deps["python"])
    assert in_image(image, "python3", "-c", "import jmespath; print(jmespath.__version__)").strip() == pins["jmespath"]
    listed = {line.split()[0] for line in in_image(image, "ansible-galaxy", "collection", "list").splitlines() if line}
    assert {"community.general", "ansible.posix", "containers.podman", "awx.awx"} <= listed
    assert in_image(image, "sh", "-c", "command -v ssh").strip() == "/usr/bin/ssh"


def test_a_deploy_runs_inside_the_image_and_serves(image, lab):
    pdd = awx_job.build_private_data_dir(
        lab["tmp"] / "job",
        awx_job.job_template("sglang deploy"),
        answers={"sglang_deploy_serial": 1, "sglang_service_speculative_algorithm": "DFLASH"},
        launch={"limit": HOST},
        # the lab's controller-side files (wheels) are found through SPECDEC_REPO, mounted read-only
        envvars={"SPECDEC_REPO": str(REPO)},
        host_vars={
            HOST: {
                "ansible_connection": "ssh",
                "ansible_host": lab["address"],
                "ansible_user": "root",
                "ansible_ssh_private_key_file": "/runner/machine-credential",
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                "sglang_service_settle_s": 2,
            }
        },
        job_timeout=1200,
    )
    key = pdd.path / "machine-credential"
    key.write_bytes(lab["key"].read_bytes())
    key.chmod(0o600)
    result = awx_job.run_job(
        pdd,
        container={
            "image": image,
            "volume_mounts": [f"{REPO / '.cache'}:{REPO / '.cache'}:ro"],
            # rootful podman: the private data dir belongs to root, the image's default user is 1000
            "options": ["--user=root"],
        },
    )
    assert (result.status, result.rc) == ("successful", 0), result.stdout[-4000:]
    # ansible-runner ran the playbook in the image, with podman
    (command_file,) = (pdd.path / "artifacts").glob("*/command")
    command = json.loads(command_file.read_text())["command"]
    assert pathlib.Path(command[0]).name == "podman" and command[1] == "run" and image in command
    deploy = result.artifacts["sglang_deploy"][HOST]
    assert deploy["ok"] is True and deploy["speculative_algorithm"] == "DFLASH"
    assert result.artifacts["sglang_deploy_fleet"]["hosts_by_release"] == {deploy["release_id"]: [HOST]}
    record = json.loads(on_host("cat /opt/sglang/state/last_good/deploy.json").stdout)
    assert record["release_id"] == deploy["release_id"]
    assert on_host("systemctl is-active sglang.service").stdout.strip() == "active"
