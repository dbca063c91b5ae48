# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The runtime manifest: validation (before any host change) and comparison with a venv.

A manifest is a list of entries (``sglang_runtime_manifest``)::

    - name: torch              # distribution name
      version: "2.11.0"        # public version
      local: cu130             # local version label, "" for none
      import: torch            # module imported by the verification, "" to skip
      source: wheelhouse       # wheelhouse | index | reference_venv
      wheel: /path/torch-2.11.0+cu130-cp312-cp312-linux_x86_64.whl   # wheelhouse: controller path
      sha256: <64 hex>         # required for wheelhouse; optional for index (then hash-checked)

Pure functions, stdlib only.
"""

from __future__ import annotations

import hashlib
import json
import os
import re

SOURCES = ("wheelhouse", "index", "reference_venv")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCAL = re.compile(r"^[A-Za-z0-9]+(?:[._][A-Za-z0-9]+)*$")


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: ``sglang_kernel`` and ``sglang-kernel`` are one distribution."""
    return re.sub(r"[-_.]+", "-", str(name or "")).lower()


def split_version(version: str | None) -> tuple[str, str]:
    """``2.11.0+cu130`` -> (``2.11.0``, ``cu130``)."""
    text = str(version or "").strip()
    public, sep, local = text.partition("+")
    return public, local if sep else ""


def expected_version(entry: dict) -> str:
    local = str(entry.get("local") or "")
    return f"{entry.get('version')}+{local}" if local else str(entry.get("version"))


def wheel_filename_info(filename: str) -> tuple[str, str] | None:
    """``torch-2.11.0+cu130-cp312-cp312-linux_x86_64.whl`` -> (``torch``, ``2.11.0+cu130``)."""
    base = str(filename).rsplit("/", 1)[-1]
    if not base.endswith(".whl"):
        return None
    parts = base[:-4].split("-")
    if len(parts) < 5:
        return None
    return parts[0], parts[1]


def validate_manifest(
    entries,
    var: str = "sglang_runtime_manifest",
    reference_venv: str | None = None,
) -> list[str]:
    """Every problem with the manifest, each naming the variable and entry; [] when valid."""
    if not isinstance(entries, list) or not entries:
        return [f"{var} must be a non-empty list of packages (name, version, source, ...)"]
    errors: list[str] = []
    seen: set[str] = set()
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            errors.append(f"{var}[{position}] must be a dict, got {type(entry).__name__}")
            continue
        name = str(entry.get("name") or "")
        where = f"{var}[{position}] ({name or 'no name'})"
        if not name:
            errors.append(f"{where}: 'name' (distribution name) is required")
        elif normalize_name(name) in seen:
            errors.append(f"{where}: listed twice")
        seen.add(normalize_name(name))
        errors.extend(_version_errors(entry, where))
        errors.extend(_source_errors(entry, where, reference_venv))
    return errors


def _version_errors(entry: dict, where: str) -> list[str]:
    errors = []
    version = str(entry.get("version") or "")
    if not version:
        errors.append(f"{where}: 'version' is required")
    elif "+" in version:
        errors.append(f"{where}: version {version!r} carries a local label; put it in 'local' (e.g. local: cu130)")
    local = str(entry.get("local") or "")
    if local and not _LOCAL.match(local):
        errors.append(f"{where}: local label {local!r} is not a PEP 440 local version (e.g. cu130)")
    return errors


def _source_errors(entry: dict, where: str, reference_venv: str | None) -> list[str]:
    source = entry.get("source")
    if source not in SOURCES:
        return [f"{where}: source {source!r} is not one of {', '.join(SOURCES)}"]
    errors = []
    sha = str(entry.get("sha256") or "").strip().lower()
    if sha and not _SHA256.match(sha):
        errors.append(f"{where}: sha256 {entry.get('sha256')!r} is not 64 hex digits")
    if source == "wheelhouse":
        errors.extend(_wheelhouse_errors(entry, where, sha))
    if source == "reference_venv" and not reference_venv:
        errors.append(
            f"{where}: source reference_venv needs sglang_runtime_reference_venv"
            " (path of a known-good venv on the host)"
        )
    return errors


def _wheelhouse_errors(entry: dict, where: str, sha: str) -> list[str]:
    errors = []
    if not sha:
        errors.append(f"{where}: source wheelhouse needs 'sha256' (sha256sum of the wheel file)")
    wheel = str(entry.get("wheel") or "")
    if not wheel:
        errors.append(f"{where}: source wheelhouse needs 'wheel' (controller path of the .whl file)")
        return errors
    info = wheel_filename_info(wheel)
    name = str(entry.get("name") or "")
    if info is None:
        errors.append(f"{where}: wheel {wheel!r} is not a wheel file name (name-version-tags.whl)")
    elif normalize_name(info[0]) != normalize_name(name) or info[1] != expected_version(entry):
        errors.append(
            f"{where}: wheel file {wheel.rsplit('/', 1)[-1]!r} is {info[0]} {info[1]},"
            f" the entry says {name} {expected_version(entry)}"
        )
    return errors


def version_matches(entry: dict, dist_version: str | None, module_version: str | None = None) -> tuple[bool, str]:
    """Does an installed version satisfy the entry? Returns (ok, status).

    The public version must be equal. An expected local label (``cu130``) must appear either on
    the distribution version or on the module's ``__version__`` (PyPI's torch wheels report
    ``2.11.0`` as distribution and ``2.11.0+cu130`` as ``torch.__version__``).
    """
    if not dist_version:
        return False, "missing"
    public, local = split_version(dist_version)
    if public.lower() != str(entry.get("version")).lower():
        return False, "version_mismatch"
    want_local = str(entry.get("local") or "")
    if want_local:
        module_local = split_version(module_version)[1] if module_version else ""
        if want_local.lower() not in (local.lower(), module_local.lower()):
            return False, "local_mismatch"
    return True, "ok"


def compare(manifest: list[dict], probe: dict, cuda_version: str | None = None) -> dict:
    """Rows ``{package, expected, actual, status}`` for versions, torch CUDA and imports.

    ``probe`` is what ``runtime_probe.parse_probe_output`` returns.
    """
    rows: list[dict] = []
    packages = probe.get("packages") or {}
    imports = probe.get("imports") or {}
    for entry in manifest:
        name = entry["name"]
        info = packages.get(name) or packages.get(normalize_name(name)) or {}
        module = str(entry.get("import") or "")
        module_version = (imports.get(module) or {}).get("version") if module else None
        _ok, status = version_matches(entry, info.get("version"), module_version)
        actual = info.get("version") or "not installed"
        if module_version and module_version != info.get("version"):
            actual = f"{actual} ({module}.__version__ {module_version})"
        rows.append({"package": name, "expected": expected_version(entry), "actual": actual, "status": status})
    torch_entry = next((e for e in manifest if normalize_name(e["name"]) == "torch"), None)
    if cuda_version and torch_entry is not None:
        actual_cuda = probe.get("torch_cuda")
        rows.append(
            {
                "package": "torch.version.cuda",
                "expected": str(cuda_version),
                "actual": str(actual_cuda) if actual_cuda else "none",
                "status": "ok" if str(actual_cuda) == str(cuda_version) else "cuda_mismatch",
            }
        )
    for entry in manifest:
        module = str(entry.get("import") or "")
        if not module:
            continue
        result = imports.get(module) or {"ok": False, "class": "not_probed", "error": "not probed"}
        if result.get("ok"):
            rows.append({"package": f"import {module}", "expected": "imports", "actual": "imports", "status": "ok"})
            continue
        klass = result.get("class") or "import_error"
        if klass == "abi_mismatch":
            actual = f"undefined symbol {result.get('symbol')}"
        else:
            actual = (result.get("error") or "failed").splitlines()[-1][:160]
        rows.append({"package": f"import {module}", "expected": "imports", "actual": actual, "status": klass})
    mismatches = [r for r in rows if r["status"] != "ok"]
    return {"ok": not mismatches, "rows": rows, "mismatches": mismatches}


def format_table(rows: list[dict]) -> str:
    """Fixed-width expected/actual table, mismatches marked."""
    headers = ("package", "expected", "actual", "status")
    widths = [max(len(h), *(len(str(r[h])) for r in rows)) if rows else len(h) for h in headers]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        mark = "" if row["status"] == "ok" else "  <-- MISMATCH"
        lines.append("  ".join(str(row[h]).ljust(w) for h, w in zip(headers, widths)).rstrip() + mark)
    return "\n".join(lines)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _tree_digest(directory: str) -> list[list[str]]:
    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in ("__pycache__", ".git"))
        for name in sorted(names):
            path = os.path.join(root, name)
            files.append([os.path.relpath(path, directory), file_sha256(path)])
    return files


def check_controller_inputs(
    manifest: list[dict],
    sglang: dict,
    extra_wheels: list[str] | None = None,
    patch_sets: list[str] | None = None,
) -> dict:
    """Controller-side checks before any host change; also the release inputs.

    Wheel files must exist and match their sha256; the sglang wheel / extra wheels / patch set
    directories must exist. Returns ``{errors, inputs, inputs_sha256}`` where ``inputs`` is the
    canonical description of everything that goes into a release (file contents by sha256).
    """
    errors: list[str] = []
    entries = [_manifest_input(position, entry, errors) for position, entry in enumerate(manifest or [])]
    sglang_in = _sglang_input(dict(sglang or {}), errors)
    extras = []
    for position, wheel in enumerate(extra_wheels or []):
        if not os.path.isfile(str(wheel)):
            errors.append(f"sglang_runtime_extra_wheels[{position}]: wheel file not found on the controller: {wheel}")
            continue
        extras.append([os.path.basename(str(wheel)), file_sha256(str(wheel))])
    patches = []
    for position, directory in enumerate(patch_sets or []):
        if not os.path.isfile(os.path.join(str(directory), "patchset.yml")):
            errors.append(
                f"sglang_runtime_patch_sets[{position}]: {directory} has no patchset.yml{_sets_beside(directory)}"
            )
            continue
        patches.append(
            {"dir": os.path.basename(os.path.normpath(str(directory))), "files": _tree_digest(str(directory))}
        )
    inputs = {"manifest": entries, "sglang": sglang_in, "extra_wheels": extras, "patch_sets": patches}
    canonical = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return {"errors": errors, "inputs": inputs, "inputs_sha256": hashlib.sha256(canonical.encode()).hexdigest()}


def _sets_beside(directory) -> str:
    """'; patch sets in PARENT: a, b' (the directories beside ``directory`` that are patch sets), or ''."""
    parent = os.path.dirname(os.path.normpath(str(directory)))
    try:
        names = sorted(n for n in os.listdir(parent) if os.path.isfile(os.path.join(parent, n, "patchset.yml")))
    except OSError:
        return ""
    return "; patch sets in %s: %s" % (parent, ", ".join(names)) if names else ""


def _manifest_input(position: int, entry: dict, errors: list[str]) -> dict:
    """One manifest entry as a release input; a wheelhouse wheel must exist and match its sha256."""
    item = {
        key: entry.get(key)
        for key in ("name", "version", "local", "import", "source", "sha256", "index_url")
        if entry.get(key) not in (None, "")
    }
    if entry.get("source") != "wheelhouse" or not entry.get("wheel"):
        return item
    wheel = str(entry["wheel"])
    where = f"sglang_runtime_manifest[{position}] ({entry.get('name')})"
    if not os.path.isfile(wheel):
        errors.append(f"{where}: wheel file not found on the controller: {wheel}")
        return item
    actual = file_sha256(wheel)
    want = str(entry.get("sha256") or "").lower()
    if want and actual != want:
        errors.append(
            f"{where}: {os.path.basename(wheel)} has sha256 {actual}, the manifest says {want};"
            " fix the sha256 or replace the file"
        )
    item["wheel_file"] = os.path.basename(wheel)
    return item


def _sglang_input(sglang: dict, errors: list[str]) -> dict:
    """The sglang source spec as a release input; a wheel source must exist, match its sha256 and version."""
    sglang_in = {k: sglang.get(k) for k in ("version", "source", "git_url", "git_ref", "index_url", "no_deps")}
    if sglang.get("source") != "wheel":
        return sglang_in
    wheel = str(sglang.get("wheel") or "")
    if not wheel or not os.path.isfile(wheel):
        errors.append(f"sglang_runtime_sglang.wheel: wheel file not found on the controller: {wheel or '(empty)'}")
        return sglang_in
    sglang_in["wheel_file"] = os.path.basename(wheel)
    sglang_in["wheel_sha256"] = file_sha256(wheel)
    if sglang.get("sha256") and sglang_in["wheel_sha256"] != str(sglang["sha256"]).lower():
        errors.append(
            f"sglang_runtime_sglang.sha256: {os.path.basename(wheel)} has sha256"
            f" {sglang_in['wheel_sha256']}, expected {sglang['sha256']}"
        )
    info = wheel_filename_info(wheel)
    if info and sglang.get("version") and split_version(info[1])[0] != str(sglang["version"]):
        errors.append(
            f"sglang_runtime_sglang.wheel: {os.path.basename(wheel)} is version {info[1]},"
            f" sglang_runtime_sglang.version says {sglang['version']}"
        )
    return sglang_in


def release_id(inputs_sha256: str, python: dict) -> str:
    """Short id over the controller inputs and the host's Python (interpreter + version)."""
    canonical = json.dumps({"inputs": inputs_sha256, "python": python}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]
