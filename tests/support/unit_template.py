"""Render the sglang_service unit template the way Ansible does, and read its ExecStart back.

Shared by tests/unit/test_unit_template.py (how the unit renders) and
tests/contract/test_unit_template_real_flags.py (its flags against the real sglang source).
"""

import pathlib
import shlex

from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar

try:
    from ansible.template import trust_as_template
except ImportError:  # ansible-core 2.18: no data tagging, every string is a template already

    def trust_as_template(value):
        return value


ROLE = pathlib.Path(__file__).resolve().parents[2] / "roles" / "sglang_service"

ALL_OPTIONS_ON = {
    "sglang_service_served_model_name": "qwen3.6-27b",
    "sglang_service_attention_backend": "triton",
    "sglang_service_sampling_backend": "flashinfer",
    "sglang_service_trust_remote_code": True,
    "sglang_service_api_key": "not-a-real-key",
    "sglang_service_tp_size": 2,
    "sglang_service_enable_metrics": True,
    "sglang_service_extra_flags": ["--log-level=info"],
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
    return _render("sglang.service.j2", launch_style, **overrides)


def render_env(launch_style: str = "serve", **overrides) -> str:
    """The unit's EnvironmentFile (sglang.env.j2) as Ansible renders it."""
    return _render("sglang.env.j2", launch_style, **overrides)


def _render(template: str, launch_style: str, **overrides) -> str:
    loader = DataLoader()
    variables = {"ansible_managed": "Ansible managed", "sglang_runtime_root": "/opt/sglang"}
    for name in ("defaults", "vars"):
        # role files are trusted templates to Ansible: their "{{ ... }}" defaults are rendered
        variables.update(trusted(loader.load_from_file(str(ROLE / name / "main.yml"))))
    variables.update(ALL_OPTIONS_ON, sglang_service_launch_style=launch_style, **overrides)
    templar = Templar(loader=loader, variables=variables)
    templar.available_variables = dict(variables, **owner_values(templar, variables))
    return templar.template(trust_as_template((ROLE / "templates" / template).read_text()))


def owner_values(templar, variables) -> dict:
    """What the role reads from the collection's plugins at run time (sglang_release_plan's result, the
    service_replicas filter's single replica), from the same functions: this Templar has no collection plugins."""
    return {
        "_sglang_service_plan": release_plan(templar, variables),
        "_sglang_service_single_replica": single_replica(templar, variables),
    }


def release_plan(templar, variables) -> dict:
    """The part of sglang_release_plan's result the templates read (``current_link``), from its owner's function."""
    from ansible_collections.specdec.sglang.plugins.module_utils._release import release  # noqa: PLC0415

    if "_sglang_service_plan" in variables:
        return variables["_sglang_service_plan"]
    return {"current_link": release.current_link(templar.template(variables["sglang_service_runtime_root"]))}


def single_replica(templar, variables) -> dict:
    """The role's single replica as ``service_replicas`` plans it (vars/main.yml calls that filter; this Templar has
    no collection plugins, so the owner's function is called here with the same arguments)."""
    from ansible_collections.specdec.sglang.plugins.filter.service_replicas import service_replicas  # noqa: PLC0415

    if "_sglang_service_single_replica" in variables and not isinstance(
        variables["_sglang_service_single_replica"], str
    ):
        return variables["_sglang_service_single_replica"]

    def value(name, default=None):
        return templar.template(variables[name]) if name in variables else default

    (single,) = service_replicas(
        [],
        value("sglang_preflight_gpus", []),
        value("sglang_service_gpu_uuids", []),
        tp_size=value("sglang_service_tp_size"),
        port=value("sglang_service_port"),
        unit_name=value("sglang_service_unit_name"),
        config_dir=value("sglang_service_config_dir"),
        runtime_root=value("sglang_service_runtime_root"),
    )
    return single


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
