# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Probe a release venv with its own Python: versions, imports, torch CUDA, GPU sanity.

The programs that run inside the venv live in venv_probe.py (stdlib only), run as
``<venv>/bin/python -c <its source> JSON``; they print one JSON document between marker lines so
that warnings printed by imported packages cannot corrupt the result. Result parsing and failure
classification here are pure. The venv's Python is run through the caller's ``run_command`` (in a
module ``command_runner(module)``, i.e. ``AnsibleModule.run_command``), bounded by coreutils ``timeout``.
"""

from __future__ import annotations

import json
import os
import re
import time

from ansible_collections.specdec.sglang.plugins.module_utils._host.host_program import source_of
from ansible_collections.specdec.sglang.plugins.module_utils._runtime import venv_probe

# The program run inside the venv is venv_probe.py, a real module; this is its source text.
PROBE_PROGRAM = source_of(venv_probe)
BEGIN, END = venv_probe.BEGIN, venv_probe.END

_UNDEFINED_SYMBOL = re.compile(r"(?:(?P<lib>/?[^\s:]+\.so[^\s:]*):\s*)?undefined symbol:\s*(?P<symbol>\S+)")


class ProbeError(RuntimeError):
    """The probe did not produce a result (interpreter missing, crash, timeout)."""


def parse_probe_output(stdout: str) -> dict:
    """The JSON document between the marker lines."""
    text = stdout or ""
    start = text.rfind(BEGIN)
    end = text.rfind(END)
    if start < 0 or end < start:
        raise ProbeError("probe printed no result (markers missing)")
    try:
        return json.loads(text[start + len(BEGIN) : end].strip())
    except ValueError as exc:
        raise ProbeError(f"probe result is not JSON: {exc}") from exc


def classify_import_error(error: str | None, error_type: str | None = None) -> dict:
    """``undefined symbol`` -> abi_mismatch (with symbol and library); missing module -> not_installed."""
    text = error or ""
    match = _UNDEFINED_SYMBOL.search(text)
    if match:
        return {
            "class": "abi_mismatch",
            "symbol": match.group("symbol"),
            "library": match.group("lib"),
            "hint": "the extension was built against another torch: install the kernel build that matches"
            " the manifest's torch (same version and CUDA local tag)",
        }
    if error_type == "ModuleNotFoundError" or "No module named" in text:
        return {"class": "not_installed", "symbol": None, "library": None, "hint": "package missing from the venv"}
    return {"class": "import_error", "symbol": None, "library": None, "hint": "import failed; see error"}


def annotate_imports(probe: dict) -> dict:
    """Add the classification to every failed import of a parsed probe result."""
    for result in (probe.get("imports") or {}).values():
        if not result.get("ok"):
            result.update(classify_import_error(result.get("error"), result.get("error_type")))
    return probe


# (text in the error, class) for a check that reported a failure, first match wins.
_CUDA_ERROR_CLASSES = (
    ("out of memory", "cuda_oom"),
    ("is_available() is false", "cuda_unavailable"),
    ("no cuda", "cuda_unavailable"),
    ("no kernel image", "cuda_unavailable"),
)


def classify_cuda_check(result: dict | None, rc: int | None, stderr: str = "", timed_out: bool = False) -> str:
    """``ok``, ``cuda_hang``, ``cuda_unavailable``, ``cuda_oom``, ``cuda_error``, ``wrong_result``, ``import_error``,
    ``abi_mismatch``, ``probe_crashed``."""
    if timed_out:
        return "cuda_hang"
    if result is None:
        return _classify_crash(stderr)
    if result.get("ok"):
        return "ok"
    error = (result.get("error") or "").lower()
    stage = result.get("stage")
    if stage == "import":
        return "abi_mismatch" if "undefined symbol" in error else "import_error"
    klass = next((name for text, name in _CUDA_ERROR_CLASSES if text in error), None)
    if klass is None:
        klass = "wrong_result" if stage == "compare" else "cuda_error"
    return klass


def _classify_crash(stderr: str) -> str:
    """A check that printed no result: what its stderr says."""
    text = (stderr or "").lower()
    if "out of memory" in text:
        return "cuda_oom"
    return "cuda_error" if "cuda" in text else "probe_crashed"


# coreutils ``timeout``: 124 the command ran out of time (TERM), 137 it was KILLed after --kill-after;
# 126 / 127 the command could not be run / found.
TIMED_OUT_EXIT = (124, 137)
CANNOT_RUN_EXIT = (126, 127)
KILL_AFTER_S = 5


def command_runner(module):
    """``run_command(argv, environ_update)`` over ``module.run_command`` (no ``~`` / ``$VAR`` expansion:
    the program source travels on the command line)."""

    def run_command(argv, environ_update):
        return module.run_command(argv, environ_update=environ_update, expand_user_and_vars=False)

    return run_command


def run_python(
    python: str, source: str, arg: dict, *, run_command, env: dict | None = None, timeout_s: float = 120
) -> dict:
    """Run ``python -c source json(arg)`` for at most ``timeout_s`` s: {rc, stdout, stderr, timed_out, elapsed_s}.

    ``run_command(argv, environ_update) -> (rc, stdout, stderr)`` (``command_runner(module)``); the bound
    is coreutils ``timeout`` around the interpreter (TERM to its process group, KILL ``KILL_AFTER_S`` later).
    """
    update = dict(env or {})
    if "PYTHONDONTWRITEBYTECODE" not in os.environ:
        update.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    argv = ["timeout", f"--kill-after={KILL_AFTER_S}", f"{timeout_s}", python, "-c", source, json.dumps(arg)]
    started = time.monotonic()
    try:
        rc, out, err = run_command(argv, update)
    except OSError as exc:
        return {"rc": None, "stdout": "", "stderr": str(exc), "timed_out": False, "elapsed_s": 0.0, "os_error": True}
    elapsed = round(time.monotonic() - started, 3)
    if rc in TIMED_OUT_EXIT:
        return {"rc": None, "stdout": _text(out), "stderr": _text(err), "timed_out": True, "elapsed_s": elapsed}
    if rc in CANNOT_RUN_EXIT:
        return {
            "rc": None,
            "stdout": "",
            "stderr": _text(err),
            "timed_out": False,
            "elapsed_s": elapsed,
            "os_error": True,
        }
    return {"rc": rc, "stdout": out, "stderr": err, "timed_out": False, "elapsed_s": elapsed}


def _text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def probe_venv(
    python: str, manifest: list[dict], timeout_s: float = 120, *, run_command, env: dict | None = None
) -> dict:
    """Versions and imports of the manifest packages, as seen by the venv's own Python."""
    spec = {"program": "packages", "packages": [{"name": e["name"], "import": e.get("import") or ""} for e in manifest]}
    done = run_python(python, PROBE_PROGRAM, spec, env=env, timeout_s=timeout_s, run_command=run_command)
    if done.get("os_error"):
        raise ProbeError(f"cannot run {python}: {done['stderr']}")
    if done["timed_out"]:
        raise ProbeError(f"probe did not finish within {timeout_s} s")
    try:
        probe = parse_probe_output(done["stdout"])
    except ProbeError as exc:
        tail = (done["stderr"] or "").strip().splitlines()[-5:]
        raise ProbeError(f"{exc}; rc={done['rc']}; stderr: {' | '.join(tail)}") from exc
    return annotate_imports(probe)


def cuda_check(
    python: str,
    gpu_uuids: list[str],
    *,
    run_command,
    timeout_s: float = 120,
    size: int = 512,
    tolerance: float = 1e-2,
) -> list[dict]:
    """Run the matmul check once per GPU, each in its own process seeing only that GPU."""
    results = []
    for uuid in gpu_uuids:
        done = run_python(
            python,
            PROBE_PROGRAM,
            {"program": "cuda", "size": size, "tolerance": tolerance},
            env={"CUDA_VISIBLE_DEVICES": uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"},
            timeout_s=timeout_s,
            run_command=run_command,
        )
        try:
            parsed = parse_probe_output(done["stdout"])
        except ProbeError:
            parsed = None
        klass = classify_cuda_check(parsed, done["rc"], done["stderr"], done["timed_out"])
        error = (parsed or {}).get("error")
        if klass == "cuda_hang":
            error = f"no answer within {timeout_s} s (GPU hung or wedged)"
        elif parsed is None:
            error = " | ".join((done["stderr"] or "").strip().splitlines()[-5:]) or f"rc={done['rc']}"
        results.append(
            {
                "uuid": uuid,
                "ok": klass == "ok",
                "class": klass,
                "device_name": (parsed or {}).get("device_name"),
                "max_abs_diff": (parsed or {}).get("max_abs_diff"),
                "elapsed_s": done["elapsed_s"],
                "error": error,
            }
        )
    return results
