# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The deploy plan: every decision the deploy takes before touching a host, taken once.

``build_plan`` is pure: the controller's side effects (reading a wheel's METADATA, an index's
metadata) are injected, and the data files (known runtimes, patch set manifests) are passed in
parsed. The action ``specdec.sglang.deploy_plan`` calls it once in the validation play; the roles
read the plan it returns (``sglang_deploy_plan``) and build it themselves when used alone.

What it decides:

- the runtime: the sglang version and where its requirements were read (its wheel, the index,
  the recorded metadata of a known runtime), the manifest checked against them and against each
  compiled package's own pins (``runtime_coherence``);
- the manifest itself: the known runtime of the chosen sglang version decides the compiled core
  (``derive_manifest``: torch, triton, sglang-kernel, flashinfer at the versions
  ``known_runtimes.yml`` records, from the sources ``sglang_runtime_core_sources`` names); entries
  of ``sglang_runtime_manifest`` win by name and are checked the same way;
- the patch sets, by capability: each ``patchset.yml`` declares ``sglang_version`` and
  ``serves`` (dimension -> allowed values; a missing dimension serves any value, an empty list
  serves none; ``serves: every_request`` is a set every request of its sglang version takes, besides the
  set its algorithm needs); a request no set serves is refused naming every set and what it serves. What only
  the host knows (the target's architecture, ``model_config.architecture_of``) is left in
  ``plan['target_checks']`` for preflight (``check_target``);
- the paths (``paths``), with the release directory derived in one function (``release.release_dir``).
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath

from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_selection import find_gpu, select_gpus
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import assess_host
from ansible_collections.specdec.sglang.plugins.module_utils._host import port_owner
from ansible_collections.specdec.sglang.plugins.module_utils._host.disk_space import disk_free_verdict
from ansible_collections.specdec.sglang.plugins.module_utils._patchset.patchset import EVERY_REQUEST
from ansible_collections.specdec.sglang.plugins.module_utils._plan import validation_rules
from ansible_collections.specdec.sglang.plugins.module_utils._plan.model_config import (
    architecture_of,
    architecture_reasons,
)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.replica_plan import plan_replicas, replica_list
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import failure_classifier
from ansible_collections.specdec.sglang.plugins.module_utils._release.release import (
    build_decision,
    current_link,
    last_good_dir,
    release_dir,
    releases_dir,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime import runtime_coherence
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.requirements import (
    RequirementError,
    metadata_requires,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import (
    SOURCES,
    check_controller_inputs,
    normalize_name,
    validate_manifest,
)

# Algorithms sglang itself ships: no patch set is needed to serve them.
BUILTIN_ALGORITHMS = ("DFLASH",)
# Request dimensions and the variable that sets each (the messages name the variable).
DIMENSION_VARIABLES = {
    "algorithms": "sglang_service_speculative_algorithm",
    "architectures": "the target's config.json (sglang_service_model_path)",
    "attention_backends": "sglang_service_attention_backend",
}
KNOWN_RUNTIMES_FILE = "roles/sglang_runtime/files/known_runtimes.yml"
# Each input of the plan and the variable that sets it, with the value the plan takes when the variable is not
# set (its role is not loaded: the check it feeds is then not made). The action reads them from the play; a task
# may pass an input itself. The one place where the plan's inputs are named.
INPUT_VARIABLES = {
    "sglang": ("sglang_runtime_sglang", {}),
    "manifest": ("sglang_runtime_manifest", []),
    "core_sources": ("sglang_runtime_core_sources", {}),
    "python_version": ("sglang_runtime_python_version", ""),
    "python_interpreter": ("sglang_runtime_python_interpreter", ""),
    "python_downloads": ("sglang_runtime_python_downloads", False),
    "cuda_version": ("sglang_runtime_cuda_version", ""),
    "index_url": ("sglang_runtime_index_url", ""),
    "ca_bundle": ("sglang_runtime_ca_bundle", ""),
    "uv_version": ("sglang_runtime_uv_version", ""),
    "reference_venv": ("sglang_runtime_reference_venv", ""),
    "extra_wheels": ("sglang_runtime_extra_wheels", []),
    "runtime_root": ("sglang_runtime_root", ""),
    "algorithm": ("sglang_service_speculative_algorithm", ""),
    "attention_backend": ("sglang_service_attention_backend", ""),
    "unit_name": ("sglang_service_unit_name", ""),
    "config_dir": ("sglang_service_config_dir", ""),
    "cache_dir": ("sglang_service_cache_dir", ""),
    "tp_size": ("sglang_service_tp_size", 0),
    "patch_sets": ("sglang_deploy_patch_sets", None),
    "disk_path": ("sglang_preflight_disk_path", ""),
    "min_free_disk_gb": ("sglang_preflight_min_free_disk_gb", 0),
    "gpu_checks": ("sglang_preflight_gpu_checks", False),
    "gpus": ("sglang_preflight_gpus", []),
    "gpu_count": ("sglang_preflight_gpu_count", 0),
    "excluded_gpus": ("sglang_preflight_excluded_gpus", []),
    "allow_busy": ("sglang_preflight_allow_busy_gpus", False),
    "expected_gpu_count": ("sglang_preflight_expected_gpu_count", 0),
    "expected_gpu_name": ("sglang_preflight_expected_gpu_name", ""),
    "required_cuda_version": ("sglang_preflight_required_cuda_version", ""),
    "port_check": ("sglang_preflight_port_check", False),
    "port": ("sglang_service_port", 0),
    "replicas": ("sglang_service_replicas", []),
    "replica_count": ("sglang_service_replica_count", 0),
    "model_integrity_checks": ("sglang_preflight_model_integrity_checks", False),
    "model_integrity_sha256": ("sglang_preflight_model_integrity_sha256", False),
    "model_manifest_dir": ("sglang_preflight_model_integrity_manifest_dir", ""),
}
BOOLEAN_INPUTS = (
    "python_downloads",
    "gpu_checks",
    "allow_busy",
    "port_check",
    "model_integrity_checks",
    "model_integrity_sha256",
)
# Where a core package derived from a known runtime may come from (a wheelhouse needs a wheel and its sha256).
CORE_SOURCES = tuple(s for s in SOURCES if s != "wheelhouse")


def deferred_inputs(args: dict) -> str:
    """The first plan input whose type its role's validation will refuse ("" when all can be read)."""
    sglang = args.get("sglang")
    if not isinstance(sglang, dict) or not isinstance(sglang.get("version"), str) or not sglang.get("version"):
        return "sglang_runtime_sglang"
    manifest = args.get("manifest")
    if not isinstance(manifest, list) or not all(isinstance(e, dict) for e in manifest):
        return "sglang_runtime_manifest"
    if not isinstance(args.get("core_sources") or {}, dict):
        return "sglang_runtime_core_sources"
    return ""


# --- paths ------------------------------------------------------------------------------------


def service_unit(unit_name: str) -> str:
    """The systemd unit of the service (``<sglang_service_unit_name>.service``), "" without a name."""
    return f"{unit_name}.service" if unit_name else ""


def paths(
    root: str,
    unit_name: str,
    config_dir: str,
    cache_dir: str,
    disk_path: str,
    *,
    uv_version: str = "",
    model_manifests: str = "",
) -> dict:
    """Every path the deploy writes or reads, from the variables that own them (``model_manifests``:
    ``sglang_preflight_model_integrity_manifest_dir``, "" for the default under the root's state)."""
    unit = service_unit(unit_name)
    uv_tool_dir = posixpath.join(root, "tools", f"uv-{uv_version}") if uv_version else ""
    return {
        "root": root,
        "releases": releases_dir(root),
        "current": current_link(root),
        "state": last_good_dir(root),
        "tools": posixpath.join(root, "tools"),
        "model_manifests": model_manifests or posixpath.join(root, "state", "model-manifests"),
        "uv_cache": posixpath.join(root, "cache", "uv"),
        "uv_tool_dir": uv_tool_dir,
        "uv": posixpath.join(uv_tool_dir, "bin", "uv") if uv_tool_dir else "",
        "unit": f"/etc/systemd/system/{unit}" if unit else "",
        "env": posixpath.join(config_dir, f"{unit_name}.env") if unit and config_dir else "",
        "config": posixpath.join(config_dir, f"{unit_name}.yaml") if unit and config_dir else "",
        "cache": cache_dir,
        "disk_check": disk_path or root or "/",
    }


# --- patch sets -------------------------------------------------------------------------------


def patch_set_record(directory: str, manifest: dict) -> dict:
    """A patch set as the plan sees it: name, directory, sglang version, what it serves."""
    manifest = manifest if isinstance(manifest, dict) else {}
    serves = manifest.get("serves")
    return {
        "name": str(manifest.get("name") or os.path.basename(os.path.normpath(directory))),
        "dir": directory,
        "sglang_version": str(manifest.get("sglang_version") or ""),
        "serves": {str(k): [str(v) for v in (values or [])] for k, values in serves.items()}
        if isinstance(serves, dict)
        else {},
        "every_request": serves == EVERY_REQUEST,
    }


def unserved(serves: dict, request: dict) -> list[str]:
    """The dimensions of ``request`` that ``serves`` does not serve, as ``dimension=value`` phrases.

    A dimension missing from ``serves`` serves any value; one missing from ``request`` (not known
    yet, such as the target's architecture before preflight) is not checked here.
    """
    missing = []
    for dimension, allowed in sorted(serves.items()):
        if dimension not in request or request[dimension] is None:
            continue
        if str(request[dimension]) not in allowed:
            missing.append(f"{dimension}={request[dimension] or '(unset)'}")
    return missing


def describe_set(record: dict) -> str:
    serves = record["serves"]
    if record.get("every_request"):
        return f"{record['name']} (sglang {record['sglang_version'] or 'any'}; serves every request)"
    what = "; ".join(f"{k}: {', '.join(v) if v else 'none'}" for k, v in sorted(serves.items())) or "anything"
    return f"{record['name']} (sglang {record['sglang_version'] or 'any'}; serves {what})"


def choose_patch_sets(algorithm: str, sglang_version: str, attention_backend: str, available, explicit=None) -> dict:
    """``{chosen: [records], errors: [...], request: {...}}``.

    ``explicit`` (``sglang_deploy_patch_sets``) are taken as given, but each must be for this sglang
    version and serve the request. Otherwise a builtin algorithm needs no set, and any other
    takes the first set (by name) for this sglang version that serves it.
    """
    request = {"algorithms": algorithm, "attention_backends": attention_backend}
    # sets for every request (serves: every_request) serve no dimension, so they would serve any: not chosen here
    available = sorted((r for r in available or [] if not r.get("every_request")), key=lambda r: r["name"])
    listing = "; ".join(describe_set(r) for r in available) or "none"
    if explicit is not None:
        errors = []
        for record in explicit:
            if record["sglang_version"] and record["sglang_version"] != sglang_version:
                errors.append(
                    f"sglang_deploy_patch_sets: {record['name']} is for sglang {record['sglang_version']},"
                    f" sglang_runtime_sglang.version is {sglang_version}"
                )
            elif algorithm not in BUILTIN_ALGORITHMS:
                errors.extend(_refusal(algorithm, sglang_version, [record], request, "sglang_deploy_patch_sets"))
        return {"chosen": list(explicit), "errors": errors, "request": request}
    if not algorithm or algorithm in BUILTIN_ALGORITHMS:  # "": no service in this play (a role run alone)
        return {"chosen": [], "errors": [], "request": request}
    for_version = [r for r in available if r["sglang_version"] == sglang_version]
    serving = [r for r in for_version if not unserved(r["serves"], request)]
    if serving:
        return {"chosen": serving[:1], "errors": [], "request": request}
    if not for_version:
        return {
            "chosen": [],
            "errors": [
                f"sglang_service_speculative_algorithm={algorithm} needs a patch set for sglang {sglang_version}"
                f" (sglang_runtime_sglang.version) and there is none; patch sets: {listing}"
            ],
            "request": request,
        }
    return {
        "chosen": [],
        "errors": _refusal(algorithm, sglang_version, for_version, request, None, listing=listing),
        "request": request,
    }


def every_request_sets(algorithm: str, sglang_version: str, available, chosen) -> list:
    """The sets declaring ``serves: every_request`` for this sglang version, by name, not already chosen.

    Every request takes them (DFLASH too); no request (``algorithm`` empty: a role run alone without the
    service) takes none.
    """
    if not algorithm:
        return []
    names = {r["name"] for r in chosen}
    return [
        r
        for r in sorted(available or [], key=lambda r: r["name"])
        if r.get("every_request") and r["sglang_version"] == sglang_version and r["name"] not in names
    ]


def _refusal(algorithm, sglang_version, records, request, variable, *, listing=None) -> list[str]:
    reasons = []
    for record in records:
        missing = unserved(record["serves"], request)
        if not missing:
            continue
        named = ", ".join(
            f"{DIMENSION_VARIABLES.get(m.split('=', 1)[0], m.split('=', 1)[0])}={m.split('=', 1)[1]}"
            f" (it serves {', '.join(record['serves'][m.split('=', 1)[0]]) or 'none'})"
            for m in missing
        )
        reasons.append(f"{record['name']} does not serve {named}")
    if not reasons:
        return []
    where = f"{variable}: " if variable else ""
    return [
        f"{where}sglang_service_speculative_algorithm={algorithm} on sglang {sglang_version} with"
        f" sglang_service_attention_backend={request['attention_backends'] or '(unset)'}: no patch set serves it"
        f" ({'; '.join(reasons)}). Patch sets: {listing or '; '.join(describe_set(r) for r in records)}."
        " Use DFLASH, or a runtime and backend a set serves"
    ]


def target_checks(chosen) -> dict:
    """What preflight checks on the host: dimension -> values every chosen set serves (host-only dimensions)."""
    checks = {}
    for record in chosen:
        allowed = record["serves"].get("architectures")
        if allowed is None:
            continue
        previous = checks.get("architectures")
        checks["architectures"] = [a for a in allowed if previous is None or a in previous]
    return checks


def check_target(plan: dict, config: dict, config_path: str = "config.json") -> dict:
    """``{architecture, reasons, error}`` for the target's parsed config.json against the plan."""
    architecture = architecture_of(config)
    reasons = architecture_reasons(config)
    allowed = (plan.get("target_checks") or {}).get("architectures")
    error = ""
    if allowed is not None and architecture not in allowed:
        sets = ", ".join(r["name"] for r in plan.get("patch_sets") or []) or "none"
        error = (
            f"{config_path}: the target is {architecture} ({', '.join(reasons) or 'no hybrid key'}); the patch set(s)"
            f" {sets} chosen for sglang_service_speculative_algorithm={plan.get('request', {}).get('algorithms')}"
            f" serve architectures {', '.join(allowed) or 'none'}. Use DFLASH for this target, or a patch set that"
            f" serves {architecture}"
        )
    return {"architecture": architecture, "reasons": reasons, "error": error}


# --- runtime ----------------------------------------------------------------------------------


def sglang_requirements(sglang: dict, known: dict, read_wheel_metadata, fetch_index_metadata=None, index_url=""):
    """``(requirer or None, error)``: sglang's requirements and where they were read.

    Wheel source: the wheel's METADATA. Index source: the index's metadata when the index serves
    it (``fetch_index_metadata``), else the recorded metadata of the known runtime. Git source: the
    known runtime's record.
    """
    version = str(sglang.get("version") or "")
    source = sglang.get("source")
    if source == "wheel" and sglang.get("wheel"):
        wheel = str(sglang["wheel"])
        try:
            text = read_wheel_metadata(wheel)
        except (OSError, ValueError) as exc:
            return None, f"sglang_runtime_sglang.wheel={wheel}: cannot read its METADATA ({exc})"
        return runtime_coherence.requirer(
            "sglang", version, metadata_requires(text), f"Requires-Dist of {os.path.basename(wheel)}"
        ), ""
    if source == "index" and fetch_index_metadata is not None and index_url:
        found = fetch_index_metadata(index_url, "sglang", version)
        if found:
            text, where = found
            return runtime_coherence.requirer(
                "sglang", version, metadata_requires(text), f"Requires-Dist from {where}"
            ), ""
    runtime = (known.get("runtimes") or {}).get(version)
    if runtime is None:
        return None, (
            f"sglang_runtime_sglang.version={version}: not a known runtime ({KNOWN_RUNTIMES_FILE} knows"
            f" {', '.join(sorted(known.get('runtimes') or {}))}) and its requirements cannot be read"
            f" (source {source}); use source: wheel with the wheel on the controller, an index that serves"
            " metadata (sglang_runtime_index_url), or a known version"
        )
    return runtime_coherence.requirer(
        "sglang",
        version,
        runtime.get("requires") or [],
        f"recorded Requires-Dist of sglang {version} in {KNOWN_RUNTIMES_FILE}",
    ), ""


def package_requirers(manifest, known: dict, read_wheel_metadata) -> tuple[list, list]:
    """Requirers among the manifest's own packages: a wheelhouse wheel's METADATA, else a known pin."""
    requirers, errors = [], []
    pins = known.get("packages") or {}
    for position, entry in enumerate(manifest or []):
        if not isinstance(entry, dict) or not entry.get("name"):
            continue
        name, version = str(entry["name"]), str(entry.get("version") or "")
        if entry.get("source") == "wheelhouse" and entry.get("wheel") and os.path.isfile(str(entry["wheel"])):
            try:
                lines = metadata_requires(read_wheel_metadata(str(entry["wheel"])))
            except (OSError, ValueError) as exc:
                errors.append(f"sglang_runtime_manifest[{position}] ({name}): cannot read the wheel's METADATA ({exc})")
                continue
            requirers.append(
                runtime_coherence.requirer(
                    name, version, lines, f"Requires-Dist of {os.path.basename(str(entry['wheel']))}"
                )
            )
        known_pin = ((pins.get(runtime_coherence.normalize_name(name)) or pins.get(name) or {}).get(version)) or {}
        if known_pin.get("requires") and known_pin.get("from") == "description":
            requirers.append(
                runtime_coherence.requirer(
                    name, version, known_pin["requires"], f"its build's stated pin, {KNOWN_RUNTIMES_FILE}"
                )
            )
        elif known_pin.get("requires") and entry.get("source") != "wheelhouse":
            requirers.append(
                runtime_coherence.requirer(
                    name, version, known_pin["requires"], f"recorded Requires-Dist in {KNOWN_RUNTIMES_FILE}"
                )
            )
    return requirers, errors


def check_runtime(
    sglang, manifest, python_version, known, read_wheel_metadata, *, fetch_index_metadata=None, index_url=""
) -> dict:
    """``{errors, overridden, requires_source, runtime}`` for the manifest against its requirers."""
    errors = []
    sglang_req, error = sglang_requirements(sglang, known, read_wheel_metadata, fetch_index_metadata, index_url)
    if error:
        errors.append(error)
    requirers, package_errors = package_requirers(manifest, known, read_wheel_metadata)
    errors.extend(package_errors)
    if sglang_req is not None:
        requirers.insert(0, sglang_req)
    try:
        found = runtime_coherence.conflicts(manifest, requirers, runtime_coherence.environment(python_version))
    except RequirementError as exc:
        return {"errors": [*errors, f"a requirement cannot be read: {exc}"], "overridden": [], "checked": 0}
    version = str(sglang.get("version") or "")
    runtime = (known.get("runtimes") or {}).get(version) or {}
    hint = ""
    if found["refused"]:
        core = runtime.get("core") or []
        if core:
            hint = "; the known runtime of sglang %s: %s (%s)" % (
                version,
                ", ".join(f"{p['name']} {p['version']}{'+' + p['local'] if p.get('local') else ''}" for p in core),
                KNOWN_RUNTIMES_FILE,
            )
        errors.extend(runtime_coherence.describe(c) + hint for c in found["refused"])
    return {
        "errors": errors,
        "overridden": [
            runtime_coherence.describe(c) + f" (accepted: {c['override_reason']})" for c in found["overridden"]
        ],
        "checked": found["checked"],
        "requires_source": sglang_req["source"] if sglang_req else "",
        "runtime": {
            "version": version,
            "proven": runtime.get("proven", "unknown"),
            "record": runtime.get("record", ""),
        },
    }


def derive_manifest(version: str, explicit, known: dict, sources=None, default_source: str = "index") -> dict:
    """``{manifest, derived, errors}``: the manifest for sglang ``version``.

    The known runtime of ``version`` (``known_runtimes.yml``, ``runtimes.<version>.core``) gives the
    compiled core; each core package comes from ``sources[name]`` (``sglang_runtime_core_sources``),
    else ``default_source``. ``explicit`` entries (``sglang_runtime_manifest``) win by name and keep
    their order; the core packages they do not name follow them. A version with no known runtime
    needs an explicit manifest. Entries derived by an earlier plan (``derived_from``, the manifest the
    release tasks were handed) are derived again, for this version.
    """
    explicit = [e for e in explicit or [] if isinstance(e, dict) and not e.get("derived_from")]
    sources = dict(sources or {})
    runtimes = known.get("runtimes") or {}
    known_versions = ", ".join(sorted(runtimes)) or "none"
    core_names = sorted({normalize_name(p["name"]) for r in runtimes.values() for p in r.get("core") or []})
    errors = []
    for name, source in sorted(sources.items()):
        if normalize_name(name) not in core_names:
            errors.append(
                f"sglang_runtime_core_sources.{name}: not a core package of a known runtime;"
                f" allowed: {', '.join(core_names)}"
            )
        elif source not in CORE_SOURCES:
            errors.append(
                f"sglang_runtime_core_sources.{name}={source}: allowed: {', '.join(CORE_SOURCES)}"
                " (a wheelhouse pin needs its wheel and sha256: an entry of sglang_runtime_manifest)"
            )
    runtime = runtimes.get(str(version))
    if runtime is None:
        if not explicit:
            errors.append(
                f"sglang_runtime_sglang.version={version}: no known runtime to derive the manifest from"
                f" ({KNOWN_RUNTIMES_FILE} knows {known_versions}) and sglang_runtime_manifest is empty;"
                " choose a known version or pin the runtime in sglang_runtime_manifest"
            )
        return {"manifest": list(explicit), "derived": [], "errors": errors}
    named = {normalize_name(e.get("name")) for e in explicit}
    by_key = {normalize_name(k): v for k, v in sources.items()}
    derived = []
    for package in runtime.get("core") or []:
        if normalize_name(package["name"]) in named:
            continue
        derived.append(
            {
                "name": package["name"],
                "version": str(package["version"]),
                "local": str(package.get("local") or ""),
                "import": str(package.get("import") or ""),
                "source": by_key.get(normalize_name(package["name"]), default_source),
                "sha256": "",
                "derived_from": f"the known runtime of sglang {version}",
            }
        )
    return {"manifest": explicit + derived, "derived": [e["name"] for e in derived], "errors": errors}


def check_reference_venv(plan: dict, report: dict) -> dict:
    """``{errors, checked, notes}``: the reference venv read on the host (preflight) against the plan."""
    found = runtime_coherence.reference_venv_conflicts(
        plan.get("manifest") or [],
        report or {},
        str((plan.get("sglang") or {}).get("version") or ""),
        str(plan.get("python_version") or ""),
    )
    return {"errors": found["refused"], "checked": found["checked"], "notes": found["notes"]}


def release_id(inputs_sha256: str, python: dict, cuda_version: str) -> str:
    """The release id: 12 hex of sha256 over the release inputs, the host's Python and the runtime's CUDA."""
    canonical = json.dumps(
        {"cuda": str(cuda_version), "inputs": inputs_sha256, "python": python}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def release_of(plan: dict, python: dict) -> dict:
    """``{release_id, release_dir, venv_dir}`` of the plan's release for the host's Python."""
    identifier = release_id(plan["release"]["inputs_sha256"], python, plan.get("cuda_version", ""))
    directory = release_dir(plan["paths"]["root"], identifier)
    return {"release_id": identifier, "release_dir": directory, "venv_dir": posixpath.join(directory, "venv")}


def manifest_by_source(manifest) -> dict:
    """The manifest's entries per install source (each of ``runtime_manifest.SOURCES``, in manifest order)."""
    return {source: [e for e in manifest or [] if e.get("source") == source] for source in SOURCES}


def build_plan(
    inputs: dict, known: dict, available_sets, read_wheel_metadata, *, fetch_index_metadata=None, check_inputs=None
) -> dict:
    """The deploy plan from validated inputs: ``{plan, errors, warnings}``.

    ``check_inputs`` (default ``runtime_manifest.check_controller_inputs``) checks the controller files
    (wheels and their sha256, patch set directories) and returns the release inputs and their sha256.
    """
    sglang = dict(inputs.get("sglang") or {})
    version = str(sglang.get("version") or "")
    derived = derive_manifest(version, inputs.get("manifest"), known, inputs.get("core_sources"))
    manifest = derived["manifest"]
    reference_venv = inputs.get("reference_venv") or None
    manifest_errors = derived["errors"] or validate_manifest(manifest, reference_venv=reference_venv)
    runtime = check_runtime(
        sglang,
        manifest,
        inputs.get("python_version"),
        known,
        read_wheel_metadata,
        fetch_index_metadata=fetch_index_metadata,
        index_url=inputs.get("index_url") or "",
    )
    explicit = inputs.get("explicit_patch_sets")
    chosen = choose_patch_sets(
        str(inputs.get("algorithm") or ""),
        version,
        str(inputs.get("attention_backend") or ""),
        available_sets,
        explicit,
    )
    chosen["chosen"] += every_request_sets(
        str(inputs.get("algorithm") or ""), version, available_sets, chosen["chosen"]
    )
    controller = (check_inputs or check_controller_inputs)(
        manifest,
        sglang,
        inputs.get("extra_wheels") or [],
        [r["dir"] for r in chosen["chosen"]],
    )
    served_ports = service_ports(inputs)
    plan = {
        "release": {"inputs": controller["inputs"], "inputs_sha256": controller["inputs_sha256"]},
        "sglang": {
            "version": version,
            "source": sglang.get("source"),
            "requires_source": runtime.get("requires_source", ""),
        },
        "runtime": runtime.get("runtime", {}),
        "manifest": manifest,
        "manifest_derived": derived["derived"],
        "manifest_by_source": manifest_by_source(manifest),
        "python_version": str(inputs.get("python_version") or ""),
        "python_argv0": python_argv0(
            str(inputs.get("python_interpreter") or ""), str(inputs.get("python_version") or "")
        ),
        "service_unit": service_unit(str(inputs.get("unit_name") or "")),
        # Files whose existence the host facts report (the build uses the CA bundle when it exists).
        "host_files": {"ca_bundle": str(inputs.get("ca_bundle") or "")},
        "reference_venv": str(inputs.get("reference_venv") or ""),
        "coherence": {"checked": runtime.get("checked", 0), "accepted_conflicts": runtime.get("overridden", [])},
        "cuda_version": str(inputs.get("cuda_version") or ""),
        "request": chosen["request"],
        "patch_sets": [{"name": r["name"], "dir": r["dir"], "serves": r["serves"]} for r in chosen["chosen"]],
        "patch_set_dirs": [r["dir"] for r in chosen["chosen"]],
        "target_checks": target_checks(chosen["chosen"]),
        "gpus_wanted": gpus_wanted(
            inputs.get("gpus"), inputs.get("gpu_count"), inputs.get("tp_size"), len(served_ports) or 1
        ),
        "service_ports": served_ports,
        "paths": paths(
            str(inputs.get("runtime_root") or ""),
            str(inputs.get("unit_name") or ""),
            str(inputs.get("config_dir") or ""),
            str(inputs.get("cache_dir") or ""),
            str(inputs.get("disk_path") or ""),
            uv_version=str(inputs.get("uv_version") or ""),
            model_manifests=str(inputs.get("model_manifest_dir") or ""),
        ),
    }
    errors = manifest_errors + controller["errors"] + runtime["errors"] + chosen["errors"]
    return {"plan": plan, "errors": errors, "warnings": runtime.get("overridden", [])}


# --- the host: the plan completed with what the host is (host_facts) ----------------------------

# The variables that set the host inputs (the messages name them).
PYTHON_VARIABLES = "sglang_runtime_python_interpreter / sglang_runtime_python_version"


def gpus_wanted(gpus, gpu_count, tp_size, replicas=1) -> int:
    """The GPU count the service gets (``validation_rules.gpus_wanted``, its one formula); a tp size of 0 (the
    service role not loaded) counts as 1."""
    return validation_rules.gpus_wanted(list(gpus or []), int(gpu_count or 0), int(tp_size or 1), int(replicas or 1))


def service_ports(inputs: dict) -> list[dict]:
    """``[{port, unit}]``: every port the service listens on and the unit that holds it - the single unit's, or one
    per replica (``replica_plan.plan_replicas``, the owner of replica ports and unit names). Empty without the
    service role's port, or while the replica list is refused (its validation names why)."""
    port = inputs.get("port") or 0
    if isinstance(port, bool) or not str(port).isdigit() or not int(port):
        return []
    replicas = replica_list(inputs.get("replicas") or [], inputs.get("replica_count") or 0)
    planned, errors = plan_replicas(
        [], int(inputs.get("tp_size") or 1), int(port), replicas, unit_name=str(inputs.get("unit_name") or "")
    )
    return [] if errors else [{"port": r["port"], "unit": service_unit(r["unit"])} for r in planned]


def python_argv0(interpreter: str, version: str) -> str:
    """The Python the release venv is made from: the interpreter, else ``python<version>`` on PATH."""
    return interpreter or f"python{version}"


def plan_python(inputs: dict, facts: dict) -> tuple[dict, list]:
    """``({version, argv0, found}, errors)``: the host's Python against ``python_version``."""
    wanted = str(inputs.get("python_version") or "")
    interpreter = str(inputs.get("python_interpreter") or "")
    read = facts.get("python") or {}
    argv0 = read.get("argv0") or python_argv0(interpreter, wanted)
    errors = []
    found = bool(read.get("found"))
    version = str(read.get("version") or "")
    downloads = bool(inputs.get("python_downloads")) and not interpreter
    if not found and not downloads:
        errors.append(
            f"{argv0}: not found; sglang_runtime_python_version={wanted} expected; set"
            f" sglang_runtime_python_interpreter to a Python {wanted} or allow downloads"
            " (sglang_runtime_python_downloads=true)"
        )
    elif found and not version.startswith(wanted + "."):
        errors.append(
            f"{argv0}: is Python {version}, sglang_runtime_python_version={wanted} expected; set"
            f" sglang_runtime_python_interpreter to a Python {wanted} or allow downloads"
            " (sglang_runtime_python_downloads=true)"
        )
    return {"version": version if found else wanted, "argv0": argv0, "found": found}, errors


def plan_gpus(inputs: dict, facts: dict, plan: dict) -> tuple[dict, list, list]:
    """``(gpus, errors, warnings)``: the host's GPUs judged (``nvidia_smi.assess_host``) and chosen
    (``gpu_selection.select_gpus``) for ``gpus_wanted`` GPUs, with the chosen GPUs' compute capabilities (what
    the GPU code check reads). Without GPU checks: none, and said so."""
    read = facts.get("gpus") or {}
    if not inputs.get("gpu_checks") or not read.get("read"):
        return {"checked": False, "uuids": [], "indices": [], "gpus": [], "capabilities": [], "driver": {}}, [], []
    gpus = read.get("gpus") or []
    exclude = [str(g) for g in inputs.get("excluded_gpus") or []]
    verdict = assess_host(
        read,
        expected_count=int(inputs.get("expected_gpu_count") or 0) or None,
        expected_name=str(inputs.get("expected_gpu_name") or "") or None,
        min_cuda_version=str(inputs.get("required_cuda_version") or "") or None,
        excluded_gpus=[g for g in (find_gpu(gpus, ident) for ident in exclude) if g is not None],
    )
    errors, warnings = [], [w["message"] for w in verdict["warnings"]]
    for field in read.get("unsupported_fields") or []:
        warnings.append(
            f"this nvidia-smi does not know the query field {field} (an older driver): every GPU's compute_capability"
            " is null, so nothing can check the release's compiled GPU code against the GPUs; a newer driver reports it"
        )
    if verdict["problems"]:
        health = "; ".join(
            f"GPU {g.get('index')}: "
            + (
                "ok"
                if (g.get("health") or {}).get("usable")
                else ", ".join((g.get("health") or {}).get("reasons") or [])
            )
            for g in gpus
        )
        errors.append(
            "GPU preflight failed: "
            + "; ".join(f"[{p['class']}] {p['message']}" for p in verdict["problems"])
            + f" (sglang_preflight_expected_gpu_count={inputs.get('expected_gpu_count')},"
            f" sglang_preflight_expected_gpu_name={json.dumps(inputs.get('expected_gpu_name') or '')},"
            f" sglang_preflight_required_cuda_version={inputs.get('required_cuda_version')}). GPU health: {health}"
        )
    select = [str(g) for g in inputs.get("gpus") or []]
    wanted = int(plan.get("gpus_wanted") or 0)
    selection = select_gpus(
        gpus, select=select, count=wanted or None, exclude=exclude, allow_busy=bool(inputs.get("allow_busy"))
    )
    if not selection["ok"] and not verdict["problems"]:
        what = (
            f"sglang_preflight_gpus={json.dumps(select)}"
            if select
            else f"automatic selection of {wanted} GPU(s) (sglang_preflight_gpu_count / sglang_service_tp_size,"
            f" sglang_preflight_excluded_gpus={json.dumps(exclude)})"
        )
        errors.append(
            f"{what} cannot be used: {'; '.join(selection['errors'])}. Pick other GPUs, free them, or set"
            " sglang_preflight_allow_busy_gpus=true for busy ones"
        )
    chosen = set(selection["uuids"])
    selected = [g for g in gpus if g.get("uuid") in chosen]
    return (
        {
            "checked": True,
            "uuids": selection["uuids"],
            "indices": selection["indices"],
            "gpus": gpus,
            "selected": selected,
            # What the GPU code check (gpu_code.yml) checks: each chosen GPU's compute capability, "" when unknown.
            "capabilities": [str(g.get("compute_capability") or "") for g in selected],
            "driver": {
                "driver_version": read.get("driver_version"),
                "driver_cuda_version": read.get("driver_cuda_version"),
            },
        },
        errors,
        warnings,
    )


def plan_models(inputs: dict, facts: dict, plan: dict) -> tuple[dict, list]:
    """``(models, errors)``: each model directory holds a config.json, and the target's architecture is one the
    plan's patch sets serve (``check_target``)."""
    models = facts.get("models") or {}
    errors = []
    for variable, model in sorted(models.items()):
        if not model.get("exists"):
            errors.append(
                f"{variable}={model.get('path')}: {model.get('config_path')} not found; download the model there or"
                f" point {variable} at the directory that holds it"
            )
        elif model.get("error"):
            errors.append(
                f"{variable}={model.get('path')}: {model.get('config_path')} is {model['error']}; the download may be"
                " incomplete"
            )
    target = models.get("sglang_service_model_path") or {}
    architecture = None
    if target.get("config") is not None:
        # known whatever the patch sets: the GPU code check needs it too (a hybrid target's run-time kernels)
        architecture = architecture_of(target["config"])
    if plan.get("target_checks") and target.get("config") is not None:
        checked = check_target(plan, target["config"], str(target.get("config_path") or "config.json"))
        if checked["error"]:
            errors.append(checked["error"])
    return {
        "dirs": {variable: model.get("path") for variable, model in sorted(models.items())},
        # each config.json as the host facts read it: the envelope plan reads none again
        "configs": {variable: model["config"] for variable, model in sorted(models.items()) if model.get("config")},
        "target_architecture": architecture,
        # after a good deploy, the sha256 manifest of each directory that has none yet (the service role)
        "record_manifests": bool(inputs.get("model_integrity_checks") and inputs.get("model_integrity_sha256")),
        "manifest_dir": plan["paths"]["model_manifests"],
    }, errors


def plan_port(inputs: dict, facts: dict) -> tuple[dict, list, list]:
    """``(port, errors, warnings)``: each port of the service (one per replica) is free or held by its own unit
    (else port_in_use, naming the port and the unit that was not started on it)."""
    held = facts.get("ports")
    if not inputs.get("port_check") or held is None:
        return {"checked": False}, [], []
    errors, warnings = [], []
    for entry in held:
        if entry.get("state") == "foreign":
            errors.append(
                f"{port_owner.FAILURE_CLASS}: {entry.get('reason')}; {entry.get('unit') or 'the service'} was not"
                f" started on it. hint: {failure_classifier.hint_for(port_owner.FAILURE_CLASS)}"
            )
        elif entry.get("state") == "unknown":
            warnings.append(entry["reason"])
    verdict = {"checked": True, "ports": held}
    if errors:
        verdict["failure_class"] = port_owner.FAILURE_CLASS
    return verdict, errors, warnings


def plan_disk(inputs: dict, facts: dict, plan: dict) -> tuple[dict, list]:
    """``(disk, errors)``: free space where releases go (``disk_space.disk_free_verdict``)."""
    read = facts.get("disk") or {}
    if read.get("free_kib") is None:
        return {"checked": False}, []
    verdict = disk_free_verdict(plan["paths"]["disk_check"], read["free_kib"], inputs.get("min_free_disk_gb") or 0)
    return dict(verdict, checked=True, measured_at=read.get("measured_at")), [] if verdict["ok"] else [verdict["msg"]]


def plan_release(inputs: dict, facts: dict, plan: dict, python: dict) -> tuple[dict, list]:
    """``(release, errors)``: the release of this host (id, directories), built or not (``release.build_decision``),
    and the environment its build runs with."""
    identity = release_of(
        plan, {"version": python["version"], "interpreter": str(inputs.get("python_interpreter") or "")}
    )
    on_host = facts.get("release") or {}
    complete = bool((on_host.get("releases") or {}).get(identity["release_id"]))
    build, error = build_decision(identity["release_id"], complete=complete, current_release=on_host.get("current", ""))
    errors = [error] if error else []
    if on_host.get("record_error"):
        errors.append(on_host["record_error"])
    venv = facts.get("reference_venv") or {}
    if build and plan["manifest_by_source"]["reference_venv"] and not venv.get("python_exists"):
        errors.append(
            f"sglang_runtime_reference_venv={plan['reference_venv']} has no bin/python; manifest entries with source"
            " reference_venv are copied from there"
        )
    ca_bundle = str(inputs.get("ca_bundle") or "")
    index_url = str(inputs.get("index_url") or "")
    env = {
        "UV_CACHE_DIR": plan["paths"]["uv_cache"],
        "UV_PYTHON_DOWNLOADS": "automatic" if inputs.get("python_downloads") else "never",
        # uv byte-compiles the venv: the service cannot write __pycache__ into its release (ProtectSystem=strict).
        "UV_COMPILE_BYTECODE": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    if ca_bundle and (facts.get("files") or {}).get(ca_bundle):
        env.update(SSL_CERT_FILE=ca_bundle, PIP_CERT=ca_bundle)
    if index_url:
        env.update(UV_INDEX_URL=index_url, PIP_INDEX_URL=index_url)
    return dict(
        identity,
        complete=complete,
        build=build,
        current=on_host.get("current", ""),
        record=on_host.get("record"),
        python=python["version"],
        env=env,
    ), errors


def plan_host(plan: dict, inputs: dict, facts: dict) -> dict:
    """``{host, errors, warnings}``: every decision that needs the host, from the controller plan, the inputs and
    the host facts (``host_facts.read_host``); every error at once."""
    python, python_errors = plan_python(inputs, facts)
    gpus, gpu_errors, gpu_warnings = plan_gpus(inputs, facts, plan)
    models, model_errors = plan_models(inputs, facts, plan)
    reference = {"errors": [], "checked": 0, "notes": []}
    report = (facts.get("reference_venv") or {}).get("report")
    if plan["manifest_by_source"]["reference_venv"] and report is not None:
        reference = check_reference_venv(plan, report)
    port, port_errors, port_warnings = plan_port(inputs, facts)
    disk, disk_errors = plan_disk(inputs, facts, plan)
    release, release_errors = plan_release(inputs, facts, plan, python)
    host = {
        "python": python,
        "gpus": gpus,
        "models": models,
        "reference_venv": {"checked": reference["checked"], "notes": reference["notes"], "errors": reference["errors"]},
        "port": port,
        "disk": disk,
        "release": release,
        "unit": facts.get("unit") or {},
    }
    errors = python_errors + gpu_errors + model_errors + reference["errors"] + port_errors + disk_errors
    return {"host": host, "errors": errors + release_errors, "warnings": gpu_warnings + port_warnings}


def plan(inputs: dict, known: dict, available_sets, read_wheel_metadata, *, facts=None, **controller) -> dict:
    """The deploy plan: ``{plan, errors, warnings}``, every decision or every error at once.

    Without ``facts`` (the validation play: no host is contacted) the controller's decisions (``build_plan``);
    with the host facts (``host_facts.read_host``) the plan of that host as well (``plan['host']``: release id
    and whether it is built, Python, GPUs chosen, models, reference venv, port, disk, the build environment).
    ``controller`` passes ``fetch_index_metadata`` and ``check_inputs`` on to ``build_plan``.
    """
    built = build_plan(inputs, known, available_sets, read_wheel_metadata, **controller)
    if facts is None or built["errors"]:
        return built
    host = plan_host(built["plan"], inputs, facts)
    return {
        "plan": dict(built["plan"], host=host["host"]),
        "errors": host["errors"],
        "warnings": built["warnings"] + host["warnings"],
    }
