# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse ``nvidia-smi`` output into per-GPU facts with a health verdict.

Pure functions, stdlib only: the host read of a deploy (``host_facts.read_gpus``, module
``specdec.sglang.sglang_host_facts``) and the module ``specdec.sglang.nvidia_gpu_facts`` run
nvidia-smi (``collect``, through their ``run_command``, bounded by coreutils ``timeout``: ``run_bounded``)
and hand the text here; unit tests feed real and constructed outputs.

Inputs understood:
- ``--query-gpu=<fields> --format=csv[,noheader][,nounits]``: one row per GPU; a GPU
  whose handle cannot be opened appears as a line
  ``Unable to determine the device handle for GPU 0000:41:00.0: Unknown Error`` in
  place of its row; failed fields read ``[GPU is lost]``, ``[Unknown Error]``, ...
- ``-q -x``: driver version, the CUDA version the driver supports, per-GPU ECC
  counters, row-remapping state, recovery action and processes.
- ``--query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv``.

``compute_cap`` (``12.0`` on an RTX PRO 6000 Blackwell, ``9.0`` on an H200) becomes the GPU's
``compute_capability``; it is ``None`` where nvidia-smi does not report it (older drivers, or a
transcript recorded without the field), never guessed from the product name.
"""

from __future__ import annotations

import re
import time
import xml.etree.ElementTree as ET

# What the module asks nvidia-smi for (order matters only for noheader output).
QUERY_GPU_FIELDS = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "driver_version",
    "memory.total",
    "memory.used",
    "memory.free",
    "ecc.errors.uncorrected.volatile.total",
    "compute_cap",
)
# Older drivers' nvidia-smi does not know ``compute_cap`` and refuses the whole query
# (``Field "compute_cap" is not a valid field to query.``): it is asked again without it.
OPTIONAL_QUERY_GPU_FIELDS = ("compute_cap",)
QUERY_APPS_FIELDS = ("gpu_uuid", "pid", "process_name", "used_memory")

# Header names nvidia-smi prints differ from the query names for a few fields.
_HEADER_ALIASES = {
    "clocks.current.sm": "clocks.sm",
    "used_gpu_memory": "used_memory",
}

# Field values that mean "this GPU is gone / broken", not "not applicable". nvidia-smi prints
# them bracketed in CSV fields ("[Unknown Error]") and bare in some versions and in the XML
# ("Unknown Error"): both forms mean lost.
_LOST_WORDS = ("gpu is lost", "unknown error", "gpu requires reset", "gpu lost")
_LOST_MARKERS = _LOST_WORDS + tuple(f"[{word}]" for word in _LOST_WORDS)
_NA_MARKERS = ("[n/a]", "n/a", "[not supported]", "not supported", "[insufficient permissions]", "")

_HANDLE_ERROR = re.compile(
    r"Unable to determine the device handle for (?:GPU|gpu)\s*"
    r"(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])"
    r"\s*:\s*(?P<why>.*)$"
)
_HOST_ERRORS = (
    ("couldn't communicate with the nvidia driver", "driver_unavailable"),
    ("no devices were found", "no_devices"),
    ("nvml: driver/library version mismatch", "driver_library_mismatch"),
    ("failed to initialize nvml", "nvml_init_failed"),
)


class NvidiaSmiParseError(ValueError):
    """Output that is not nvidia-smi output at all."""


def normalize_bus_id(bus_id: str | None) -> str | None:
    """``0000:41:00.0`` and ``00000000:41:00.0`` name the same GPU: use nvidia-smi's 8-digit form."""
    if not bus_id:
        return None
    text = bus_id.strip().upper()
    match = re.match(r"^([0-9A-F]{1,8}):([0-9A-F]{2}):([0-9A-F]{2})\.([0-9A-F])$", text)
    if not match:
        return text
    domain, bus, dev, func = match.groups()
    return f"{int(domain, 16):08X}:{bus}:{dev}.{func}"


def _field_name(header: str) -> str:
    name = re.sub(r"\s*\[[^\]]*\]\s*$", "", header.strip())
    return _HEADER_ALIASES.get(name, name)


def _split_csv(line: str) -> list[str]:
    # nvidia-smi separates with ", " and never quotes; GPU names contain no commas.
    return [part.strip() for part in line.split(",")]


def _is_lost_value(value: str) -> bool:
    return value.strip().lower() in _LOST_MARKERS


def _number(value: str | None) -> int | None:
    """``143771``, ``143771 MiB``, ``81.84 W`` -> int; N/A and errors -> None."""
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _NA_MARKERS or _is_lost_value(text) or text.startswith("["):
        return None
    match = re.match(r"^(-?\d+(?:\.\d+)?)", text)
    if not match:
        return None
    return int(float(match.group(1)))


def compute_capability(value: str | None) -> str | None:
    """``12.0`` / ``9.0`` -> the same text; N/A, errors and anything not ``<major>.<minor>`` -> None."""
    text = _text(value)
    if text is None:
        return None
    match = re.match(r"^(\d{1,2})\.(\d{1,2})$", text)
    return f"{int(match.group(1))}.{int(match.group(2))}" if match else None


def invalid_field(text: str | None) -> str | None:
    """The field nvidia-smi refuses (``Field "compute_cap" is not a valid field to query.``), or None."""
    match = re.search(r'Field "([^"]+)" is not a valid field to query', text or "")
    return match.group(1) if match else None


def _text(value: str | None) -> str | None:
    if value is None:
        return None
    text = value.strip()
    if text.lower() in _NA_MARKERS or text.startswith("[") or _is_lost_value(text):
        return None
    return text


def host_error(text: str) -> str | None:
    """Class of a whole-host failure message (no driver, no devices), or None."""
    lowered = (text or "").lower()
    for needle, klass in _HOST_ERRORS:
        if needle in lowered:
            return klass
    return None


def parse_query_gpu(text: str, fields: tuple[str, ...] | list[str] | None = None) -> list[dict]:
    """Rows of ``--query-gpu`` output as GPU dicts (index order), lost GPUs included.

    ``fields`` is required for ``noheader`` output; with a header it is read from the header.
    A device-handle error line stands for the GPU at its position (nvidia-smi keeps NVML order).
    """
    lines = [line for line in (text or "").splitlines() if line.strip() and not host_error(line)]
    if not lines:
        return []
    if lines[0].lstrip().lower().startswith("index") and "," in lines[0]:
        names = [_field_name(h) for h in _split_csv(lines[0])]
        lines = lines[1:]
    elif fields:
        names = [_field_name(f) for f in fields]
    else:
        raise NvidiaSmiParseError("query-gpu output has no header and no field list was given")

    gpus: list[dict] = []
    for position, line in enumerate(lines):
        handle = _HANDLE_ERROR.search(line)
        if handle:
            gpus.append(_lost_gpu(position, handle.group("bus"), line.strip()))
            continue
        values = _split_csv(line)
        if len(values) != len(names):
            raise NvidiaSmiParseError(
                f"query-gpu row has {len(values)} fields, expected {len(names)} ({', '.join(names)}): {line!r}"
            )
        row = dict(zip(names, values))
        gpus.append(_gpu_from_row(position, row))
    return gpus


def _empty_gpu() -> dict:
    return {
        "index": None,
        "uuid": None,
        "name": None,
        "pci_bus_id": None,
        "driver_version": None,
        "memory_total_mb": None,
        "memory_used_mb": None,
        "memory_free_mb": None,
        "ecc_uncorrected": None,
        "compute_capability": None,
        "ecc_mode": None,
        "remapped_rows_pending": None,
        "remapped_rows_failure": None,
        "recovery_action": None,
        "processes": [],
        "lost": False,
        "lost_reason": None,
    }


def _lost_gpu(position: int, bus_id: str, line: str) -> dict:
    gpu = _empty_gpu()
    gpu["index"] = position
    gpu["pci_bus_id"] = normalize_bus_id(bus_id)
    gpu["lost"] = True
    gpu["lost_reason"] = line
    return gpu


def _gpu_from_row(position: int, row: dict) -> dict:
    gpu = _empty_gpu()
    index = _number(row.get("index"))
    gpu["index"] = index if index is not None else position
    gpu["uuid"] = _text(row.get("uuid"))
    gpu["name"] = _text(row.get("name"))
    gpu["pci_bus_id"] = normalize_bus_id(_text(row.get("pci.bus_id")))
    gpu["driver_version"] = _text(row.get("driver_version"))
    gpu["memory_total_mb"] = _number(row.get("memory.total"))
    gpu["memory_used_mb"] = _number(row.get("memory.used"))
    gpu["memory_free_mb"] = _number(row.get("memory.free"))
    if "ecc.errors.uncorrected.volatile.total" in row:
        gpu["ecc_uncorrected"] = _number(row["ecc.errors.uncorrected.volatile.total"])
    gpu["compute_capability"] = compute_capability(row.get("compute_cap"))
    lost = [f"{key}={value}" for key, value in row.items() if _is_lost_value(value)]
    if lost:
        gpu["lost"] = True
        gpu["lost_reason"] = "nvidia-smi reports " + ", ".join(lost)
    return gpu


def parse_compute_apps(text: str, fields: tuple[str, ...] | list[str] | None = None) -> list[dict]:
    """``--query-compute-apps`` rows: [{gpu_uuid, pid, process_name, used_memory_mb}]."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return []
    first = lines[0].lower()
    if "pid" in first and "process_name" in first:
        names = [_field_name(h) for h in _split_csv(lines[0])]
        lines = lines[1:]
    elif fields:
        names = [_field_name(f) for f in fields]
    else:
        names = list(QUERY_APPS_FIELDS)
    apps = []
    for line in lines:
        if line.lower().startswith("no running") or _HANDLE_ERROR.search(line):
            continue
        values = _split_csv(line)
        if len(values) != len(names):
            raise NvidiaSmiParseError(f"compute-apps row has {len(values)} fields, expected {len(names)}: {line!r}")
        row = dict(zip(names, values))
        apps.append(
            {
                "gpu_uuid": _text(row.get("gpu_uuid")),
                "gpu_bus_id": normalize_bus_id(_text(row.get("gpu_bus_id"))),
                "pid": _number(row.get("pid")),
                "process_name": _text(row.get("process_name")) or row.get("process_name"),
                "used_memory_mb": _number(row.get("used_memory")),
            }
        )
    return apps


def _child_text(node, path: str) -> str | None:
    if node is None:
        return None
    found = node.find(path)
    if found is None or found.text is None:
        return None
    return found.text.strip()


def _sum_uncorrectable(volatile) -> int | None:
    """Sum the volatile uncorrectable counters: new (``*uncorrectable*``) and old (``double_bit/total``) layouts."""
    if volatile is None:
        return None
    total = None
    for child in volatile:
        tag = child.tag.lower()
        if "uncorrectable" in tag:
            value = _number(child.text)
            if value is not None:
                total = (total or 0) + value
    double_bit = _number(_child_text(volatile, "double_bit/total"))
    if double_bit is not None:
        total = (total or 0) + double_bit
    return total


def parse_xml(text: str) -> dict:
    """``nvidia-smi -q -x`` -> {driver_version, cuda_version, attached_gpus, gpus: [...]}.

    Lines printed before the XML declaration (device-handle errors) are returned in ``errors``.
    """
    raw = text or ""
    start = raw.find("<?xml")
    if start < 0:
        start = raw.find("<nvidia_smi_log")
    if start < 0:
        raise NvidiaSmiParseError("no nvidia_smi_log XML document in the output")
    errors = [line.strip() for line in raw[:start].splitlines() if line.strip()]
    body = re.sub(r"<!DOCTYPE[^>]*>", "", raw[start:], count=1)
    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise NvidiaSmiParseError(f"nvidia-smi XML does not parse: {exc}") from exc
    gpus = []
    for position, node in enumerate(root.findall("gpu")):
        gpu = _empty_gpu()
        gpu["xml_position"] = position
        gpu["pci_bus_id"] = normalize_bus_id(node.get("id") or _child_text(node, "pci/pci_bus_id"))
        gpu["name"] = _text(_child_text(node, "product_name"))
        gpu["uuid"] = _text(_child_text(node, "uuid"))
        gpu["memory_total_mb"] = _number(_child_text(node, "fb_memory_usage/total"))
        gpu["memory_used_mb"] = _number(_child_text(node, "fb_memory_usage/used"))
        gpu["memory_free_mb"] = _number(_child_text(node, "fb_memory_usage/free"))
        gpu["ecc_mode"] = _text(_child_text(node, "ecc_mode/current_ecc"))
        gpu["ecc_uncorrected"] = _sum_uncorrectable(node.find("ecc_errors/volatile"))
        pending = _text(_child_text(node, "remapped_rows/remapped_row_pending"))
        failure = _text(_child_text(node, "remapped_rows/remapped_row_failure"))
        gpu["remapped_rows_pending"] = None if pending is None else pending.lower() == "yes"
        gpu["remapped_rows_failure"] = None if failure is None else failure.lower() == "yes"
        action = _text(_child_text(node, "gpu_recovery_action"))
        gpu["recovery_action"] = None if action is None or action.lower() == "none" else action
        for proc in node.findall("processes/process_info"):
            gpu["processes"].append(
                {
                    "pid": _number(_child_text(proc, "pid")),
                    "process_name": _child_text(proc, "process_name"),
                    "type": _child_text(proc, "type"),
                    "used_memory_mb": _number(_child_text(proc, "used_memory")),
                }
            )
        memory = node.find("fb_memory_usage")
        lost = [
            f"{child.tag}={child.text.strip()}"
            for child in (list(memory) if memory is not None else [])
            if child.text and _is_lost_value(child.text)
        ]
        if lost:
            gpu["lost"] = True
            gpu["lost_reason"] = "nvidia-smi reports " + ", ".join(lost)
        gpus.append(gpu)
    for line in errors:
        handle = _HANDLE_ERROR.search(line)
        if handle:
            lost_gpu = _lost_gpu(None, handle.group("bus"), line)
            gpus.append(lost_gpu)
    return {
        "driver_version": _text(_child_text(root, "driver_version")),
        "cuda_version": _text(_child_text(root, "cuda_version")),
        "attached_gpus": _number(_child_text(root, "attached_gpus")),
        "gpus": gpus,
        "errors": errors,
    }


def _key(gpu: dict) -> tuple:
    return (gpu.get("uuid"), gpu.get("pci_bus_id"))


def _match(gpu: dict, others: list[dict]) -> dict | None:
    for other in others:
        if gpu.get("uuid") and other.get("uuid") == gpu["uuid"]:
            return other
        if gpu.get("pci_bus_id") and other.get("pci_bus_id") == gpu["pci_bus_id"]:
            return other
    return None


def merge(
    query_text: str | None = None,
    xml_text: str | None = None,
    apps_text: str | None = None,
    query_fields: tuple[str, ...] | list[str] | None = None,
    stderr_text: str | None = None,
) -> dict:
    """Combine the three outputs into ``{driver_version, driver_cuda_version, attached_gpus, gpus, host_errors}``.

    The CSV query decides the GPU list and indices (it is what CUDA_VISIBLE_DEVICES indices follow);
    the XML adds what CSV cannot say (driver CUDA version, ECC detail, recovery state, processes).
    """
    host_errors = _host_errors((query_text, xml_text, stderr_text))
    gpus = parse_query_gpu(query_text, query_fields) if query_text and query_text.strip() else []
    _add_handle_errors(gpus, stderr_text)
    xml = None
    if xml_text and "<nvidia_smi_log" in xml_text:
        xml = parse_xml(xml_text)
        gpus = _merge_xml(gpus, xml["gpus"])
    _add_compute_apps(gpus, apps_text)

    _fill_missing_indices(gpus, xml["attached_gpus"] if xml else None)
    gpus.sort(key=lambda g: (g["index"] is None, g["index"] if g["index"] is not None else 0))

    driver_version = xml["driver_version"] if xml else None
    if not driver_version:
        driver_version = next((g["driver_version"] for g in gpus if g.get("driver_version")), None)
    for gpu in gpus:
        gpu.pop("driver_version", None)
    return {
        "driver_version": driver_version,
        "driver_cuda_version": xml["cuda_version"] if xml else None,
        "attached_gpus": xml["attached_gpus"] if xml else len(gpus),
        "gpus": gpus,
        "host_errors": host_errors,
    }


def _host_errors(texts) -> list[dict]:
    """One ``{class, message}`` per host error class found in ``texts``, with the first line that shows it."""
    host_errors: list[dict] = []
    for text in texts:
        klass = host_error(text or "")
        if klass and not any(e["class"] == klass for e in host_errors):
            line = next((ln.strip() for ln in (text or "").splitlines() if host_error(ln)), (text or "").strip()[:300])
            host_errors.append({"class": klass, "message": line})
    return host_errors


def _add_handle_errors(gpus: list[dict], stderr_text: str | None) -> None:
    """Handle errors printed on stderr (some driver versions): add each such GPU as lost, to fill an index gap."""
    for line in (stderr_text or "").splitlines():
        handle = _HANDLE_ERROR.search(line)
        if handle and not any(g["pci_bus_id"] == normalize_bus_id(handle.group("bus")) for g in gpus):
            gpus.append(_lost_gpu(None, handle.group("bus"), line.strip()))


def _merge_xml(gpus: list[dict], xml_gpus: list[dict]) -> list[dict]:
    """The GPU list with what the XML adds; the XML's own list (indexed by position) when the CSV gave none."""
    if not gpus:
        gpus = [dict(g) for g in xml_gpus]
        for position, gpu in enumerate(gpus):
            gpu["index"] = gpu.get("xml_position", position)
    else:
        for xgpu in xml_gpus:
            target = _match(xgpu, gpus)
            if target is not None:
                _merge_xml_gpu(target, xgpu)
            elif xgpu["lost"]:
                gpus.append(dict(xgpu))
    for gpu in gpus:
        gpu.pop("xml_position", None)
    return gpus


def _merge_xml_gpu(target: dict, xgpu: dict) -> None:
    """Copy into the CSV's ``target`` what the XML's ``xgpu`` says and the CSV cannot."""
    for field in ("ecc_mode", "remapped_rows_pending", "remapped_rows_failure", "recovery_action"):
        if xgpu.get(field) is not None:
            target[field] = xgpu[field]
    if xgpu.get("ecc_uncorrected") is not None:
        target["ecc_uncorrected"] = max(target.get("ecc_uncorrected") or 0, xgpu["ecc_uncorrected"])
    for proc in xgpu["processes"]:
        if not any(p["pid"] == proc["pid"] for p in target["processes"]):
            target["processes"].append(proc)
    if xgpu["lost"] and not target["lost"]:
        target["lost"], target["lost_reason"] = True, xgpu["lost_reason"]


def _add_compute_apps(gpus: list[dict], apps_text: str | None) -> None:
    """Add to each GPU the compute processes that ``--query-compute-apps`` lists and it does not have yet."""
    for app in parse_compute_apps(apps_text) if apps_text else []:
        target = _match({"uuid": app["gpu_uuid"], "pci_bus_id": app["gpu_bus_id"]}, gpus)
        if target is None or any(p["pid"] == app["pid"] for p in target["processes"]):
            continue
        target["processes"].append(
            {
                "pid": app["pid"],
                "process_name": app["process_name"],
                "type": "C",
                "used_memory_mb": app["used_memory_mb"],
            }
        )


def _fill_missing_indices(gpus: list[dict], attached: int | None) -> None:
    taken = {g["index"] for g in gpus if g["index"] is not None}
    total = max(attached or 0, len(gpus), (max(taken) + 1) if taken else 0)
    free = [i for i in range(total) if i not in taken]
    for gpu in gpus:
        if gpu["index"] is None and free:
            gpu["index"] = free.pop(0)


def assess_health(
    gpu: dict,
    allow_busy: bool = False,
    busy_memory_mb: int = 1024,
    min_free_mb: int | None = None,
) -> dict:
    """Health verdict for one GPU: ``{usable, classes, reasons}``.

    Classes: ``lost``, ``ecc_uncorrected``, ``reset_required``, ``busy``, ``low_memory``.
    ``busy`` (processes on the GPU, or memory in use by processes this host cannot list)
    makes a GPU unusable unless ``allow_busy``.
    """
    classes: list[str] = []
    reasons: list[str] = []
    if gpu.get("lost"):
        classes.append("lost")
        reasons.append(f"lost: {gpu.get('lost_reason') or 'GPU not reachable'}")
    ecc = gpu.get("ecc_uncorrected")
    if ecc:
        classes.append("ecc_uncorrected")
        reasons.append(f"ecc_uncorrected: {ecc} uncorrected ECC error(s) since the driver loaded")
    if gpu.get("remapped_rows_failure") or gpu.get("remapped_rows_pending") or gpu.get("recovery_action"):
        details = []
        if gpu.get("remapped_rows_failure"):
            details.append("row remapping failed")
        if gpu.get("remapped_rows_pending"):
            details.append("row remapping pending")
        if gpu.get("recovery_action"):
            details.append(f"recovery action {gpu['recovery_action']}")
        classes.append("reset_required")
        reasons.append("reset_required: " + ", ".join(details) + " (reset the GPU or reboot)")
    procs = gpu.get("processes") or []
    used = gpu.get("memory_used_mb")
    if procs:
        listed = "; ".join(
            f"pid {p.get('pid')} {p.get('process_name')} {p.get('used_memory_mb')} MiB" for p in procs[:4]
        )
        more = f" and {len(procs) - 4} more" if len(procs) > 4 else ""
        classes.append("busy")
        reasons.append(f"busy: {len(procs)} process(es) on it: {listed}{more}")
    elif used is not None and not gpu.get("lost") and used > busy_memory_mb:
        classes.append("busy")
        reasons.append(
            f"busy: {used} MiB in use (> {busy_memory_mb} MiB) by processes not visible from here"
            " (another container or PID namespace)"
        )
    free = gpu.get("memory_free_mb")
    if min_free_mb and free is not None and free < min_free_mb:
        classes.append("low_memory")
        reasons.append(f"low_memory: {free} MiB free, {min_free_mb} MiB needed")
    blocking = [c for c in classes if not (allow_busy and c in ("busy", "low_memory"))]
    return {"usable": not blocking, "classes": classes, "reasons": reasons}


def version_tuple(version: str | None) -> tuple[int, ...]:
    """``13.0`` -> (13, 0); junk -> ()."""
    parts = re.findall(r"\d+", version or "")
    return tuple(int(p) for p in parts[:3])


def cuda_covers(driver_cuda: str | None, runtime_cuda: str | None) -> bool:
    """A driver supporting CUDA 13.0 runs 13.0 and older runtimes; unknown driver CUDA covers nothing."""
    if not runtime_cuda:
        return True
    if not driver_cuda:
        return False
    return version_tuple(driver_cuda) >= version_tuple(runtime_cuda)


def gather(
    query_text: str | None,
    xml_text: str | None = None,
    apps_text: str | None = None,
    *,
    query_fields: tuple[str, ...] | list[str] | None = None,
    stderr_text: str | None = None,
    allow_busy: bool = False,
    busy_memory_mb: int = 1024,
    min_free_mb: int | None = None,
) -> dict:
    """``merge`` plus a health verdict on every GPU."""
    facts = merge(query_text, xml_text, apps_text, query_fields, stderr_text)
    for gpu in facts["gpus"]:
        gpu["health"] = assess_health(
            gpu, allow_busy=allow_busy, busy_memory_mb=busy_memory_mb, min_free_mb=min_free_mb
        )
    return facts


def assess_host(
    facts: dict,
    expected_count: int | None = None,
    expected_name: str | None = None,
    min_cuda_version: str | None = None,
    excluded_gpus: list[dict] | None = None,
) -> dict:
    """Whole-host verdict: ``{problems, warnings}``, each a list of ``{class, message}``.

    Problems: no driver, fewer GPUs than expected, other model, driver CUDA too old.
    ``expected_name`` is a prefix of the reported product name. A lost GPU the operator excluded
    (``excluded_gpus``: the GPU records the exclusion names) is acknowledged: it does not count
    against ``expected_count`` and gives a warning instead. A GPU missing from the listing
    altogether is never acknowledged: the indices after it have shifted.
    """
    problems = [dict(e) for e in facts.get("host_errors", [])]
    warnings: list[dict] = []
    gpus = facts.get("gpus", [])
    if not gpus and not problems:
        problems.append({"class": "no_devices", "message": "nvidia-smi listed no GPU"})
    excluded = excluded_gpus or []
    acknowledged = [g for g in gpus if g.get("lost") and any(g is e for e in excluded)]
    # Without a GPU listing (no driver, a hang) the count says nothing the host error does not.
    if expected_count is not None and expected_count > 0 and gpus:
        seen = len(gpus)
        if facts.get("attached_gpus") and facts["attached_gpus"] > seen:
            seen = facts["attached_gpus"]
        reachable = len([g for g in gpus if not g.get("lost")])
        if seen < expected_count or reachable + len(acknowledged) < expected_count:
            ack = f", {len(acknowledged)} lost and excluded" if acknowledged else ""
            problems.append(
                {
                    "class": "gpu_count",
                    "message": f"expected {expected_count} GPUs, nvidia-smi shows {len(gpus)}"
                    f" of which {reachable} reachable{ack}",
                }
            )
    for gpu in acknowledged:
        warnings.append(
            {
                "class": "excluded_gpu_lost",
                "message": f"GPU {gpu.get('index')} ({gpu.get('pci_bus_id') or gpu.get('uuid') or 'no id'}) is lost"
                " and excluded, so it is acknowledged and not used; a lost GPU can still disturb the others"
                " (Xid errors, driver or bus resets): the CUDA check on the selected GPUs decides",
            }
        )
    if expected_name:
        # Prefix match: "NVIDIA RTX PRO 6000 Blackwell" covers its Server/Workstation Editions.
        other = sorted({g["name"] for g in gpus if g.get("name") and not g["name"].startswith(expected_name)})
        if other:
            problems.append({"class": "gpu_model", "message": f"expected {expected_name}, found {', '.join(other)}"})
    if min_cuda_version and gpus and not cuda_covers(facts.get("driver_cuda_version"), min_cuda_version):
        problems.append(
            {
                "class": "driver_cuda",
                "message": f"driver {facts.get('driver_version')} supports CUDA "
                f"{facts.get('driver_cuda_version') or 'unknown'}, the runtime needs {min_cuda_version}:"
                " upgrade the driver or use a runtime built for an older CUDA",
            }
        )
    return {"problems": problems, "warnings": warnings}


def host_problems(
    facts: dict,
    expected_count: int | None = None,
    expected_name: str | None = None,
    min_cuda_version: str | None = None,
    excluded_gpus: list[dict] | None = None,
) -> list[dict]:
    """The problems of ``assess_host``."""
    return assess_host(facts, expected_count, expected_name, min_cuda_version, excluded_gpus)["problems"]


# --- running nvidia-smi within one time budget --------------------------------------------


# coreutils ``timeout``: exit 124 when the command ran out of time (TERM), 137 when it had to be KILLed
# after --kill-after, 127 when the command could not be found.
TIMED_OUT_EXIT = (124, 137)
NOT_FOUND_EXIT = 127
KILL_AFTER_S = 2


def bounded_argv(argv: list[str], timeout_s: float) -> list[str]:
    """``argv`` under coreutils ``timeout``: TERM to the command's whole process group after ``timeout_s``
    (a hung nvidia-smi can have children that would outlive it), KILL ``KILL_AFTER_S`` later."""
    return ["timeout", f"--kill-after={KILL_AFTER_S}", f"{timeout_s:.3f}", *argv]


def run_bounded(argv: list[str], timeout_s: float, run_command) -> dict:
    """Run ``argv`` for at most ``timeout_s`` seconds: ``{rc, stdout, stderr, timed_out, missing}``.

    ``run_command(argv) -> (rc, stdout, stderr)`` is ``AnsibleModule.run_command`` in a module (or a
    callable with its contract); the bound is coreutils ``timeout`` around ``argv``.
    """
    if timeout_s <= 0:
        return {"rc": None, "stdout": "", "stderr": "", "timed_out": True, "missing": False}
    try:
        rc, out, err = run_command(bounded_argv(argv, timeout_s))
    except OSError as exc:  # a run_command that raises for a program it cannot find
        return {"rc": None, "stdout": "", "stderr": str(exc), "timed_out": False, "missing": True}
    if rc in TIMED_OUT_EXIT:
        return {"rc": None, "stdout": out or "", "stderr": err or "", "timed_out": True, "missing": False}
    if rc == NOT_FOUND_EXIT:
        return {"rc": None, "stdout": "", "stderr": f"{argv[0]}: not found", "timed_out": False, "missing": True}
    return {"rc": rc, "stdout": out, "stderr": err, "timed_out": False, "missing": False}


def collect(binary: str, timeout_s: float, run=None, clock=time.monotonic, *, run_command=None) -> dict:
    """Run the three nvidia-smi calls within ``timeout_s`` seconds in total.

    Each call is ``run(argv, timeout_left_s)``, by default ``run_bounded`` over ``run_command``
    (``AnsibleModule.run_command``); one of the two must be given.

    Returns ``{query, xml, apps, commands, host_errors, unsupported_fields}``: the outputs (``None``
    when a call did not run or failed), the exit status per call, whole-host errors
    (``nvidia_smi_missing``, ``nvidia_smi_hang``) and the optional query fields this nvidia-smi
    refused (``compute_cap`` on older drivers: the query ran again without them). After a hang no
    further call is made: the GPU that hangs one call hangs the next.
    """
    if run is None:
        if run_command is None:
            raise TypeError("nvidia_smi.collect needs run_command (AnsibleModule.run_command) or run")

        def run(argv, left_s):
            return run_bounded(argv, left_s, run_command)

    deadline = clock() + timeout_s
    calls = (
        ("query_gpu", [f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv,nounits"]),
        ("xml", ["-q", "-x"]),
        ("compute_apps", [f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}", "--format=csv,nounits"]),
    )
    outputs: dict = {"query_gpu": None, "xml": None, "compute_apps": None}
    stderr: list[str] = []
    commands: dict = {}
    host_errors: list[dict] = []
    unsupported: list[str] = []
    for name, args in calls:
        done = run([binary, *args], deadline - clock())
        refused = invalid_field((done["stdout"] or "") + (done["stderr"] or ""))
        if name == "query_gpu" and done["rc"] != 0 and refused in OPTIONAL_QUERY_GPU_FIELDS:
            # An older driver: ask again without the fields it does not know; they read None.
            unsupported.append(refused)
            fields = [f for f in QUERY_GPU_FIELDS if f not in OPTIONAL_QUERY_GPU_FIELDS]
            done = run([binary, f"--query-gpu={','.join(fields)}", "--format=csv,nounits"], deadline - clock())
        commands[name] = done["rc"]
        if done["missing"]:
            host_errors.append({"class": "nvidia_smi_missing", "message": done["stderr"]})
            break
        if done["timed_out"]:
            host_errors.append(
                {
                    "class": "nvidia_smi_hang",
                    "message": f"{binary} {' '.join(args)}: no answer within the {timeout_s:g} s budget of the"
                    " whole GPU check (a lost GPU can make nvidia-smi hang); the call was killed",
                }
            )
            break
        stderr.append(done["stderr"] or "")
        keep = done["rc"] == 0 or (name == "xml" and "<nvidia_smi_log" in (done["stdout"] or ""))
        if name == "query_gpu":
            keep = True  # handle errors and host errors are read from it whatever the exit status
        outputs[name] = done["stdout"] if keep else None
    return {
        "query": outputs["query_gpu"],
        "xml": outputs["xml"],
        "apps": outputs["compute_apps"],
        "stderr": "\n".join(stderr),
        "commands": commands,
        "host_errors": host_errors,
        "unsupported_fields": unsupported,
    }
