"""The wiring of input validation: a bad input ends the play before any host is touched, all errors at once.

Which inputs are refused, and with which words, is decided by one pure function
(plugins/module_utils/_plan/validation_rules.py, ``check_inputs``) and tested case by case in seconds by
tests/unit/plugins/module_utils/_plan/test_validation_rules.py (every case of the former 86-run matrix). These
few real ansible-playbook runs against one lab host (a podman container with systemd, never deployed to)
prove that each entry playbook, and a role run alone, calls it first:

- ansible-playbook failed as a play failure (rc 2), not a crash (rc 250);
- the play that touches hosts never started, and the tasks recap lists only controller-side tasks;
- one failure message holds every error of the run, each naming its variable;
- no deprecation warning was printed (deprecations are forced visible);

and, after the bad runs, that the lab host was never contacted (no Ansible directory in it). A control
run with valid input shows the same command does reach the host. Ten playbook runs in all.
"""

import json
import pathlib
import re

import pytest
import yaml
from private_lab import PrivateLab

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB = PrivateLab(
    "specdec-badin-",
    ANSIBLE_DEPRECATION_WARNINGS="1",
    ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
)
CONTAINER = LAB.container
sh = LAB.sh
SECRET = "s3cret-matrix-key"
DEPLOY, ROLLBACK, STOP, DIAGNOSE = (
    "deploy.yml",
    "playbooks/rollback.yml",
    "playbooks/stop.yml",
    "playbooks/diagnose.yml",
)
HOST_PLAYS = {
    DEPLOY: "Deploy",
    ROLLBACK: "Roll back to the previous or a named release",
    STOP: "Stop the SGLang service",
}
# A DDTREE deploy on sglang 0.5.23 as production would run it (the lab's test double needs no GPU proof).
DDTREE_0_5_23 = {
    "sglang_service_launch_style": "serve",
    "sglang_service_speculative_algorithm": "DDTREE",
    "sglang_service_attention_backend": "triton",
    "sglang_runtime_sglang_version": "0.5.23",
}
ROLE_ALONE = "role-alone.yml"

# Each bad run: (playbook, -e values, texts that must all be in the one failure message).
BAD = {
    "deploy-every-error-at-once": (
        DEPLOY,
        [
            "sglang_service_port=80",
            "sglang_preflight_gpus=1,2",
            "sglang_servce_port=40000",
            "sglang_service_speculative_algo=DDTREE",
            "sglang_deploy_serial=banana",
            json.dumps(
                {
                    "sglang_service_api_key": f'{SECRET}"',
                    "sglang_service_envelopes": {"full": {"mem_fraction_static": 1.5}},
                    "sglang_service_envelope_ladder": ["full"],
                }
            ),
        ],
        (
            "7 invalid input(s) for playbooks/deploy.yml, nothing was done on any host",
            "sglang_service_port=80: must be in 1024-65535",
            """pass it as JSON: -e '{"sglang_preflight_gpus": ["1", "2"]}'""",
            "sglang_servce_port: no role or playbook reads this variable (did you mean sglang_service_port?)",
            "sglang_service_speculative_algo: no role reads this variable (did you mean"
            " sglang_service_speculative_algorithm?)",
            'sglang_deploy_serial="banana": must be a host count >= 1',
            'sglang_service_api_key="<hidden>" holds a quote or backslash',
            "sglang_service_envelopes.full.mem_fraction_static=1.5 is outside (0, 1)",
        ),
    ),
    "deploy-ddtree-on-0.5.23-without-the-opt-in": (
        DEPLOY,
        [json.dumps(DDTREE_0_5_23)],
        (
            "sglang_service_speculative_algorithm=DDTREE on sglang_runtime_sglang.version=0.5.23",
            "has no GPU record: the runtime sglang 0.5.23: proven nowhere",
            "proven in the lab / on a CPU only (no GPU record)",
            "set sglang_runtime_allow_unproven=true to deploy it anyway",
        ),
    ),
    "rollback-typo-and-release-id": (
        ROLLBACK,
        ["sglang_runtime_rooot=/srv/sglang", "sglang_rollback_release=../../etc"],
        (
            "2 invalid input(s) for playbooks/rollback.yml",
            "sglang_runtime_rooot: no role reads this variable (did you mean sglang_runtime_root?)",
            'sglang_rollback_release="../../etc": must be a release id of [A-Za-z0-9._-]',
        ),
    ),
    "stop-disable-and-unit-name": (
        STOP,
        ["sglang_stop_disable=maybe", "sglang_service_unit_name=../sglang"],
        (
            "2 invalid input(s) for playbooks/stop.yml",
            'sglang_stop_disable="maybe": must be a boolean, one of true, false',
            'sglang_service_unit_name="../sglang": must be a systemd unit name of [A-Za-z0-9_.@-]',
        ),
    ),
    "diagnose-starts-zero": (
        DIAGNOSE,
        ["sglang_diagnose_starts=0", "sglang_servce_unit_name=x"],
        (
            "2 invalid input(s) for playbooks/diagnose.yml",
            "sglang_diagnose_starts=0: must be in 1-100",
            "sglang_servce_unit_name: no role or playbook reads this variable (did you mean sglang_service_unit_name?)",
        ),
    ),
    "a-role-alone-checks-its-variables-first": (
        ROLE_ALONE,
        # the service role reads the release root of the runtime role, whose defaults a role alone does not load
        ["sglang_service_port=80", "sglang_service_tp_size=0", "sglang_runtime_root=/opt/sglang"],
        (
            "2 invalid input(s) for sglang_service, nothing was done on any host",
            "sglang_service_port=80: must be in 1024-65535",
            "sglang_service_tp_size=0: must be in 1-64",
        ),
    ),
}
CONTROL = (DEPLOY, ["sglang_deploy_serial=1", "sglang_service_port=30001"])
# Controller-side tasks: the validation plays' tasks, the roles' controller-only entry points, the role's own
# validation when it runs alone.
CONTROLLER_TASKS = ("validate", "plan", "defaults")


def play(playbook, extra, tmp=None):
    """``ansible-playbook PLAYBOOK -l lab1 -e ...`` (a playbook of ``tmp`` when it is ROLE_ALONE)."""
    path = str(tmp / playbook) if playbook == ROLE_ALONE else playbook
    args = ["ansible-playbook", path, "-l", "lab1"]
    for value in extra:
        args += ["-e", value]
    proc = sh(args, timeout=300, check=False)
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    """Every bad run one after the other against one fresh lab host, the host checked, then the control runs."""
    tmp = tmp_path_factory.mktemp("badin")
    (tmp / ROLE_ALONE).write_text(
        "- name: The service role alone\n  hosts: all\n  gather_facts: false\n"
        "  roles:\n    - role: specdec.sglang.sglang_service\n"
    )
    LAB.up()
    try:
        results = {name: play(book, extra, tmp) for name, (book, extra, _) in BAD.items()}
        opt_in = {**DDTREE_0_5_23, "sglang_runtime_allow_unproven": True}
        results["_ddtree_opt_in"] = play(DEPLOY, [json.dumps(opt_in)])
        contacted = sh(
            ["podman", "exec", CONTAINER, "sh", "-c", "ls -d /root/.ansible /tmp/.ansible* 2>/dev/null || true"]
        )
        results["_host_ansible_dirs"] = contacted.stdout.split()
        results["_control"] = play(*CONTROL)
        results["_stop_without_unit"] = play(STOP, ["sglang_service_unit_name=sglang-never-installed"])
        yield results
    finally:
        LAB.down()


def controller_task_names(playbook):
    """Names of the tasks that run before a host is contacted: the first play's and the roles' controller entries."""
    names = set()
    if playbook != ROLE_ALONE:
        first = yaml.safe_load((REPO / playbook).read_text())
        imported = first[0].get("ansible.builtin.import_playbook")
        if imported:
            first = yaml.safe_load((REPO / playbook).parent.joinpath(imported).read_text())
        names.update(t["name"] for t in first[0]["tasks"])
    for path in [p for name in CONTROLLER_TASKS for p in REPO.glob(f"roles/*/tasks/{name}.yml")]:
        names.update(t["name"] for t in yaml.safe_load(path.read_text()))
    names.update(t["name"] for t in yaml.safe_load((REPO / "roles/sglang_service/tasks/main.yml").read_text())[:1])
    return names


def tasks_recap(out):
    """Task names listed by the profile_tasks recap at the end of the run."""
    if "TASKS RECAP" not in out:
        return []
    names = []
    for line in out.split("TASKS RECAP", 1)[1].splitlines():
        match = re.match(r"^(?:[\w.]+ : )?(.+?) -+ [0-9.]+s$", line.strip())
        if match:
            names.append(match.group(1))
    return names


def failure_messages(out):
    messages = []
    for line in out.splitlines():
        if re.match(r"^(fatal|failed): \[lab1\]( \(item=[^)]*\))?(: FAILED!)? => ", line):
            data = json.loads(line.split("=> ", 1)[1])
            messages.append(data.get("msg", ""))
    return messages


@pytest.mark.parametrize("name", list(BAD))
def test_a_bad_input_ends_the_play_before_any_host_with_every_error_in_one_message(matrix, name):
    playbook, _, expected = BAD[name]
    result = matrix[name]
    out = result["out"]
    assert result["rc"] == 2, f"expected a play failure (rc 2), got rc {result['rc']}:\n{out[-3000:]}"
    if playbook in HOST_PLAYS:
        assert f"PLAY [{HOST_PLAYS[playbook]}]" not in out, "the play that touches hosts started"
    recap = tasks_recap(out)
    assert recap, f"no tasks recap in the output:\n{out[-2000:]}"
    allowed = controller_task_names(playbook)
    assert [n for n in recap if n not in allowed and not n.startswith("Validating arguments against")] == []
    messages = failure_messages(out)
    assert len(messages) == 1, out[-3000:]
    for text in expected:
        assert text in messages[0], messages[0]
    assert SECRET not in out
    assert "[DEPRECATION WARNING]" not in out
    assert "Create a temporary bundle directory" not in recap  # diagnose: its first host task never ran


def test_a_ddtree_deploy_on_0_5_23_passes_validation_with_the_opt_in(matrix):
    """Accepted by validation; the lab's own runtime (stub torch 2.11) is then refused by the plan, as it must be."""
    out = matrix["_ddtree_opt_in"]["out"]
    assert "has no GPU record" not in out and "invalid input(s)" not in out, out[-3000:]
    # the plan runs only after the check passed
    assert "The deploy plan is refused" in out and "sglang 0.5.23 requires torch==2.14.1" in out


def test_no_bad_input_contacted_the_lab_host(matrix):
    assert matrix["_host_ansible_dirs"] == []


def test_valid_input_reaches_the_host_without_deprecation_warnings(matrix):
    """Control: the same command with valid input passes validation and runs tasks on the host."""
    out = matrix["_control"]["out"]
    assert "PLAY [Deploy]" in out, out[-3000:]
    # the first task on the host: preflight's one read of it (roles/sglang_preflight/tasks/host_plan.yml)
    assert "TASK [specdec.sglang.sglang_preflight : Read the host once" in out, out[-3000:]
    assert "[DEPRECATION WARNING]" not in out


def test_stop_on_a_host_without_the_unit_says_nothing_to_stop(matrix):
    result = matrix["_stop_without_unit"]
    assert result["rc"] == 0, result["out"][-3000:]
    assert "sglang-never-installed.service is not installed on lab1: nothing to stop" in result["out"]


RUNTIME_REFERENCE = "/opt/specdec-badin-reference-venv"  # a copy of the lab's, with an sglang wanting torch 2.14.1
RUNTIME_ROOT = "/opt/sglang-badin-refcheck"  # the release root of that run: must never be created
RUNTIME_MODELS = "/opt/specdec-badin-models"


def test_runtime_a_reference_venv_whose_sglang_wants_another_torch_is_refused_in_preflight(matrix):
    """Only the host knows its reference venv: preflight reads it and refuses it before any release is built."""
    defaults = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())
    version = defaults["sglang_runtime_sglang_version"]
    site = f"{RUNTIME_REFERENCE}/lib/python3.11/site-packages"
    metadata = f"Metadata-Version: 2.1\\nName: sglang\\nVersion: {version}\\nRequires-Dist: torch==2.14.1\\n"
    # The lab's reference venv as the runtime scenario makes it (the stub triton unpacked), plus that sglang.
    sh(["podman", "cp", str(REPO / ".cache/stub-wheels/triton-3.6.0-py3-none-any.whl"), f"{CONTAINER}:/tmp/"])
    sh(["podman", "exec", CONTAINER, "sh", "-c",
        f"set -e; rm -rf {RUNTIME_REFERENCE} {RUNTIME_ROOT};"
        f" /usr/bin/python3 -m venv --without-pip {RUNTIME_REFERENCE};"
        f" /usr/bin/python3 -m zipfile -e /tmp/triton-3.6.0-py3-none-any.whl {site};"
        f" mkdir -p {site}/sglang-{version}.dist-info;"
        f" printf '{metadata}' > {site}/sglang-{version}.dist-info/METADATA;"
        f" for d in target draft; do mkdir -p {RUNTIME_MODELS}/$d;"
        f" echo '{{}}' > {RUNTIME_MODELS}/$d/config.json; done"])  # fmt: skip
    result = play(
        DEPLOY,
        [
            json.dumps(
                {
                    "sglang_runtime_reference_venv": RUNTIME_REFERENCE,
                    "sglang_runtime_root": RUNTIME_ROOT,
                    # the bare lab host has no models: directories with a config.json pass the path check
                    "sglang_service_model_path": f"{RUNTIME_MODELS}/target",
                    "sglang_service_draft_model_path": f"{RUNTIME_MODELS}/draft",
                    "sglang_preflight_model_integrity_checks": False,
                }
            )
        ],
    )
    out = result["out"]
    assert result["rc"] == 2, out[-3000:]
    assert "PLAY [Deploy]" in out  # passed validation: only the host can tell
    messages = failure_messages(out)
    assert len(messages) == 1, out[-3000:]
    assert messages[0].startswith(f"The reference venv {RUNTIME_REFERENCE} contradicts the plan"), messages[0]
    assert (
        f"sglang_runtime_manifest[0] (torch): sglang {version} requires torch==2.14.1 (Requires-Dist of"
        f" {site}/sglang-{version}.dist-info/METADATA on the host); the manifest has torch 2.11.0+cu130"
    ) in messages[0]
    recap = tasks_recap(out)
    assert recap and not [n for n in recap if n.startswith(("Install", "Create the venv", "Compute the release"))]
    # Nothing was built: no release directory (the host lock, <root>/state/host.lock, is taken before preflight).
    releases = f"{RUNTIME_ROOT}/releases"
    root = sh(["podman", "exec", CONTAINER, "sh", "-c", f"test -e {releases} && echo exists || echo absent"])
    assert root.stdout.strip() == "absent"


def test_at_most_ten_playbook_runs_prove_the_wiring():
    runs = len(BAD) + 1 + 2 + 1  # the bad runs, the opt-in run, the control runs, the reference venv run
    assert runs <= 10
    assert {BAD[n][0] for n in BAD} >= {DEPLOY, ROLLBACK, STOP, DIAGNOSE, ROLE_ALONE}
