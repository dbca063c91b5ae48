# Copyright: (c) 2026, specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a job template of awx/templates.yml the way AWX runs it: ansible-runner in a private data dir.

AWX does not run ansible-playbook itself. For each job it writes a private data dir (the project
checkout under ``project/``, the inventory under ``inventory/``, ``env/extravars``, ``env/settings``,
``env/envvars`` with the credentials' environment, ``env/cmdline`` with the template's limit,
verbosity, forks and job type) and hands it to ansible-runner inside the execution environment.
The job's artifacts are what the playbook published with ``set_stats``; its stdout is the stream of
runner events. This module does the same from this checkout, so a template and its survey can be
tried on lab hosts (tests/awx) or by an operator before AWX sees them::

    python awx/runner/awx_job.py "sglang deploy" --limit lab1 -a sglang_deploy_serial=1 \
        --env SPECDEC_LAB_PREFIX=specdec-

The survey rules below are AWX's: the checks AWX makes when a survey is saved
(:func:`survey_spec_errors`) and when a job is launched (:func:`answer_errors`,
:func:`launch_extra_vars`), including that a default which fails its own question is silently
not sent. Answers are written ``!unsafe`` (AWX's default ``ALLOW_JINJA_IN_EXTRA_VARS=template``);
the template's own ``extra_vars`` are trusted.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "awx" / "templates.yml"

# AWX: awx/api/views (JobTemplateSurveySpec) SURVEY_TYPE_MAPPING.
SURVEY_TYPES = {
    "text": (str,),
    "textarea": (str,),
    "password": (str,),
    "multiplechoice": (str,),
    "multiselect": (str,),
    "integer": (int,),
    "float": (float, int),
}
REQUIRED_KEYS = {"type": str, "question_name": str, "variable": str, "required": bool}


# ---------------------------------------------------------------------------------------------
# Survey rules (pure)
# ---------------------------------------------------------------------------------------------


def _choices(question: dict) -> list:
    choices = question.get("choices", [])
    if isinstance(choices, str):
        return [c for c in choices.splitlines() if c.strip()]
    return list(choices)


def survey_spec_errors(spec: dict) -> list[str]:
    """What AWX refuses when the survey spec is saved: one message per problem, [] when valid."""
    errors = []
    for key, kind in (("name", str), ("description", str), ("spec", list)):
        if not isinstance(spec.get(key), kind):
            errors.append(f"survey field '{key}' missing or not a {kind.__name__}")
    questions = spec.get("spec") if isinstance(spec.get("spec"), list) else []
    if isinstance(spec.get("spec"), list) and not questions:
        errors.append("'spec' doesn't contain any items")
    seen: set = set()
    for idx, q in enumerate(questions):
        errors.extend(_question_spec_errors(idx, q, seen))
    return errors


def _question_spec_errors(idx: int, q: Any, seen: set) -> list[str]:
    """One question of a survey spec; ``seen`` collects the variables of the questions before it."""
    if not isinstance(q, dict):
        return [f"question {idx} is not an object"]
    missing = [k for k, kind in REQUIRED_KEYS.items() if not isinstance(q.get(k), kind)]
    if missing:
        return [f"question {idx}: {', '.join(missing)} missing or of the wrong type"]
    var, qtype = q["variable"], q["type"]
    errors = []
    if var in seen:
        errors.append(f"question {idx}: variable '{var}' duplicated")
    seen.add(var)
    where = f"question {idx} ({var})"
    if qtype not in SURVEY_TYPES:
        return [*errors, f"{where}: type '{qtype}' is not one of {sorted(SURVEY_TYPES)}"]
    errors.extend(_default_and_bound_errors(q, where))
    if qtype in ("multiplechoice", "multiselect"):
        errors.extend(_choice_spec_errors(q, where))
    return errors


def _default_and_bound_errors(q: dict, where: str) -> list[str]:
    """The default's type (a number is no boolean) and integer min/max."""
    errors = []
    qtype, default = q["type"], q.get("default")
    if "default" in q and default != "" and not isinstance(default, SURVEY_TYPES[qtype]):
        errors.append(f"{where}: default {default!r} expected to be {qtype}")
    if qtype in ("integer", "float") and isinstance(default, bool):
        errors.append(f"{where}: default {default!r} is a boolean, not a number")
    for key in ("min", "max"):
        if q.get(key) is not None and (not isinstance(q[key], int) or isinstance(q[key], bool)):
            errors.append(f"{where}: {key} expected to be an integer")
    return errors


def _choice_spec_errors(q: dict, where: str) -> list[str]:
    """A choice question: it has choices, and its default is among them (one only for multiplechoice)."""
    qtype, default = q["type"], q.get("default")
    if "choices" not in q:
        return [f"{where}: type {qtype} must specify choices"]
    if "default" not in q or default in ("", None):
        return []
    errors = []
    defaults = default.splitlines() if isinstance(default, str) else list(default)
    if qtype == "multiplechoice" and len(defaults) > 1:
        errors.append(f"{where}: multiple choice can only have one default")
    bad = [d for d in defaults if d not in _choices(q)]
    if bad:
        errors.append(f"{where}: default {bad} not among the choices {_choices(q)}")
    return errors


def _bound(value: Any) -> Any:
    return None if value in ("", None) else value


def answer_errors(question: dict, answers: dict) -> list[str]:
    """What AWX refuses at launch for one question given the answers (AWX's survey element validation)."""
    var, qtype = question["variable"], question["type"]
    if var not in answers:
        return [f"'{var}' value missing"] if question.get("required") else []
    value = answers[var]
    lo, hi = _bound(question.get("min")), _bound(question.get("max"))
    if qtype in ("text", "textarea", "password"):
        return _text_answer_errors(var, value, lo, hi)
    if qtype in ("integer", "float"):
        return _number_answer_errors(var, qtype, value, lo, hi)
    return _choice_answer_errors(var, qtype, value, _choices(question))


def _text_answer_errors(var: str, value: Any, lo: Any, hi: Any) -> list[str]:
    if not isinstance(value, str):
        return [f"value {value!r} for '{var}' expected to be a string"]
    if lo is not None and len(value) < int(lo):
        return [f"'{var}' value {value!r} is too small (length {len(value)}, must be at least {lo})"]
    if hi is not None and len(value) > int(hi):
        return [f"'{var}' value {value!r} is too large (length {len(value)}, must be no more than {hi})"]
    return []


def _number_answer_errors(var: str, qtype: str, value: Any, lo: Any, hi: Any) -> list[str]:
    kinds = (int,) if qtype == "integer" else (float, int)
    if type(value) not in kinds:  # AWX compares type() exactly: True is no integer
        return [f"value {value!r} for '{var}' expected to be {'an integer' if qtype == 'integer' else 'a float'}"]
    if lo is not None and value < lo:
        return [f"'{var}' value {value} is too small (must be at least {lo})"]
    if hi is not None and value > hi:
        return [f"'{var}' value {value} is too large (must be no more than {hi})"]
    return []


def _choice_answer_errors(var: str, qtype: str, value: Any, choices: list) -> list[str]:
    if qtype == "multiselect":
        if not isinstance(value, list):
            return [f"'{var}' value is expected to be a list"]
        return [f"value {v!r} for '{var}' expected to be one of {choices}" for v in value if v not in choices]
    if qtype == "multiplechoice" and value not in choices:
        return [f"value {value!r} for '{var}' expected to be one of {choices}"]
    return []


def launch_extra_vars(template: dict, answers: dict) -> tuple[dict, dict, list[str]]:
    """AWX's launch: (trusted template extra_vars, survey vars, errors).

    Survey vars are the answers, plus each default that passes its own question's check (AWX drops a
    default that fails it without a word). Answers to variables the survey does not ask are ignored,
    as AWX does for a template that does not prompt for variables.
    """
    survey = template.get("survey") or []
    errors: list[str] = []
    values: dict = {}
    asked = {q["variable"] for q in survey}
    for q in survey:
        var = q["variable"]
        if var in answers:
            errs = answer_errors(q, answers)
            errors.extend(errs)
            if not errs:
                values[var] = answers[var]
        elif q.get("default") is not None and not answer_errors(q, {var: q["default"]}):
            values[var] = q["default"]
        elif q.get("required"):
            errors.append(f"'{var}' value missing")
    if template.get("ask_variables_on_launch"):
        values.update({k: v for k, v in answers.items() if k not in asked})
    return dict(template.get("extra_vars") or {}), values, errors


# ---------------------------------------------------------------------------------------------
# Private data dir
# ---------------------------------------------------------------------------------------------


class _Unsafe(str):
    """A string AWX writes with the !unsafe tag (launch-time values: never templated)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Unsafe, lambda d, v: d.represent_scalar("!unsafe", str(v)))


def _unsafe(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value)
    if isinstance(value, list):
        return [_unsafe(v) for v in value]
    if isinstance(value, dict):
        return {k: _unsafe(v) for k, v in value.items()}
    return value


class _TemplatesLoader(yaml.SafeLoader):
    """YAML as Ansible reads awx/templates.yml: a value tagged !unsafe is a plain string (never rendered)."""


_TemplatesLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load_templates(path: pathlib.Path = TEMPLATES) -> dict:
    return yaml.load(path.read_text(encoding="utf-8"), Loader=_TemplatesLoader)  # a SafeLoader subclass


def job_template(name: str, data: dict | None = None) -> dict:
    data = data if data is not None else load_templates()
    for template in data["specdec_awx_job_templates"]:
        if template["name"] == name:
            return template
    raise KeyError(f"no job template named {name!r} in awx/templates.yml")


def copy_project(dest: pathlib.Path, repo: pathlib.Path = REPO) -> None:
    """The project as AWX checks it out: the repository's files (tracked and untracked, not ignored)."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout.split(b"\0")
    for raw in names:
        if not raw:
            continue
        rel = raw.decode()
        src = repo / rel
        if not os.path.lexists(src):
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)


def _to_yaml_inventory(listing: dict) -> dict:
    """`ansible-inventory --list --export` output as a YAML inventory (what AWX imported from the source)."""
    hostvars = listing.get("_meta", {}).get("hostvars", {})

    def group(name: str, seen: tuple = ()) -> dict:
        data = listing.get(name, {})
        out: dict = {}
        if data.get("hosts"):
            out["hosts"] = {h: dict(hostvars.get(h, {})) for h in data["hosts"]}
        if data.get("vars"):
            out["vars"] = data["vars"]
        children = [c for c in data.get("children", []) if c not in seen]
        if children:
            out["children"] = {c: group(c, (*seen, name)) for c in children}
        return out

    return {"all": group("all")}


def inventory_from_source(source: pathlib.Path, host_vars: dict | None = None, cwd: pathlib.Path = REPO) -> dict:
    """The inventory AWX holds after syncing an SCM source, plus host variables edited in AWX."""
    listing = json.loads(
        subprocess.run(
            ["ansible-inventory", "-i", str(source), "--list", "--export"],
            cwd=cwd,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    inventory = _to_yaml_inventory(listing)
    for host, extra in (host_vars or {}).items():
        if not _set_host_vars(inventory["all"], host, extra):
            raise KeyError(f"host {host!r} is not in the inventory {source}")
    return inventory


def _set_host_vars(group: dict, host: str, extra: dict) -> bool:
    found = False
    if host in group.get("hosts", {}):
        group["hosts"][host] = {**(group["hosts"][host] or {}), **extra}
        found = True
    for child in group.get("children", {}).values():
        found = _set_host_vars(child, host, extra) or found
    return found


def cmdline_args(template: dict, launch: dict) -> list[str]:
    """AWX's ansible-playbook arguments for a job: limit, verbosity, forks, job type (check)."""
    limit = template.get("limit", "")
    if template.get("ask_limit_on_launch") and "limit" in launch:
        limit = launch["limit"]
    job_type = template.get("job_type", "run")
    if template.get("ask_job_type_on_launch") and "job_type" in launch:
        job_type = launch["job_type"]
    args = []
    if limit:
        args += ["--limit", limit]
    if int(template.get("verbosity", 0)):
        args.append("-" + "v" * int(template["verbosity"]))
    if int(template.get("forks", 0)):
        args += ["--forks", str(int(template["forks"]))]
    if job_type == "check":
        args.append("--check")
    return args


@dataclass
class PrivateDataDir:
    path: pathlib.Path
    playbook: str
    extra_vars: dict
    cmdline: list[str]
    errors: list[str] = field(default_factory=list)


def build_private_data_dir(
    path: pathlib.Path,
    template: dict,
    *,
    answers: dict | None = None,
    launch: dict | None = None,
    envvars: dict | None = None,
    host_vars: dict | None = None,
    inventory_source: pathlib.Path | None = None,
    job_timeout: int = 0,
    job_id: int = 1,
    workflow: dict | None = None,
    project: pathlib.Path | None = None,
    repo: pathlib.Path = REPO,
) -> PrivateDataDir:
    """Write the private data dir AWX would write for this template, survey answers and launch prompts.

    ``envvars`` is the environment the job's credentials inject (env/envvars); ``host_vars`` are host
    variables set on the AWX inventory; ``launch`` holds the prompted ``limit`` / ``job_type``.
    ``workflow`` (``{"id": ..., "name": ..., "artifacts": {...}}``) launches the job as a workflow node:
    the artifacts of the nodes before it become extra vars, with AWX's workflow variables.
    ``project`` is a project checkout to use (a snapshot made with :func:`copy_project`) instead of
    copying this repository's working tree for each job.
    Survey errors are returned, as AWX returns them, and nothing is written then.
    """
    path = pathlib.Path(path)
    answers = dict(answers or {})
    launch = dict(launch or {})
    trusted, survey_vars, errors = launch_extra_vars(template, answers)
    args = cmdline_args(template, launch)
    pdd = PrivateDataDir(path, template["playbook"], {**trusted, **survey_vars}, args, errors)
    if errors:
        return pdd
    (path / "env").mkdir(parents=True, exist_ok=True)
    (path / "inventory").mkdir(exist_ok=True)
    if project is not None:
        shutil.copytree(project, path / "project", symlinks=True)
    else:
        copy_project(path / "project", repo)
    checkout = path / "project"
    inventory = inventory_from_source(inventory_source or checkout / "inventory" / "hosts.yml", host_vars, cwd=checkout)
    (path / "inventory" / "hosts").write_text(yaml.safe_dump(inventory, sort_keys=False), encoding="utf-8")
    meta = {
        "awx_job_id": job_id,
        "awx_job_template_name": template["name"],
        "awx_job_launch_type": "workflow" if workflow else "manual",
    }
    if workflow:
        meta.update(awx_workflow_job_id=workflow["id"], awx_workflow_job_name=workflow["name"])
        survey_vars = {**workflow.get("artifacts", {}), **survey_vars}
        pdd.extra_vars = {**trusted, **survey_vars}
    extravars = {**trusted, **_unsafe(survey_vars), **meta}
    (path / "env" / "extravars").write_text(yaml.dump(extravars, Dumper=_Dumper, sort_keys=False), encoding="utf-8")
    settings = {"job_timeout": int(job_timeout), "suppress_ansible_output": True, "pexpect_timeout": 5}
    (path / "env" / "settings").write_text(yaml.safe_dump(settings), encoding="utf-8")
    env = {
        "ANSIBLE_FORCE_COLOR": "False",
        "ANSIBLE_HOST_KEY_CHECKING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "True",
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_PARAMIKO_RECORD_HOST_KEYS": "False",
        "AWX_PRIVATE_DATA_DIR": str(path),
        **{k: str(v) for k, v in (envvars or {}).items()},
    }
    (path / "env" / "envvars").write_text(yaml.safe_dump(env), encoding="utf-8")
    (path / "env" / "cmdline").write_text(shlex.join(args), encoding="utf-8")
    return pdd


# ---------------------------------------------------------------------------------------------
# Running the job
# ---------------------------------------------------------------------------------------------


@dataclass
class JobResult:
    status: str
    rc: int
    artifacts: dict
    events: list[dict]
    stdout: str
    private_data_dir: pathlib.Path

    def failed_results(self) -> list[dict]:
        """The ``res`` of every failed task event (what AWX shows for a failed task)."""
        return [e["event_data"].get("res", {}) for e in self.events if e.get("event") == "runner_on_failed"]


def stats_artifacts(events: list[dict]) -> dict:
    """The job's artifacts: set_stats data, carried by the playbook_on_stats event (AWX reads it there)."""
    for event in reversed(events):
        if event.get("event") == "playbook_on_stats":
            return event.get("event_data", {}).get("artifact_data") or {}
    return {}


def run_job(
    pdd: PrivateDataDir,
    event_handler: Callable[[dict], Any] | None = None,
    cancel_callback: Callable[[], bool] | None = None,
    container: dict | None = None,
) -> JobResult:
    """Run the job with ansible-runner's Python API, in the project dir, as AWX's worker does.

    ``container`` runs it inside an execution environment image, as AWX does, through
    ansible-runner's process isolation with podman: ``{"image": ..., "volume_mounts": [...],
    "options": [...]}``.
    """
    import ansible_runner  # noqa: PLC0415 - only the runner half of this module needs it

    if pdd.errors:
        raise ValueError("the launch was refused: " + "; ".join(pdd.errors))
    isolation = {}
    if container:
        isolation = {
            "process_isolation": True,
            "process_isolation_executable": "podman",
            "container_image": container["image"],
            "container_volume_mounts": list(container.get("volume_mounts", [])),
            "container_options": list(container.get("options", [])),
        }
    elif shutil.which("ansible-playbook") is None:
        raise RuntimeError("ansible-playbook is not on PATH (put the controller venv's bin/ first)")
    events: list[dict] = []

    def on_event(event: dict) -> bool:
        events.append(event)
        if event_handler is not None:
            event_handler(event)
        return True

    runner = ansible_runner.run(
        private_data_dir=str(pdd.path),
        project_dir=str(pdd.path / "project"),
        playbook=pdd.playbook,
        inventory=str(pdd.path / "inventory" / "hosts"),
        event_handler=on_event,
        cancel_callback=cancel_callback or (lambda: False),
        quiet=True,
        **isolation,
    )
    stdout = runner.stdout.read() if runner.stdout else ""
    return JobResult(runner.status, runner.rc, stats_artifacts(events), events, stdout, pdd.path)


def _parse_answer(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return key, yaml.safe_load(value) if value else ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("template", help="job template name in awx/templates.yml")
    parser.add_argument("-a", "--answer", action="append", default=[], help="survey answer VAR=VALUE (YAML value)")
    parser.add_argument("--limit", default=None)
    parser.add_argument("--check", action="store_true", help="job type check")
    parser.add_argument("--env", action="append", default=[], help="credential environment NAME=VALUE")
    parser.add_argument("--dir", default=None, help="private data dir (default: a new one under /tmp)")
    args = parser.parse_args(argv)
    template = job_template(args.template)
    launch = {k: v for k, v in (("limit", args.limit), ("job_type", "check" if args.check else None)) if v}
    import tempfile  # noqa: PLC0415

    path = pathlib.Path(args.dir or tempfile.mkdtemp(prefix="awx-job-"))
    pdd = build_private_data_dir(
        path,
        template,
        answers=dict(_parse_answer(a) for a in args.answer),
        launch=launch,
        envvars=dict(e.split("=", 1) for e in args.env),
    )
    if pdd.errors:
        print("launch refused:\n  " + "\n  ".join(pdd.errors), file=sys.stderr)
        return 2
    result = run_job(pdd, event_handler=lambda e: print(e.get("stdout", "")) if e.get("stdout") else None)
    print(json.dumps({"status": result.status, "rc": result.rc, "artifacts": result.artifacts}, indent=2))
    return 0 if result.status == "successful" else 1


if __name__ == "__main__":
    sys.exit(main())
