"""Requests to a lab host's gateway (smg) from inside that host, as the gateway and replicas scenarios send them.

Each request is one ``podman exec`` running curl against the gateway on the host's loopback, the key in a
header file that only that request reads (so concurrent requests from several threads do not share files).
"""

import json
import shlex
import threading
import time

BASE = "http://127.0.0.1:30080"


def curl(lab_host, key, path, body=None, timeout=15):
    """(HTTP status, body text) of one request from ``lab_host`` to its gateway, the key in a header file."""
    headers = "Authorization: Bearer %s\nContent-Type: application/json\n" % key
    data = "" if body is None else " --data-binary %s" % shlex.quote(json.dumps(body))
    tag = "%d-%d" % (threading.get_ident(), time.monotonic_ns())
    cmd = (
        "printf %%s %s > /run/h-%s && curl -sS -N -m %d -H @/run/h-%s -o /run/o-%s -w '%%{http_code}'%s %s%s;"
        " rm -f /run/h-%s; echo; cat /run/o-%s; rm -f /run/o-%s"
    ) % (shlex.quote(headers), tag, timeout, tag, tag, data, BASE, path, tag, tag, tag)
    out = lab_host.run(cmd)
    status, _, text = out.stdout.partition("\n")
    return int(status or 0), text


def address(lab_host):
    """The lab host's address on the lab network (what the gateway's worker URLs name)."""
    return lab_host.check_output("ip -4 -o addr show scope global | awk '{print $4}' | cut -d/ -f1 | head -1")


def workers(gateway, key):
    """The gateway's workers by URL (its /workers answer)."""
    status, text = curl(gateway, key, "/workers")
    assert status == 200, text
    return {w["url"]: w for w in json.loads(text)["workers"]}


def unit_state(lab_host, unit):
    """A worker unit's state in one line: is it still stopped (or running again), and did systemd restart it?"""
    props = " ".join("-p " + p for p in ("ActiveState", "SubState", "Result", "NRestarts", "ActiveEnterTimestamp"))
    out = lab_host.run("systemctl show %s %s.service" % (props, unit))
    return ", ".join(out.stdout.split("\n")).strip(", ")


def gateway_log(gateway, url, lines=30):
    """The gateway's journal lines about one worker URL (health transitions, failed requests), then its last lines
    whatever they name (a health loop that stopped logs no URL)."""
    journal = "journalctl -u sglang-gateway.service --no-pager"
    about = "%s -o cat | grep -F %s | tail -n %d" % (journal, shlex.quote(url), lines)
    last = "%s -o short-monotonic -n %d" % (journal, lines)
    return "%s\n--- last lines ---\n%s" % (gateway.run(about).stdout, gateway.run(last).stdout)
