# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Is a runtime manifest coherent with what its packages require? Pure functions, stdlib only.

The packages that require something (the *requirers*) are sglang itself and each manifest entry
whose requirements are known: a wheel's ``Requires-Dist`` (read from the wheel on the controller,
from an index's metadata, or from the recorded metadata of a known runtime), or the pin a compiled
package's build states where its metadata has none (sglang-kernel 0.4.5: torch 2.11.0). Every
requirement that names a package of the manifest must hold for the manifest's version; a package
the manifest does not hold is left to the installer.

A manifest entry may carry ``override_reason`` (why a requirement is knowingly not met, e.g. the
GPU record that proved the combination): its conflicts are reported, not refused. An entry the plan
derived from a known runtime carries ``derived_from`` (named in every message about it).

A reference venv (``source: reference_venv``) is read on the host in preflight
(``read_reference_venv``: each distribution's name, version and ``Requires-Dist`` from its
``*.dist-info/METADATA``) and checked with the same code (``reference_venv_conflicts``): the versions
it holds are what the release gets, and its sglang's and its packages' own requirements must hold.
"""

from __future__ import annotations

import glob
import os
import zipfile

from ansible_collections.specdec.sglang.plugins.module_utils._runtime.requirements import (
    LINUX_X86_64,
    active_requirements,
    format_specifiers,
    metadata_identity,
    metadata_requires,
    normalize_name,
    satisfies,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import expected_version


def wheel_metadata(path: str) -> str:
    """The METADATA text of a wheel file (its ``*.dist-info/METADATA``)."""
    with zipfile.ZipFile(path) as archive:
        names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if not names:
            raise ValueError(f"{path}: no .dist-info/METADATA in the wheel")
        return archive.read(names[0]).decode("utf-8", "replace")


def environment(python_version: str) -> dict:
    """The marker environment of a GPU host running Python ``python_version``."""
    version = str(python_version or "3.12")
    full = version if version.count(".") >= 2 else version + ".0"
    return dict(LINUX_X86_64, python_version=".".join(version.split(".")[:2]), python_full_version=full)


def requirer(name: str, version: str, requires, source: str, extras=()) -> dict:
    """One package that requires others: its requirement lines and where they were read."""
    return {
        "name": name,
        "version": str(version),
        "requires": list(requires or []),
        "source": source,
        "extras": list(extras),
    }


def entry_label(position: int, entry: dict) -> str:
    """``sglang_runtime_manifest[0]``, with where a derived entry came from."""
    origin = str(entry.get("derived_from") or "") if isinstance(entry, dict) else ""
    return f"sglang_runtime_manifest[{position}]" + (f" (derived from {origin})" if origin else "")


def conflicts(manifest, requirers, env: dict) -> dict:
    """``{refused: [...], overridden: [...], checked: N}`` for the manifest against the requirers.

    Each conflict: ``{package, required_by, required, manifest, source, entry, override_reason}``.
    """
    by_key = {}
    for position, entry in enumerate(manifest or []):
        if isinstance(entry, dict) and entry.get("name"):
            by_key[normalize_name(entry["name"])] = (position, entry)
    refused, overridden, checked = [], [], 0
    for item in requirers:
        for requirement in active_requirements(item["requires"], env, item.get("extras") or ()):
            found = by_key.get(requirement["key"])
            if found is None or normalize_name(item["name"]) == requirement["key"]:
                continue
            position, entry = found
            checked += 1
            have = expected_version(entry)
            if satisfies(have, requirement["specifiers"]):
                continue
            conflict = {
                "package": entry["name"],
                "required_by": f"{item['name']} {item['version']}",
                "required": f"{entry['name']}{format_specifiers(requirement['specifiers'])}",
                "manifest": have,
                "source": item["source"],
                "entry": entry_label(position, entry),
                "position": position,
                "override_reason": str(entry.get("override_reason") or ""),
            }
            (overridden if conflict["override_reason"] else refused).append(conflict)

    def order(conflict):
        return conflict["position"], conflict["required_by"]

    return {"refused": sorted(refused, key=order), "overridden": sorted(overridden, key=order), "checked": checked}


def describe(conflict: dict) -> str:
    """One refusal line: package, required by, required version, manifest version, where it was read."""
    return (
        f"{conflict['entry']} ({conflict['package']}): {conflict['required_by']} requires {conflict['required']}"
        f" ({conflict['source']}); the manifest has {conflict['package']} {conflict['manifest']}"
    )


# --- the reference venv, read on the host -----------------------------------------------------


def read_reference_venv(venv: str, names, listdir=glob.glob, read_text=None) -> dict:
    """What a reference venv holds: ``{venv, site_packages, found, distributions}``.

    ``distributions``: normalised name -> ``{name, version, requires, metadata}`` for sglang and each
    of ``names`` found in ``<venv>/lib/python*/site-packages/*.dist-info/METADATA``. Read-only; the
    file access is injected (``listdir``: a glob, ``read_text``: path -> text).
    """

    def _read(path):
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()

    read_text = read_text or _read
    wanted = {normalize_name(n) for n in [*(names or []), "sglang"]}
    sites = sorted(listdir(os.path.join(str(venv), "lib", "python*", "site-packages")))
    found = {}
    for site in sites:
        for metadata in sorted(listdir(os.path.join(site, "*.dist-info", "METADATA"))):
            text = read_text(metadata)
            name, version = metadata_identity(text)
            key = normalize_name(name)
            if key in wanted and key not in found:
                found[key] = {
                    "name": name,
                    "version": version,
                    "requires": metadata_requires(text),
                    "metadata": metadata,
                }
    return {"venv": str(venv), "site_packages": sites, "found": bool(sites), "distributions": found}


def _installed_as_entry(entry: dict, installed: str) -> dict:
    """The manifest entry at the version the reference venv holds (its local label when it has none)."""
    public, _sep, local = str(installed).partition("+")
    return dict(entry, version=public, local=local or str(entry.get("local") or ""))


def reference_venv_conflicts(manifest, report: dict, sglang_version: str, python_version: str) -> dict:
    """``{refused: [lines], checked: N, notes: [lines]}`` for a reference venv read on the host.

    1. Each entry with ``source: reference_venv`` must be installed there at the manifest's version
       (a local label is compared when the installed version carries one).
    2. With the versions it holds in place of those entries, the manifest must satisfy the reference
       venv's sglang (its ``Requires-Dist``, when it holds the sglang version deployed) and each
       copied package's own ``Requires-Dist`` (``conflicts``, the controller's check).
    """
    venv = report.get("venv") or "(unset)"
    dists = report.get("distributions") or {}
    refused, notes, checked = [], [], 0
    effective, requirers = [], []
    from_venv = [e for e in manifest or [] if isinstance(e, dict) and e.get("source") == "reference_venv"]
    if from_venv and not report.get("found"):
        return {
            "refused": [
                f"sglang_runtime_reference_venv={venv}: no lib/python*/site-packages on the host; the manifest"
                f" copies {', '.join(e['name'] for e in from_venv)} from there (source reference_venv)"
            ],
            "checked": 0,
            "notes": [],
        }
    for position, entry in enumerate(manifest or []):
        if not isinstance(entry, dict) or entry.get("source") != "reference_venv":
            effective.append(entry)
            continue
        label = f"{entry_label(position, entry)} ({entry.get('name')})"
        held = dists.get(normalize_name(entry.get("name")))
        checked += 1
        if held is None:
            refused.append(
                f"{label}: the manifest requires {entry['name']}=={expected_version(entry)} from the reference venv"
                f" {venv}, which does not hold {entry['name']} (installed: none)"
            )
            effective.append(entry)
            continue
        public, _sep, local = str(held["version"]).partition("+")
        want_local = str(entry.get("local") or "")
        if public != str(entry.get("version")) or (local and want_local and local.lower() != want_local.lower()):
            refused.append(
                f"{label}: the manifest requires {entry['name']}=={expected_version(entry)} from the reference venv;"
                f" {venv} holds {entry['name']} {held['version']} (installed, {held['metadata']})"
            )
        effective.append(_installed_as_entry(entry, held["version"]))
        where = f"Requires-Dist of {held['metadata']} on the host"
        requirers.append(requirer(held["name"], held["version"], held["requires"], where))
    sglang = dists.get("sglang")
    if sglang is not None and str(sglang["version"]).split("+", 1)[0] == str(sglang_version):
        requirers.insert(
            0,
            requirer(
                "sglang", sglang["version"], sglang["requires"], f"Requires-Dist of {sglang['metadata']} on the host"
            ),
        )
    elif sglang is not None:
        notes.append(
            f"the reference venv {venv} holds sglang {sglang['version']}, not {sglang_version}: its requirements"
            " are not those of the sglang deployed (checked on the controller instead)"
        )
    found = conflicts(effective, requirers, environment(python_version))
    checked += found["checked"]
    for conflict in found["refused"]:
        installed = " (installed in the reference venv)" if _is_from_venv(effective, conflict) else ""
        refused.append(describe(conflict) + installed)
    notes.extend(describe(c) + f" (accepted: {c['override_reason']})" for c in found["overridden"])
    return {"refused": refused, "checked": checked, "notes": notes}


def _is_from_venv(manifest, conflict) -> bool:
    entry = manifest[conflict["position"]]
    return isinstance(entry, dict) and entry.get("source") == "reference_venv"
