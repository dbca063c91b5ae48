# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pick the GPUs a service runs on, from facts made by ``nvidia_smi.gather``.

Explicit ids (index ``"1"``, UUID ``GPU-...``, or PCI bus id) or automatic (``count``
healthy idle GPUs, lowest index first). Excluded GPUs are never chosen. A GPU that is
not usable is refused with its health reasons. The result is passed on as UUIDs.
"""

from __future__ import annotations

import re

from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import normalize_bus_id

_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Fa-f-]+$")
_INDEX = re.compile(r"^\d+$")
_BUS = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]$")


def id_kind(ident) -> str | None:
    """``index``, ``uuid``, ``pci_bus_id`` or None when the string cannot name a GPU."""
    text = str(ident).strip()
    if _INDEX.match(text):
        return "index"
    if _UUID.match(text):
        return "uuid"
    if _BUS.match(text):
        return "pci_bus_id"
    return None


def find_gpu(gpus: list[dict], ident) -> dict | None:
    """The GPU an id names, or None."""
    text = str(ident).strip()
    kind = id_kind(text)
    for gpu in gpus:
        if kind == "index" and gpu.get("index") == int(text):
            return gpu
        if kind == "uuid" and (gpu.get("uuid") or "").lower() == text.lower():
            return gpu
        if kind == "pci_bus_id" and gpu.get("pci_bus_id"):
            if normalize_bus_id(text) == gpu["pci_bus_id"]:
                return gpu
    return None


def _label(gpu: dict) -> str:
    return f"GPU {gpu.get('index')} ({gpu.get('uuid') or gpu.get('pci_bus_id') or 'no uuid'})"


def _known(gpus: list[dict]) -> str:
    return ", ".join(f"{g.get('index')}={g.get('uuid') or g.get('pci_bus_id')}" for g in gpus) or "none"


def _usable(gpu: dict, allow_busy: bool) -> tuple[bool, list[str]]:
    health = gpu.get("health") or {}
    classes = health.get("classes") or []
    reasons = health.get("reasons") or []
    blocking = [
        reason for klass, reason in zip(classes, reasons) if not (allow_busy and klass in ("busy", "low_memory"))
    ]
    return (not blocking, blocking)


def select_gpus(
    gpus: list[dict],
    select=None,
    count: int | None = None,
    exclude=None,
    allow_busy: bool = False,
) -> dict:
    """Choose GPUs. ``select``: list of ids (explicit); else ``count`` usable GPUs (auto).

    Returns ``{ok, mode, uuids, indices, selected: [{index, uuid, name}], errors: [str], refused: [...]}``.
    """
    errors: list[str] = []
    refused: list[dict] = []
    excluded = _excluded(gpus, exclude, errors)
    explicit = [str(s).strip() for s in (select or []) if str(s).strip() != ""]
    if explicit:
        mode = "explicit"
        chosen = _select_explicit(
            gpus, explicit, count=count, excluded=excluded, allow_busy=allow_busy, errors=errors, refused=refused
        )
    else:
        mode = "auto"
        chosen = _select_auto(
            gpus, count=count, excluded=excluded, allow_busy=allow_busy, errors=errors, refused=refused
        )
    for gpu in chosen:
        if not gpu.get("uuid"):
            errors.append(f"{_label(gpu)} has no UUID in nvidia-smi output")
    ok = not errors
    if not ok:
        chosen = []
    return {
        "ok": ok,
        "mode": mode,
        "uuids": [g["uuid"] for g in chosen],
        "indices": [g.get("index") for g in chosen],
        "selected": [{"index": g.get("index"), "uuid": g.get("uuid"), "name": g.get("name")} for g in chosen],
        "excluded": [g.get("index") for g in excluded],
        "refused": refused,
        "errors": errors,
    }


def _excluded(gpus: list[dict], exclude, errors: list[str]) -> list[dict]:
    """The GPUs that ``exclude`` names; appends to ``errors`` the ids that cannot name a GPU."""
    excluded: list[dict] = []
    for ident in exclude or []:
        gpu = find_gpu(gpus, ident)
        if gpu is None:
            if id_kind(ident) is None:
                errors.append(f"exclude: {ident!r} is not a GPU index, UUID (GPU-...) or PCI bus id")
            # An excluded GPU that is absent (e.g. already lost) is fine: it is not used either way.
            continue
        excluded.append(gpu)
    return excluded


def _refusal(gpu: dict, reasons: list[str]) -> dict:
    return {"index": gpu.get("index"), "uuid": gpu.get("uuid"), "reasons": reasons}


def _explicit_error(gpus, ident, *, chosen, excluded, allow_busy, refused) -> str | None:
    """Why the GPU that ``ident`` names cannot be chosen next, or None when it can."""
    if id_kind(ident) is None:
        return f"{ident!r} is not a GPU index, UUID (GPU-...) or PCI bus id"
    gpu = find_gpu(gpus, ident)
    if gpu is None:
        return f"GPU {ident!r} not found on this host; known GPUs: {_known(gpus)}"
    if any(gpu is c for c in chosen):
        return f"GPU {ident!r} is listed twice"
    if any(gpu is e for e in excluded):
        return f"{_label(gpu)} is selected and also excluded"
    ok, why = _usable(gpu, allow_busy)
    if not ok:
        refused.append(_refusal(gpu, why))
        return f"{_label(gpu)} is not usable: {'; '.join(why)}"
    return None


def _select_explicit(gpus, explicit, *, count, excluded, allow_busy, errors, refused) -> list[dict]:
    """The GPUs that the ids in ``explicit`` name, in order; appends each problem to ``errors``."""
    chosen: list[dict] = []
    for ident in explicit:
        error = _explicit_error(gpus, ident, chosen=chosen, excluded=excluded, allow_busy=allow_busy, refused=refused)
        if error:
            errors.append(error)
        else:
            chosen.append(find_gpu(gpus, ident))
    if count is not None and count > 0 and len(explicit) != count and not errors:
        errors.append(f"{len(explicit)} GPUs listed but {count} requested")
    return chosen


def _select_auto(gpus, *, count, excluded, allow_busy, errors, refused) -> list[dict]:
    """The ``count`` (default 1) usable GPUs not excluded, lowest index first; every unusable one is refused."""
    want = count if count is not None else 1
    if want < 1:
        errors.append(f"GPU count must be >= 1, got {want}")
    chosen: list[dict] = []
    candidates = sorted(
        (g for g in gpus if not any(g is e for e in excluded)),
        key=lambda g: (g.get("index") is None, g.get("index") or 0),
    )
    for gpu in candidates:
        ok, why = _usable(gpu, allow_busy)
        if not ok:
            refused.append(_refusal(gpu, why))
            continue
        if len(chosen) < want:
            chosen.append(gpu)
    if want >= 1 and len(chosen) < want:
        detail = "; ".join(f"GPU {r['index']}: {', '.join(r['reasons'])}" for r in refused) or "no other GPU"
        excl = f"; excluded: {', '.join(str(g.get('index')) for g in excluded)}" if excluded else ""
        errors.append(f"{want} usable GPUs needed, {len(chosen)} found ({detail}{excl})")
    return chosen


def tp_divides(tp_size: int, gpu_count: int) -> bool:
    """tp_size must divide the number of GPUs a service gets."""
    return tp_size >= 1 and gpu_count >= 1 and gpu_count % tp_size == 0
