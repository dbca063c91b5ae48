"""Requests to a lab host's gateway (smg) from inside that host, as the gateway and replicas scenarios send them.

Each request is one ``podman exec`` running curl against the gateway on the host's loopback, the key in a
header file that only that request reads (so concurrent requests from several threads do not share files).
"""

import json
import shlex
import subprocess
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


def watchdog_log(lab_host, unit, lines=10):
    """The last lines of a unit's watchdog (``<unit>-watch.service``): did one of its runs restart the unit?"""
    return lab_host.run("journalctl -u %s-watch.service -o short-monotonic --no-pager -n %d" % (unit, lines)).stdout


def gateway_log(gateway, url, lines=30):
    """The gateway's journal lines about one worker URL (health transitions, failed requests), then its last lines
    whatever they name (a health loop that stopped logs no URL)."""
    journal = "journalctl -u sglang-gateway.service --no-pager"
    about = "%s -o cat | grep -F %s | tail -n %d" % (journal, shlex.quote(url), lines)
    last = "%s -o short-monotonic -n %d" % (journal, lines)
    return "%s\n--- last lines ---\n%s" % (gateway.run(about).stdout, gateway.run(last).stdout)


# The watch runs inside the gateway's host in one process that asks /workers every 0.1 s: a state that lasts a
# second or two (a killed replica that systemd restarts) is seen even when one `podman exec` takes longer than
# that on a loaded machine. The key comes on stdin; "watching" is printed once the first answer came.
WATCH_SCRIPT = r"""
import http.client, json, sys, time
key, url, seconds = sys.stdin.readline().strip(), sys.argv[1], float(sys.argv[2])
def state():
    try:
        conn = http.client.HTTPConnection("127.0.0.1", 30080, timeout=5)
        conn.request("GET", "/workers", headers={"Authorization": "Bearer " + key})
        workers = {w["url"]: w for w in json.loads(conn.getresponse().read())["workers"]}
    except Exception as exc:
        return ["no answer", repr(exc)[:200]]
    worker = workers.get(url)
    return ["absent", None] if worker is None else [worker["is_healthy"], worker.get("status")]
changes, last = [], state()
print("watching", flush=True)
start = time.monotonic()
changes.append([0.0, last])
while time.monotonic() - start < seconds and last[0] is not False:
    time.sleep(0.1)
    now = state()
    if now != last:
        changes.append([round(time.monotonic() - start, 2), now])
        last = now
print(json.dumps(changes))
"""


class WorkerWatch:
    """Inside ``gateway``'s host, the gateway's state of one worker URL from the block's start until the gateway
    marks it unhealthy or ``seconds`` pass: ``changes`` is [[seconds since the watch began, [is_healthy, status]],
    ...], every change of state once. The block's body runs once the watch has its first answer."""

    def __init__(self, gateway, key, url, seconds=90):
        self.gateway, self.key, self.url, self.seconds = gateway, key, url, seconds
        self.changes = []

    def __enter__(self):
        argv = ["podman", "exec", "-i", self.gateway.backend.container, "python3", "-c", WATCH_SCRIPT]
        argv += [self.url, str(self.seconds)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.proc.stdin.write(self.key + "\n")
        self.proc.stdin.flush()
        first = self.proc.stdout.readline()
        if first.strip() != "watching":
            self.proc.kill()
            raise AssertionError("the watch of %s did not start: %r %s" % (self.url, first, self.proc.stderr.read()))
        self.started = time.monotonic()  # about the watch's own zero (its first answer came just before)
        return self

    def __exit__(self, *exc):
        out, err = self.proc.communicate(timeout=self.seconds + 60)
        assert self.proc.returncode == 0, (self.proc.returncode, err[-3000:])
        self.changes = json.loads(out)

    @property
    def unhealthy(self):
        """The first change in which the gateway counted the worker unhealthy, or None."""
        return next((change for change in self.changes if change[1][0] is False), None)
