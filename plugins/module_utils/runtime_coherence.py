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
GPU record that proved the combination): its conflicts are reported, not refused.
"""

from __future__ import annotations

import zipfile

from ansible_collections.specdec.sglang.plugins.module_utils.requirements import (
    LINUX_X86_64,
    active_requirements,
    format_specifiers,
    normalize_name,
    satisfies,
)
from ansible_collections.specdec.sglang.plugins.module_utils.runtime_manifest import expected_version


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
                "entry": f"sglang_runtime_manifest[{position}]",
                "override_reason": str(entry.get("override_reason") or ""),
            }
            (overridden if conflict["override_reason"] else refused).append(conflict)

    def order(conflict):
        return int(conflict["entry"].rsplit("[", 1)[1].rstrip("]")), conflict["required_by"]

    return {"refused": sorted(refused, key=order), "overridden": sorted(overridden, key=order), "checked": checked}


def describe(conflict: dict) -> str:
    """One refusal line: package, required by, required version, manifest version, where it was read."""
    return (
        f"{conflict['entry']} ({conflict['package']}): {conflict['required_by']} requires {conflict['required']}"
        f" ({conflict['source']}); the manifest has {conflict['package']} {conflict['manifest']}"
    )
