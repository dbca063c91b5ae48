# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The replicas of one host, as a pure function: ``plan_replicas``.

A host gives the service a set of GPUs (``sglang_preflight_gpus`` or the ones preflight selects), a
tensor-parallel size and a port. By default it runs ONE replica on all of them: today's unit name, today's
port. ``sglang_service_replicas`` lists several instead, each ``{name, gpus, port}``; ``gpus`` and
``port`` may be left out and are then derived in list order: replica ``i`` takes the ``i``-th run of
``tp_size`` selected GPUs and the port ``base_port + i``.

``plan_replicas`` returns ``(replicas, errors)``: every replica (name, unit name, port, GPU set and the
input the envelope planner sizes it on) or every error at once (overlapping GPUs or ports, a tp size that
does not divide a replica's GPUs, ports out of range, names that are not unit-safe, GPUs that are not among
the selected ones). Nothing here reads a file or contacts a host.
"""

from __future__ import annotations

import re

PORT_MIN = 1024
PORT_MAX = 65535
# A unit-name suffix: lower case letters, digits and "-", starting with a letter or digit, at most 32.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
NAME_MEANS = 'a name of [a-z0-9-] starting with a letter or digit, at most 32 characters (the unit is "<unit>-<name>")'
KEYS = ("name", "gpus", "port")
VARIABLE = "sglang_service_replicas"


def _port(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _entry_errors(position: int, entry) -> list[str]:
    where = f"{VARIABLE}[{position}]"
    if not isinstance(entry, dict):
        return [f"{where}={entry!r}: not a mapping; allowed: {{name, gpus (optional), port (optional)}}"]
    errors = []
    unknown = sorted(set(entry) - set(KEYS))
    if unknown:
        errors.append(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(KEYS)}")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        errors.append(f"{where}.name={name!r}: not unit-safe; allowed: {NAME_MEANS}")
    gpus = entry.get("gpus")
    if gpus is not None and (not isinstance(gpus, list) or not gpus):
        errors.append(f"{where}.gpus={gpus!r}: allowed: a non-empty list of GPU ids, or leave it out to derive it")
    if "port" in entry:
        port = _port(entry["port"])
        if port is None or not PORT_MIN <= port <= PORT_MAX:
            errors.append(f"{where}.port={entry['port']!r}: out of range; allowed: {PORT_MIN}-{PORT_MAX}")
    return errors


def plan_replicas(
    gpus,
    tp_size: int,
    base_port: int,
    replicas=(),
    *,
    unit_name: str = "sglang",
) -> tuple[list[dict], list[str]]:
    """The replicas of a host and every error of the replica list at once.

    ``gpus``: the selected GPUs in order (ids as the operator wrote them or UUIDs after selection); may be
    empty on the controller before preflight selects them (then only the explicit GPUs are checked).
    ``replicas``: ``sglang_service_replicas`` (``[]`` = one replica on every selected GPU).
    Each replica: ``name``, ``unit`` (the systemd unit name without ``.service``), ``port``, ``gpus``
    (``None`` while still to be selected), ``envelope_input`` ``{gpus, gpu_count, tp_size}``.
    """
    gpus = [str(g) for g in gpus or ()]
    errors: list[str] = []
    if not isinstance(tp_size, int) or isinstance(tp_size, bool) or tp_size < 1:
        return [], [f"sglang_service_tp_size={tp_size!r}: allowed: an integer of at least 1"]
    if not replicas:
        single = {"name": "", "unit": unit_name, "port": base_port, "gpus": gpus or None}
        return [_with_envelope(single, tp_size)], []
    if not isinstance(replicas, list):
        return [], [f"{VARIABLE}={replicas!r}: allowed: a list of {{name, gpus, port}}"]
    for position, entry in enumerate(replicas):
        errors += _entry_errors(position, entry)
    if errors:
        return [], errors

    planned = []
    for position, entry in enumerate(replicas):
        own = [str(g) for g in entry["gpus"]] if entry.get("gpus") else None
        if own is None and gpus:
            chunk = gpus[position * tp_size : (position + 1) * tp_size]
            own = chunk if len(chunk) == tp_size else None
            if own is None:
                errors.append(
                    f"{VARIABLE}[{position}] ({entry['name']}): no GPUs left to derive from: {len(replicas)} replicas"
                    f" at sglang_service_tp_size={tp_size} need {len(replicas) * tp_size} GPUs, {len(gpus)} selected;"
                    f" allowed: at most {len(gpus) // tp_size} derived replica(s), or list each replica's gpus"
                )
        port = _port(entry["port"]) if "port" in entry else base_port + position
        planned.append({"name": entry["name"], "unit": f"{unit_name}-{entry['name']}", "port": port, "gpus": own})
    errors += _cross_errors(planned, gpus, tp_size, base_port)
    if errors:
        return [], errors
    return [_with_envelope(r, tp_size) for r in planned], []


def _cross_errors(planned: list[dict], selected: list[str], tp_size: int, base_port: int) -> list[str]:
    errors = []
    names = [r["name"] for r in planned]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        errors.append(f"{VARIABLE}: name(s) {', '.join(twice)} used more than once; allowed: each name once")
    for r in planned:
        if not PORT_MIN <= r["port"] <= PORT_MAX:
            errors.append(
                f"{VARIABLE} ({r['name']}): derived port {r['port']} (sglang_service_port={base_port} + position)"
                f" is out of range; allowed: {PORT_MIN}-{PORT_MAX}"
            )
    ports = [r["port"] for r in planned]
    for port in sorted({p for p in ports if ports.count(p) > 1}):
        owners = [r["name"] for r in planned if r["port"] == port]
        errors.append(f"{VARIABLE}: port {port} is used by {', '.join(owners)}; allowed: one port per replica")
    seen: dict[str, str] = {}
    for r in planned:
        for gpu in r["gpus"] or ():
            if gpu in seen and seen[gpu] != r["name"]:
                errors.append(
                    f"{VARIABLE}: GPU {gpu} is in both {seen[gpu]} and {r['name']}; allowed: each GPU in one replica"
                )
            seen.setdefault(gpu, r["name"])
        errors += _gpu_errors(r, selected, tp_size)
    return errors


def _gpu_errors(replica: dict, selected: list[str], tp_size: int) -> list[str]:
    """One replica's own GPUs: no GPU twice, tp size divides them, each among the selected GPUs (when known)."""
    errors, name, own = [], replica["name"], replica["gpus"] or ()
    if len(own) != len(set(own)):
        errors.append(f"{VARIABLE} ({name}): gpus lists a GPU twice ({', '.join(own)}); allowed: each GPU once")
    if own and len(own) % tp_size:
        divisors = ", ".join(str(d) for d in range(1, len(own) + 1) if len(own) % d == 0)
        errors.append(
            f"sglang_service_tp_size={tp_size} does not divide the {len(own)} GPU(s) of replica {name}"
            f" ({', '.join(own)}); allowed: a tp size of {divisors}, or {tp_size} GPUs per replica"
        )
    stray = [g for g in own if selected and g not in selected]
    if stray:
        errors.append(
            f"{VARIABLE} ({name}): GPU(s) {', '.join(stray)} are not among the selected GPUs"
            f" ({', '.join(selected)}); allowed: GPUs of sglang_preflight_gpus"
        )
    return errors


def _with_envelope(replica: dict, tp_size: int) -> dict:
    gpus = replica["gpus"]
    replica["envelope_input"] = {"gpus": gpus, "gpu_count": len(gpus) if gpus else None, "tp_size": tp_size}
    return replica


def gateway_workers(hosts: dict, scheme: str = "http") -> list[dict]:
    """Every replica of every host as a gateway worker, in host then replica order.

    ``hosts``: inventory host -> ``{address, replicas}`` (``replicas`` as ``plan_replicas`` returns them).
    Returns ``[{host, replica, unit, url}]``; an IPv6 address is bracketed in the URL.
    """
    workers = []
    for host in sorted(hosts):
        address = str(hosts[host]["address"])
        shown = f"[{address}]" if ":" in address and not address.startswith("[") else address
        for replica in hosts[host]["replicas"]:
            workers.append(
                {
                    "host": host,
                    "replica": replica["name"],
                    "unit": replica["unit"],
                    "url": f"{scheme}://{shown}:{replica['port']}",
                }
            )
    return workers
