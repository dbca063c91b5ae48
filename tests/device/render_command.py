#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sglang command line and environment exactly as the collection renders them for a host.

The device has no systemd, so a GPU proof runs the service's command in pid mode: this renders the
sglang_service role's own templates (``sglang.service.j2``: ExecStart; ``sglang.env.j2``: the
EnvironmentFile; ``sglang.yaml.j2``: the ``--config`` file) with the variables a deploy of that host
would have (the roles' defaults and vars, ``inventory/group_vars/all``, ``inventory/host_vars/<host>``,
then ``--set`` overrides, which win like ``-e``), and returns what the unit would run:

    python tests/device/render_command.py --host ct200 --json
    python tests/device/render_command.py --host ct200 --venv /opt/torch/.venv \
        --set sglang_service_model_path=/tmp/m --set sglang_service_gpu_uuids='["GPU-..."]' --shell

``argv`` is ExecStart split as systemd splits it; ``--venv`` replaces the release venv
(``<root>/current/venv``) by a venv of the device. ``env`` is the EnvironmentFile parsed as systemd
reads it. ``files`` holds the ``--config`` file's text by its path, for the harness to write.
The harnesses that should use it are not wired here (tests/device/*.py owners decide).
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys

import yaml

REPO = pathlib.Path(__file__).resolve().parents[1].parent
COLLECTIONS = REPO / "collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))

TESTS = REPO / "tests"
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible.template import Templar  # noqa: E402
from support.unit_template import exec_start as _exec_start  # noqa: E402
from support.unit_template import owner_values as _owner_values  # noqa: E402
from support.unit_template import trust_as_template  # noqa: E402
from support.unit_template import trusted as _trusted  # noqa: E402

ROLES = REPO / "roles"
# The roles whose defaults a deploy of the service has (their variables feed the unit's).
ROLE_DEFAULTS = ("sglang_runtime", "sglang_preflight", "sglang_service")


def _yaml_files(directory: pathlib.Path) -> list[pathlib.Path]:
    if directory.is_file():
        return [directory]
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yml", ".yaml") and p.is_file())


def host_variables(host: str | None, inventory: pathlib.Path, overrides: dict) -> dict:
    """Role defaults < role vars < group_vars/all < host_vars/<host> < overrides (Ansible's order)."""
    variables: dict = {"ansible_managed": "Ansible managed", "inventory_hostname": host or "localhost"}
    for role in ROLE_DEFAULTS:
        path = ROLES / role / "defaults" / "main.yml"
        if path.is_file():
            variables.update(_trusted(yaml.safe_load(path.read_text()) or {}))
    variables.update(_trusted(yaml.safe_load((ROLES / "sglang_service" / "vars" / "main.yml").read_text()) or {}))
    for path in _yaml_files(inventory / "group_vars" / "all"):
        variables.update(_trusted(yaml.safe_load(path.read_text()) or {}))
    if host:
        host_dir = inventory / "host_vars" / host
        files = _yaml_files(host_dir) or _yaml_files(inventory / "host_vars" / f"{host}.yml")
        if not files:
            raise SystemExit(f"render_command: no host_vars for {host!r} under {inventory}/host_vars")
        for path in files:
            variables.update(_trusted(yaml.safe_load(path.read_text()) or {}))
    variables.update(_trusted(overrides))
    return variables


def exec_start(unit: str) -> list[str]:
    """ExecStart split as systemd splits it (continuation lines joined, quotes removed, ``$$`` -> ``$``)."""
    return [arg.replace("$$", "$").replace("%%", "%") for arg in _exec_start(unit)]


def environment_file(text: str) -> dict:
    """``NAME="value"`` lines (comments skipped) as systemd's EnvironmentFile= reads them."""
    env = {}
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or "=" not in stripped:
            continue
        name, _, raw = stripped.partition("=")
        parts = shlex.split(raw) if raw else [""]
        env[name.strip()] = parts[0] if parts else ""
    return env


def render(host=None, inventory=REPO / "inventory", overrides=None, envelope=None, venv=None) -> dict:
    """``{argv, env, files, envelope, unit, env_file}`` of the host's service, as the role renders them."""
    variables = host_variables(host, pathlib.Path(inventory), dict(overrides or {}))
    templar = Templar(loader=DataLoader(), variables=variables)
    ladder = templar.template(variables["sglang_service_envelope_ladder"])
    name = envelope or (ladder[0] if ladder else None)
    if name is None:
        raise SystemExit("render_command: sglang_service_envelope_ladder is empty; pass --envelope")
    templar.available_variables = dict(
        variables, _sglang_service_envelope_name=name, **_owner_values(templar, variables)
    )
    templates = ROLES / "sglang_service" / "templates"

    def template_file(name):
        # as ansible.builtin.template renders a file: no backslash escaping (that is for inline templates)
        return templar.template(trust_as_template((templates / name).read_text()), escape_backslashes=False)

    unit = template_file("sglang.service.j2")
    env_text = template_file("sglang.env.j2")
    argv = exec_start(unit)
    release_venv = templar.available_variables["_sglang_service_plan"]["current_link"] + "/venv"
    if venv:
        prefix = release_venv.rstrip("/") + "/"
        if argv[0].startswith(prefix):
            argv[0] = str(pathlib.Path(venv) / argv[0][len(prefix) :])
    env = environment_file(env_text)
    if venv:
        env = {k: v.replace(release_venv.rstrip("/"), str(venv)) for k, v in env.items()}
    files = {}
    if any(arg.startswith("--config") for arg in argv):
        path = templar.template(trust_as_template("{{ _sglang_service_config_path }}"))
        files[path] = template_file("sglang.yaml.j2")
    return {
        "host": host,
        "envelope": name,
        "argv": argv,
        "env": env,
        "files": files,
        "release_venv": release_venv,
        "unit": unit,
        "env_file": env_text,
    }


def _override(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--set wants NAME=VALUE (a YAML value), got {text!r}")
    return name, yaml.safe_load(value) if value else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", help="inventory host whose host_vars apply (ct200, ct129); none: defaults only")
    parser.add_argument("--inventory", default=str(REPO / "inventory"))
    parser.add_argument("--envelope", help="envelope of sglang_service_envelopes (default: the ladder's first)")
    parser.add_argument("--venv", help="run the program from this venv instead of <root>/current/venv")
    parser.add_argument("--set", dest="overrides", action="append", type=_override, default=[], metavar="NAME=VALUE")
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print {argv, env, files, ...} as JSON (default)")
    out.add_argument("--shell", action="store_true", help="print `env -i NAME=... argv...` for a shell")
    args = parser.parse_args(argv)
    rendered = render(args.host, args.inventory, dict(args.overrides), args.envelope, args.venv)
    if args.shell:
        assignments = [f"{k}={shlex.quote(v)}" for k, v in sorted(rendered["env"].items())]
        print(" ".join(["env", *assignments, *(shlex.quote(a) for a in rendered["argv"])]))
    else:
        print(json.dumps({k: rendered[k] for k in ("host", "envelope", "argv", "env", "files")}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
