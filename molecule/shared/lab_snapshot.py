"""What testinfra's modules cannot see on a lab host, in one round trip, as JSON.

The scenarios' tests check services, sockets, files, users and processes with testinfra's own
modules (the ``lab_host`` fixture, molecule/shared/lab_host.py). This script (Python 3 standard
library only, run on the host) covers the rest: generations authenticated with the key of the
server's own config file (the key must never be on a command line, where Ansible would log it to
the journal), whether the journal shows the key, and the key's digest to compare with the
inventory's.
"""

import hashlib
import json
import os
import pathlib

SCRIPT = r"""
import hashlib, json, subprocess, urllib.request

def generate(key):
    body = json.dumps({"text": "Say hi.", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}).encode()
    req = urllib.request.Request("http://127.0.0.1:%d/generate" % PORT, data=body,
                                 headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return {"status": r.status, "body": json.loads(r.read())}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "body": None}
    except Exception as e:  # refused, timeout
        return {"status": None, "error": repr(e)}

# The key is read on the host (the server's --config file), never passed in: this script's own
# command line is logged to the journal by Ansible, and must not put the key there.
KEY = ""
try:
    with open("/etc/sglang/%s.yaml" % UNIT, errors="replace") as f:
        for line in f.read().splitlines():
            if line.startswith("api-key:"):
                KEY = json.loads(line.split(":", 1)[1])
except FileNotFoundError:
    pass

journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat"], capture_output=True, text=True).stdout
print(json.dumps({
    "generate_with_key": generate(KEY),
    "generate_without_key": generate(None) if KEY else None,
    "key_in_journal": bool(KEY) and KEY in journal,
    "host_key_sha256": hashlib.sha256(KEY.encode()).hexdigest(),
    "journal_lines": len(journal.splitlines()),
}))
"""


def snapshot(host, unit="sglang", port=30000, key=""):
    """Take the snapshot on `host` (a testinfra host) and return it as a dict.

    The generations authenticate with the key of the server's config file on the host; ``key`` (the
    inventory's) is never sent to the host, and ``key_matches`` says whether the two are the same.
    """
    script = f"UNIT, PORT = {unit!r}, {port!r}\n" + SCRIPT
    out = json.loads(host.check_output("python3 -c %s", script))
    out["key_matches"] = out.pop("host_key_sha256") == hashlib.sha256(key.encode()).hexdigest()
    return out


def controller_reports():
    """The deploy reports (sglang_service_report_dir) the scenario wrote on the controller, by file stem."""
    reports = pathlib.Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "reports"
    return {p.stem: json.loads(p.read_text()) for p in sorted(reports.glob("*.json"))}
