"""One round trip to a lab host: everything the scenario tests look at, as JSON.

testinfra reaches podman containers through its Ansible backend, one Ansible run per call
(seconds each), so the scenarios' tests read a single snapshot taken by this script on the
host (Python 3 standard library only) instead of calling the host once per assertion.
"""

import hashlib
import json
import os
import pathlib

SCRIPT = r"""
import hashlib, json, os, pwd, grp, stat, subprocess, urllib.request

def run(*argv):
    p = subprocess.run(list(argv), capture_output=True, text=True)
    return {"rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}

def read(path):
    try:
        st = os.stat(path)
        with open(path, errors="replace") as f:
            content = f.read()
        return {"exists": True, "mode": stat.S_IMODE(st.st_mode), "user": pwd.getpwuid(st.st_uid).pw_name,
                "group": grp.getgrgid(st.st_gid).gr_name, "content": content}
    except FileNotFoundError:
        return {"exists": False}

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
for line in read("/etc/sglang/%s.yaml" % UNIT).get("content", "").splitlines():
    if line.startswith("api-key:"):
        KEY = json.loads(line.split(":", 1)[1])

PROPS = "--property=ActiveState,SubState,MainPID,NRestarts,UnitFileState,Result"
show = run("systemctl", "show", PROPS, UNIT + ".service")
try:
    user = pwd.getpwnam("sglang")
    user = {"exists": True, "uid": user.pw_uid, "shell": user.pw_shell, "group": grp.getgrgid(user.pw_gid).gr_name}
except KeyError:
    user = {"exists": False}
releases = sorted(os.listdir("/opt/sglang/releases")) if os.path.isdir("/opt/sglang/releases") else []

def unit_processes():
    # pid -> command line (NULs as spaces) of every process whose cgroup is the unit's
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/cgroup" % pid) as f:
                if not any(line.rstrip().endswith("/%s.service" % UNIT) for line in f):
                    continue
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            pass
    return found

journal = run("journalctl", "--no-pager", "-o", "cat")["stdout"]
print(json.dumps({
    "user": user,
    "unit_file": read("/etc/systemd/system/%s.service" % UNIT),
    "env_file": read("/etc/sglang/%s.env" % UNIT),
    "verify": run("systemd-analyze", "verify", "/etc/systemd/system/%s.service" % UNIT),
    "security": run("systemd-analyze", "security", "--no-pager", UNIT + ".service")["stdout"],
    "show": dict(l.split("=", 1) for l in show["stdout"].splitlines() if "=" in l),
    "listening": run("ss", "-Hltn", "sport = :%d" % PORT)["stdout"],
    "generate_with_key": generate(KEY),
    "generate_without_key": generate(None) if KEY else None,
    "first_main_pid": read("/var/tmp/molecule-first-main-pid").get("content", "").strip(),
    "current": os.readlink("/opt/sglang/current") if os.path.islink("/opt/sglang/current") else None,
    "releases": releases,
    "unit_processes": unit_processes(),
    "key_in_journal": bool(KEY) and KEY in journal,
    "host_key_sha256": hashlib.sha256(KEY.encode()).hexdigest(),
    "journal_lines": len(journal.splitlines()),
    "config_file": read("/etc/sglang/%s.yaml" % UNIT),
    "last_good": json.loads(read("/opt/sglang/state/last_good/deploy.json").get("content") or "null"),
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
