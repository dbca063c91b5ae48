"""Port ownership on the lab host: a port held by another process is port_in_use, naming its pid and command.

Runs after test_default.py (file order). A transient unit (systemd-run) listens on 127.0.0.1:30001:
- a deploy with sglang_service_port=30001 fails in preflight with port_in_use, the holder's pid and
  command named, the running sglang.service untouched;
- the readiness module watching sglang.service but pointed at port 30001 (whose answers come from the
  foreign process) fails with port_in_use and sends no generation there.
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
FOREIGN = "molecule-foreign-listener"
COMMAND = "/usr/bin/python3 -m http.server 30001 --bind 127.0.0.1"


def show(lab_host, unit="sglang.service"):
    out = lab_host.check_output("systemctl show --property=MainPID,InvocationID,NRestarts %s" % unit)
    return dict(line.split("=", 1) for line in out.splitlines())


def playbook(*args):
    return subprocess.run(
        [
            str(pathlib.Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            os.environ["MOLECULE_INVENTORY_FILE"],
            *args,
        ],
        cwd=str(REPO),
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
    )


@pytest.fixture(scope="module")
def foreign(lab_host):
    lab_host.check_output("systemd-run --unit=%s --property=Type=simple %s" % (FOREIGN, COMMAND))
    lab_host.check_output(
        "for i in $(seq 50); do ss -Hltn 'sport = :30001' | grep -q . && exit 0; sleep 0.1; done; exit 1"
    )
    pid = int(show(lab_host, FOREIGN + ".service")["MainPID"])
    yield pid
    lab_host.run("systemctl stop %s" % FOREIGN)


def test_a_deploy_onto_a_port_another_process_holds_fails_in_preflight_naming_it(lab_host, foreign):
    before = show(lab_host)
    proc = playbook(
        str(REPO / "playbooks" / "deploy.yml"),
        "-e",
        json.dumps({"sglang_service_port": 30001, "sglang_service_report_dir": ""}),
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "port_in_use: port 30001 is held by pid %d (%s)" % (foreign, COMMAND) in out, out[-3000:]
    assert show(lab_host) == before


def test_readiness_never_judges_a_foreign_server_as_the_release(lab_host, foreign, tmp_path):
    play = tmp_path / "readiness.yml"
    play.write_text(
        "- hosts: all\n  gather_facts: false\n  become: true\n  tasks:\n"
        "    - specdec.sglang.sglang_readiness:\n"
        "        unit: sglang.service\n"
        "        base_url: http://127.0.0.1:30001\n"
        "        startup_timeout: 30\n"
        "      register: r\n      failed_when: false\n"
        "    - ansible.builtin.copy: {content: '{{ r | to_json }}', dest: /var/tmp/molecule-port-readiness.json}\n"
    )
    proc = playbook(str(play))
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    result = json.loads(lab_host.file("/var/tmp/molecule-port-readiness.json").content_string)
    assert result["ready"] is False and result["failure_class"] == "port_in_use"
    assert result["port_owner"]["pid"] == foreign
    assert result["port_owner"]["command"] == COMMAND
    assert result["probe"] == {}
    assert result["elapsed_s"] < 5
