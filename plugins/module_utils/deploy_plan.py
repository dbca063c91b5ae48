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

from ansible_collections.specdec.sglang.plugins.module_utils import runtime_coherence
from ansible_collections.specdec.sglang.plugins.module_utils.model_config import architecture_of, architecture_reasons
from ansible_collections.specdec.sglang.plugins.module_utils.patchset import EVERY_REQUEST
from ansible_collections.specdec.sglang.plugins.module_utils.release import release_dir, releases_dir
from ansible_collections.specdec.sglang.plugins.module_utils.requirements import RequirementError, metadata_requires
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_manifest import (
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


def paths(root: str, unit_name: str, config_dir: str, cache_dir: str, disk_path: str) -> dict:
    """Every path the deploy writes or reads, from the variables that own them."""
    unit = f"{unit_name}.service" if unit_name else ""
    return {
        "root": root,
        "releases": releases_dir(root),
        "current": posixpath.join(root, "current"),
        "state": posixpath.join(root, "state", "last_good"),
        "tools": posixpath.join(root, "tools"),
        "model_manifests": posixpath.join(root, "state", "model-manifests"),
        "uv_cache": posixpath.join(root, "cache", "uv"),
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
        "reference_venv": str(inputs.get("reference_venv") or ""),
        "coherence": {"checked": runtime.get("checked", 0), "accepted_conflicts": runtime.get("overridden", [])},
        "cuda_version": str(inputs.get("cuda_version") or ""),
        "request": chosen["request"],
        "patch_sets": [{"name": r["name"], "dir": r["dir"], "serves": r["serves"]} for r in chosen["chosen"]],
        "patch_set_dirs": [r["dir"] for r in chosen["chosen"]],
        "target_checks": target_checks(chosen["chosen"]),
        "gpus_wanted": int(inputs.get("gpus_wanted") or 0),
        "paths": paths(
            str(inputs.get("runtime_root") or ""),
            str(inputs.get("unit_name") or ""),
            str(inputs.get("config_dir") or ""),
            str(inputs.get("cache_dir") or ""),
            str(inputs.get("disk_path") or ""),
        ),
    }
    errors = manifest_errors + controller["errors"] + runtime["errors"] + chosen["errors"]
    return {"plan": plan, "errors": errors, "warnings": runtime.get("overridden", [])}
