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

from ansible_collections.specdec.sglang.plugins.module_utils._release.release import last_good_dir, rollback_state

PORT_MIN = 1024
PORT_MAX = 65535
# A unit-name suffix: lower case letters, digits and "-", starting with a letter or digit, at most 32.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
NAME_MEANS = 'a name of [a-z0-9-] starting with a letter or digit, at most 32 characters (the unit is "<unit>-<name>")'
KEYS = ("name", "gpus", "port")
VARIABLE = "sglang_service_replicas"


def replica_list(replicas, count=0):
    """The replica list a host runs: ``sglang_service_replicas`` when it lists any, else ``count`` replicas named
    ``r0``, ``r1``, ... with derived GPUs and ports (``sglang_service_replica_count``; 0 or 1: the single unit)."""
    if replicas:
        return replicas
    if isinstance(count, bool) or not isinstance(count, int) or count < 2:
        return []
    return [{"name": f"r{i}"} for i in range(count)]


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
    Returns ``[{host, replica, unit, port, url}]``; an IPv6 address is bracketed in the URL.
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
                    "port": replica["port"],
                    "url": f"{scheme}://{shown}:{replica['port']}",
                }
            )
    return workers


# -- served replicas: what the service role renders and runs per replica ----------------------------------------
def service_replicas(
    selected,
    gpu_uuids,
    tp_size: int,
    base_port: int,
    replicas=(),
    *,
    unit_name: str,
    config_dir: str,
    runtime_root: str,
    count: int = 0,
) -> list[dict]:
    """Every replica the service role runs on a host, with its own files and state (raises ``ValueError``).

    ``selected``: ``sglang_preflight_gpus`` (the operator's ids, may be empty: automatic selection);
    ``gpu_uuids``: the GPUs preflight selected, as UUIDs in the same order (``sglang_service_gpu_uuids``).
    A replica's ``gpus`` are UUIDs (``CUDA_VISIBLE_DEVICES``): an operator id is mapped by its position in
    ``selected``. ``[]`` is today's single replica with today's names, file paths and state directory; a
    named replica ``n`` has the unit ``<unit>-n``, its own unit, environment and config files (named after
    its unit), its own record ``<root>/state/last_good-n`` and readiness job file.
    """
    selected = [str(g) for g in selected or ()]
    uuids = [str(g) for g in gpu_uuids or ()]
    by_id = dict(zip(selected, uuids)) if len(selected) == len(uuids) else {}
    planned, errors = plan_replicas(
        selected or uuids, tp_size, base_port, replica_list(replicas, count), unit_name=unit_name
    )
    if errors:
        raise ValueError("; ".join(errors))
    state = f"{runtime_root.rstrip('/')}/state"
    served = []
    for replica in planned:
        name, unit = replica["name"], replica["unit"]
        gpus = _replica_uuids(replica, uuids, by_id)
        suffix = f"-{name}" if name else ""
        served.append(
            {
                "name": name,
                "unit": unit,
                "port": replica["port"],
                "gpus": gpus,
                "unit_path": f"/etc/systemd/system/{unit}.service",
                "env_path": f"{config_dir}/{unit}.env",
                "config_path": f"{config_dir}/{unit}.yaml",
                "state_dir": last_good_dir(runtime_root.rstrip("/"), name),
                "readiness_job": f"{state}/readiness{suffix}.job",
                "deploy_marker": f"/run/{unit}-deploying",
            }
        )
    return served


def _replica_uuids(replica: dict, uuids: list[str], by_id: dict) -> list[str]:
    """A planned replica's GPUs as UUIDs: an operator id mapped by its position in the selection; the single
    replica has exactly today's CUDA_VISIBLE_DEVICES (every selected GPU)."""
    if replica["name"]:
        return [by_id.get(g, g) for g in replica["gpus"] or ()]
    return list(uuids)


def envelope_gpus(
    selected,
    gpu_uuids,
    tp_size: int,
    replicas=(),
    *,
    port: int,
    count: int = 0,
    unit_name: str = "sglang",
    gpu_facts=(),
    assumed_memory_mb: int = 0,
) -> list[dict]:
    """What the envelope planner sizes each replica on, one item per replica: ``{name, unit, gpus}``.

    ``gpus`` are the replica's OWN GPUs (the envelope must fit the memory of the cards that replica runs on, not of
    the host's selection): with ``gpu_facts`` (preflight's GPU facts, each with ``uuid``), the facts of its UUIDs in
    its order; without (``assumed_memory_mb`` > 0: hosts without GPUs), ``tp_size`` GPUs of the assumed memory (what
    one replica's tensor-parallel group holds). ``replicas``/``count``/``selected``/
    ``gpu_uuids`` as ``service_replicas``: ``[]`` is the single replica on every selected GPU (today's plan).
    Raises ``ValueError`` with every error of the replica list, or naming a replica GPU without facts.
    """
    selected = [str(g) for g in selected or ()]
    uuids = [str(g) for g in gpu_uuids or ()]
    by_id = dict(zip(selected, uuids)) if len(selected) == len(uuids) else {}
    planned, errors = plan_replicas(
        selected or uuids, tp_size, port, replica_list(replicas, count), unit_name=unit_name
    )
    if errors:
        raise ValueError("; ".join(errors))
    facts = {str(f.get("uuid")): f for f in gpu_facts or ()}
    out = []
    for replica in planned:
        own = _replica_uuids(replica, uuids, by_id)
        if facts:
            missing = [g for g in own if g not in facts]
            if missing:
                errors.append(f"replica {replica['name'] or replica['unit']}: no GPU facts for {', '.join(missing)}")
            gpus = [facts[g] for g in own if g in facts]
        else:
            memory = int(assumed_memory_mb or 0)
            gpus = [{"memory_total_mb": memory, "memory_free_mb": memory}] * tp_size
        out.append({"name": replica["name"], "unit": replica["unit"], "gpus": gpus})
    if errors:
        raise ValueError("; ".join(errors))
    return out


def host_verdict(results: list[dict]) -> dict:
    """The host's deploy from its replicas' verdicts: ready only when every replica is.

    ``results``: per replica ``{name, outcome}`` (the ``judge`` step's outcome). Returns ``{ready, failed,
    ready_replicas, failed_replicas}``: one replica that did not serve rolls the whole host back (every
    replica returns to the last good release, which they share).
    """
    failed = [r["name"] for r in results if r.get("outcome") != "ready"]
    return {
        "ready": not failed and bool(results),
        "failed": bool(failed) or not results,
        "ready_replicas": [r["name"] for r in results if r.get("outcome") == "ready"],
        "failed_replicas": failed,
    }


def _numbers(reports, key):
    return [r[key] for r in reports if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def out_of_gateways(reports: list[dict], rollbacks: dict, gateways) -> list[str]:
    """The replicas a gateway-aware deploy leaves out of its gateways (``sglang_service_gateways``): each one that
    did not serve (it never goes back), and each sibling whose rollback did not serve again (it goes back only once
    its rollback serves). ``rollbacks``: name -> ``{readiness}`` (``None`` when nothing was restored)."""
    if not gateways:
        return []
    out = []
    for r in reports:
        name = r.get("replica", "")
        rollback = rollbacks.get(name)
        if not r.get("ok") or (rollback is not None and not (rollback.get("readiness") or {}).get("ready")):
            out.append(name)
    return out


def host_report(host: str, reports: list[dict], texts: list[list[str]], rollbacks=None, gateways=()) -> dict:
    """One host's report over its replicas' reports (``sglang_release_report``, one per replica).

    The fields the fleet summary reads (``ok``, ``host``, ``release_id``, ``time_to_ready_s``,
    ``spec_accept_length``, ``speculative_algorithm``, ``failure_class``, ``rollback``) say the host: ok only
    when every replica serves the new release, the slowest time to ready, the lowest accept length, the first
    failed replica's class and rollback. ``replicas`` holds each replica's own report (its verdict).
    Returns ``{report, text, stats}`` as the ``report`` step does.
    """
    out = out_of_gateways(reports, rollbacks or {}, gateways)
    rollbacks = {
        name: rollback_state(rb.get("readiness"), target=rb.get("target", ""), unit=rb.get("unit", name))
        for name, rb in (rollbacks or {}).items()
    }
    reports = [
        dict(r, rolled_back_with_host=rollbacks[r.get("replica", "")])
        if r.get("ok") and r.get("replica", "") in rollbacks
        else r
        for r in reports
    ]
    failed = [r for r in reports if not r.get("ok")]
    first = failed[0] if failed else (reports[0] if reports else {})
    times, accepts = _numbers(reports, "time_to_ready_s"), _numbers(reports, "spec_accept_length")
    report = {
        "host": host,
        "ok": bool(reports) and not failed and not rollbacks,
        "unit": ", ".join(r.get("unit", "") for r in reports),
        "release_id": first.get("release_id", ""),
        "previous_release_id": first.get("previous_release_id", ""),
        "speculative_algorithm": next(
            (r["speculative_algorithm"] for r in reports if r.get("speculative_algorithm")), ""
        ),
        "time_to_ready_s": max(times) if times else None,
        "spec_accept_length": min(accepts) if accepts else None,
        "changed": any(r.get("changed") for r in reports),
        "attempts": [dict(a, replica=r.get("replica", "")) for r in reports for a in r.get("attempts") or ()],
        "replicas": {r.get("replica", ""): r for r in reports},
        "failed_replicas": [r.get("replica", "") for r in failed],
        "out_of_gateways": out,
    }
    if failed:
        report.update(
            failure_class=first.get("failure_class", ""),
            reason=first.get("reason", ""),
            rollback=first.get("rollback") or {},
        )
    text = [
        "%s: %d replica(s), %s"
        % (host, len(reports), "all serve" if report["ok"] else "FAILED: " + ", ".join(report["failed_replicas"]))
    ]
    for r, lines in zip(reports, texts):
        text += ["[%s] %s" % (r.get("replica", ""), line) for line in lines]
        if r.get("rolled_back_with_host"):
            text.append("[%s] rolled back with the host: %s" % (r.get("replica", ""), r["rolled_back_with_host"]))
        if r.get("replica", "") in out:
            text.append(
                "[%s] left out of the gateway(s) %s: put it back once it serves (playbooks/rolling.yml or"
                " playbooks/gateway.yml)" % (r.get("replica", ""), ", ".join(map(str, gateways)))
            )
    stats = {k: v for k, v in report.items() if k != "attempts"}
    stats["replicas"] = {
        name: {k: v for k, v in r.items() if k != "attempts"} for name, r in report["replicas"].items()
    }
    return {"report": report, "text": text, "stats": stats}


def rolling_order(workers: list[dict], min_serving: int) -> tuple[list[dict], list[str]]:
    """The order of a rolling restart through the gateway, or every error at once.

    ``workers``: ``gateway_workers``' items (host, replica, unit, url); ``min_serving``:
    ``sglang_deploy_min_serving``. One replica leaves the gateway at a time, so ``min_serving`` must leave room
    for one out: at most ``len(workers) - 1``. The order is the workers' (host, then replica). Each step says
    how many replicas must be healthy in the gateway before that replica is taken out (``needs_healthy``).
    """
    errors = []
    if not isinstance(min_serving, int) or isinstance(min_serving, bool) or min_serving < 1:
        errors.append(f"sglang_deploy_min_serving={min_serving!r}: allowed: an integer of at least 1")
    elif len(workers) - 1 < min_serving:
        errors.append(
            f"sglang_deploy_min_serving={min_serving} leaves no replica to restart: {len(workers)} replica(s) behind"
            f" the gateway, one at a time out; allowed: 1 to {max(len(workers) - 1, 1)}"
            + ("" if len(workers) > 1 else ", and at least 2 replicas")
        )
    if errors:
        return [], errors
    return [dict(w, needs_healthy=min_serving + 1, position=i) for i, w in enumerate(workers)], []


def merge_by_name(results: list[dict], updates: list[dict]) -> list[dict]:
    """``results`` (per replica, each with ``name``) with each update ``{name, ...}`` merged into its replica's
    entry (a later verdict, such as a failed record's; a rollback's result)."""
    later: dict[str, dict] = {}
    for update in updates:
        later.setdefault(update["name"], {}).update(update)
    return [dict(r, **later[r["name"]]) if r["name"] in later else r for r in results]
