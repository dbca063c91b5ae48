"""The preflight's task files that carry the plan's GPU decisions out, rendered by ansible-playbook.

tests/unit/plugins/module_utils/_plan/test_gpu_preflight_decisions.py proves the decisions through the code a deploy
runs (host facts, the plan, the modules) without a playbook; what it cannot prove is that the task files hand
the plan to those modules as written. Here the plan that test builds (an 8x RTX PRO 6000 Blackwell host choosing
two GPUs; ct129 with its lost GPU excluded) goes into ansible-playbook as ``sglang_deploy_plan``, and the role's
own ``gpu_code.yml`` and ``envelopes.yml`` run on localhost with the roles' defaults: the Jinja of both files is
rendered and their modules run, once.
"""

import importlib.util
import json
import os
import pathlib
import subprocess
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
_SPEC = importlib.util.spec_from_file_location(
    "gpu_decisions", REPO / "tests/unit/plugins/module_utils/_plan/test_gpu_preflight_decisions.py"
)
decisions = importlib.util.module_from_spec(_SPEC)
sys.path.insert(0, str(REPO / "tests"))  # support.* of the unit test
_SPEC.loader.exec_module(decisions)


def _host(variables, built, **more):
    """The host's inventory variables: the plan, and the service's and preflight's variables as the play has them
    (those that are templates of other variables come from the roles' defaults the play loads)."""
    host = {
        name: value
        for name, value in dict.items(variables)
        if name.startswith(("sglang_service_", "sglang_preflight_")) and "{{" not in json.dumps(value)
    }
    host.update(ansible_connection="local", ansible_python_interpreter=sys.executable)
    host.update(sglang_deploy_plan=built["plan"], **more)
    # main.yml's "Record the GPUs the plan chose", before both task files
    gpus = built["plan"]["host"]["gpus"]
    host.update(sglang_preflight_gpu_uuids=gpus["uuids"], sglang_preflight_gpus_facts=gpus["gpus"])
    return host


def test_gpu_code_and_envelopes_task_files_carry_the_plan_to_their_modules(tmp_path, monkeypatch, capsys):
    blackwell_vars = decisions.play(tmp_path / "b", decisions.BLACKWELL)
    blackwell = decisions.deploy_plan_of_host(
        monkeypatch, capsys, blackwell_vars, "constructed-rtx-pro-6000-blackwell-8gpu"
    )
    fa3_vars = decisions.play(tmp_path / "f", decisions.BLACKWELL, {"sglang_service_attention_backend": "fa3"})
    fa3 = decisions.deploy_plan_of_host(monkeypatch, capsys, fa3_vars, "constructed-rtx-pro-6000-blackwell-8gpu")
    ct129_vars = decisions.play(tmp_path / "c", decisions.CT129, decisions.CT129_MODELS, decisions.CT129_ENVELOPES)
    ct129 = decisions.deploy_plan_of_host(monkeypatch, capsys, ct129_vars, "constructed-device-handle-unknown-error")
    for built in (blackwell, fa3, ct129):
        assert built["errors"] == [], built["errors"]
    no_nvcc = {"_sglang_preflight_cuda_roots": [], "sglang_preflight_gpu_checks": True}
    inventory = {
        "blackwell": _host(blackwell_vars, blackwell, **no_nvcc),
        "blackwell_fa3": _host(fa3_vars, fa3, **no_nvcc),
        "ct129": _host(ct129_vars, ct129, sglang_preflight_gpu_checks=True, sglang_preflight_envelope_plan=True),
    }
    (tmp_path / "inventory.json").write_text(json.dumps({"all": {"hosts": inventory}}))
    out = tmp_path / "out"
    out.mkdir()
    tasks = [
        {
            "name": "Load the roles' defaults, as the deploy's validation play does",
            "ansible.builtin.include_role": {
                "name": "specdec.sglang.{{ _role }}",
                "tasks_from": "defaults",
                "rolespec_validate": False,
                "public": True,
            },
            "loop": ["sglang_service", "sglang_preflight", "sglang_runtime"],
            "loop_control": {"loop_var": "_role"},
        },
        {
            "name": "The GPU code check (gpu_code.yml)",
            "when": "inventory_hostname != 'ct129'",
            "block": [
                {
                    "name": "The role's task file",
                    "ansible.builtin.include_role": {
                        "name": "specdec.sglang.sglang_preflight",
                        "tasks_from": "gpu_code",
                    },
                }
            ],
            "rescue": [
                {
                    "name": "Keep the refusal",
                    "ansible.builtin.copy": {
                        "content": "{{ ansible_failed_result.msg }}",
                        "dest": str(out) + "/{{ inventory_hostname }}.refused",
                        "mode": "0600",
                    },
                }
            ],
        },
        {
            "name": "Keep the GPU code result",
            "when": "_sglang_preflight_gpu_code is defined and not _sglang_preflight_gpu_code.failed | default(false)",
            "ansible.builtin.copy": {
                "content": "{{ _sglang_preflight_gpu_code | to_json }}",
                "dest": str(out) + "/{{ inventory_hostname }}.gpu_code.json",
                "mode": "0600",
            },
        },
        {
            "name": "The envelope plan (envelopes.yml)",
            "when": "inventory_hostname == 'ct129'",
            "ansible.builtin.include_role": {"name": "specdec.sglang.sglang_preflight", "tasks_from": "envelopes"},
        },
        {
            "name": "Keep the envelope plan",
            "when": "inventory_hostname == 'ct129'",
            "ansible.builtin.copy": {
                "content": "{{ sglang_preflight_envelope_plan_result | to_json }}",
                "dest": str(out) + "/{{ inventory_hostname }}.envelopes.json",
                "mode": "0600",
            },
        },
    ]
    play = [{"name": "preflight task files", "hosts": "all", "gather_facts": False, "tasks": tasks}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "CUDA_"))}
    # a host without nvcc: the modules' PATH holds none
    env.update(ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_NOCOLOR="1", PATH="/usr/bin:/bin")
    done = subprocess.run(
        [BIN / "ansible-playbook", "-i", tmp_path / "inventory.json", tmp_path / "play.yml"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    passed = json.loads((out / "blackwell.gpu_code.json").read_text())
    assert passed["ok"] is True and passed["errors"] == []
    assert [r.split(" (", 1)[0] for r in passed["reasons"]][3:] == [
        "12.0: attention backend triton",
        "12.0: sampling backend pytorch",
    ]
    refused = (out / "blackwell_fa3.refused").read_text()
    assert "attention backend fa3 (sglang_service_attention_backend) has no code for compute capability 12.0" in (
        refused
    )
    planned = json.loads((out / "ct129.envelopes.json").read_text())
    assert planned["fitting"] == ["full", "small", "small-nograph"] and planned["skipped"] == []
    assert any("| 94.22 " in line for line in planned["table"])
