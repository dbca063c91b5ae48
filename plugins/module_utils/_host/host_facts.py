# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a host is, read once: everything the deploy plan needs from a host, in one pass, read-only.

``read_host`` returns one dict (the host facts; ``module sglang_host_facts`` returns it as
``facts``); ``deploy_plan.plan`` turns the inputs and these facts into every decision of the deploy.
Nothing here decides: a value that needs a rule (is this Python the configured one, is the disk free
enough, does the port holder belong to the service) is read here and judged in the plan.

The readers are the existing ones of each subsystem: nvidia-smi (``nvidia_smi.collect`` / ``gather``,
compute capability included), the reference venv (``runtime_coherence.read_reference_venv``), the port's
holder (``port_owner.port_check``), the unit (``unit_state.read_unit_state``), the release record
(``release.read_record``) and the release layout (``release``'s path functions). Side effects are
injected (``HostIO``), so a unit test passes a fake.

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import json
import os
import posixpath

from ansible_collections.specdec.sglang.plugins.module_utils._gpu import nvidia_smi
from ansible_collections.specdec.sglang.plugins.module_utils._host import port_owner
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import unit_state
from ansible_collections.specdec.sglang.plugins.module_utils._release import release
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_coherence import read_reference_venv

PYTHON_VERSION_CODE = "import sys; print('%d.%d.%d' % sys.version_info[:3])"
CONFIG_NAME = "config.json"


class HostIO:
    """The host's side: files, commands, statvfs (replaced by a fake in unit tests)."""

    def __init__(self, run_command):
        # run_command(argv) -> (rc, stdout, stderr); raises nothing for a missing program.
        self.run_command = run_command

    def read(self, path):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def exists(self, path):
        return os.path.exists(path)

    def readlink(self, path):
        try:
            return os.readlink(path)
        except OSError:
            return ""

    def listdir(self, path):
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def statvfs(self, path):
        return os.statvfs(path)

    def nvidia_smi(self, binary, timeout_s):
        return nvidia_smi.collect(binary, timeout_s, run_command=self.run_command)

    def reference_venv(self, venv, names):
        return read_reference_venv(venv, names)

    def port(self, port, main_pid):
        return port_owner.port_check(port, main_pid)


def read_python(argv0: str, io) -> dict:
    """``{argv0, found, version, error}``: the Python the release venv is made from."""
    try:
        rc, out, err = io.run_command([argv0, "-c", PYTHON_VERSION_CODE])
    except OSError as exc:
        return {"argv0": argv0, "found": False, "version": "", "error": str(exc)}
    if rc != 0:
        return {"argv0": argv0, "found": False, "version": "", "error": (err or out or "").strip()[:300]}
    return {"argv0": argv0, "found": True, "version": (out or "").strip(), "error": ""}


def read_model(path: str, io) -> dict:
    """``{path, config_path, exists, config, error}``: a model directory's config.json, parsed."""
    config_path = posixpath.join(path, CONFIG_NAME)
    text = io.read(config_path)
    if text is None:
        return {"path": path, "config_path": config_path, "exists": False, "config": None, "error": "not found"}
    try:
        config = json.loads(text)
    except ValueError as exc:
        return {"path": path, "config_path": config_path, "exists": True, "config": None, "error": f"not JSON ({exc})"}
    if not isinstance(config, dict):
        return {"path": path, "config_path": config_path, "exists": True, "config": None, "error": "no JSON object"}
    return {"path": path, "config_path": config_path, "exists": True, "config": config, "error": ""}


def read_disk(path: str, io) -> dict:
    """``{path, measured_at, free_kib}``: the space free to unprivileged users (``df -Pk``'s Available)
    at the nearest existing parent of ``path``."""
    measured = path or "/"
    while not io.exists(measured) and measured not in ("/", ""):
        measured = posixpath.dirname(measured.rstrip("/")) or "/"
    stat = io.statvfs(measured)
    return {"path": path, "measured_at": measured, "free_kib": stat.f_bavail * stat.f_frsize // 1024}


def read_releases(paths: dict, io) -> dict:
    """The release layout of the plan's ``paths`` (root, current, state): ``{current, releases: {id: complete},
    record, record_error}``."""
    root = paths["root"]
    releases = {name: io.exists(release.complete_marker(root, name)) for name in io.listdir(release.releases_dir(root))}
    record_path = posixpath.join(paths["state"], release.RECORD_NAME)
    record, error = None, ""
    try:
        record = release.read_record(io.read(record_path), record_path)
    except release.RecordError as exc:
        error = str(exc)
    return {
        "current": posixpath.basename(io.readlink(paths["current"]).rstrip("/")),
        "releases": releases,
        "record": record,
        "record_error": error,
    }


def read_unit(unit: str, io) -> dict:
    """The running invocation of ``unit`` (``unit_state``'s fields), or ``{name, error}`` without systemd."""
    try:
        return unit_state.read_unit_state(unit, io.run_command).as_dict()
    except (RuntimeError, OSError) as exc:
        return {"name": unit, "main_pid": 0, "active_state": "", "invocation_id": "", "error": str(exc)}


def read_ports(ports, running: dict, io):
    """Each service port's holder (``port_owner.port_check``) with the unit that may hold it (its main process
    is the service's own); ``None`` when no port is read."""
    if not ports:
        return None
    read = []
    for entry in ports:
        unit = str(entry.get("unit") or "")
        owner = running if unit and unit == running.get("name") else (read_unit(unit, io) if unit else {})
        read.append(dict(io.port(int(entry["port"]), int(owner.get("main_pid") or 0)), unit=unit))
    return read


def read_gpus(p: dict, io) -> dict:
    """nvidia-smi's facts with each GPU's health (``nvidia_smi.gather``), or ``{read: false}`` when off."""
    if not p.get("gpu_checks"):
        return {"read": False, "gpus": [], "host_errors": [], "unsupported_fields": []}
    calls = io.nvidia_smi(p.get("nvidia_smi") or "nvidia-smi", p.get("nvidia_smi_timeout_s") or 60)
    if calls["query"] is None and calls["xml"] is None:
        result = {"gpus": [], "driver_version": None, "driver_cuda_version": None, "attached_gpus": 0}
        result["host_errors"] = list(calls["host_errors"])
    else:
        result = nvidia_smi.gather(
            calls["query"],
            calls["xml"],
            calls["apps"],
            stderr_text=calls["stderr"],
            allow_busy=bool(p.get("allow_busy")),
            busy_memory_mb=int(p.get("busy_memory_mb") or 1024),
            min_free_mb=int(p.get("min_free_memory_mb") or 0) or None,
        )
        result["host_errors"] = calls["host_errors"] + result["host_errors"]
    result.update(read=True, commands=calls["commands"], unsupported_fields=calls.get("unsupported_fields", []))
    return result


def read_host(p: dict, io) -> dict:
    """Every fact the plan needs from this host, read once. ``p`` holds the module's parameters; ``p['paths']``
    is the plan's ``paths`` (the one owner of every path: root, current, state, disk_check)."""
    paths = p.get("paths") or {}
    unit = p.get("unit") or ""
    running = read_unit(unit, io) if unit else {"name": "", "main_pid": 0, "active_state": "", "invocation_id": ""}
    venv = p.get("reference_venv") or ""
    return {
        "python": read_python(p.get("python") or "python3", io),
        "gpus": read_gpus(p, io),
        "models": {name: read_model(path, io) for name, path in sorted((p.get("models") or {}).items()) if path},
        "reference_venv": {
            "venv": venv,
            "python_exists": bool(venv) and io.exists(posixpath.join(venv, "bin", "python")),
            "report": io.reference_venv(venv, p.get("reference_venv_names") or []) if venv else None,
        },
        "unit": running,
        "ports": read_ports(p.get("ports"), running, io),
        "disk": read_disk(paths.get("disk_check") or "/", io),
        "release": read_releases(paths, io) if paths.get("root") else None,
        "files": {path: io.exists(path) for path in p.get("files") or []},
    }
