"""Fixtures every scenario's testinfra tests share (imported by each scenario's conftest).

- ``lab_host``: the scenario's host behind testinfra's own modules (``service``, ``socket``, ``file``,
  ``user``, ``process``), one ``podman exec`` per command (molecule/shared/lab_host.py). Use it for what a
  test checks on the host; ``host`` (molecule's ``ansible://`` backend, one Ansible run per call) is
  for Ansible itself (``host.ansible.get_variables()``).
- ``lab``: what testinfra cannot see, one snapshot (molecule/shared/lab_snapshot.py): generations
  with the server's own key, the key in the journal.
- ``report``: this host's deploy report on the controller.

Readers for what several scenarios look at, through ``lab_host`` when called: ``unit_properties``
(``systemctl show`` of the unit as a dict), ``last_good`` (the release record), ``current`` (where
the ``current`` link points), ``releases`` (the release directories), ``main_pid`` and ``process_env``
(the unit's main process and the environment it runs with).
"""

import json
import shlex
import time

import pytest
from lab_host import lab_host as _lab_host
from lab_snapshot import controller_reports, snapshot

UNIT = "sglang"
LOCK = "/opt/sglang/state/host.lock"


@pytest.fixture(scope="module")
def key(host):
    """The lab's API key (inventory/group_vars/lab), so the snapshot's generation is authorised."""
    return host.ansible.get_variables()["sglang_service_api_key"]


@pytest.fixture(scope="module")
def lab_host(host):
    """The molecule host (its container has the platform's name) for testinfra's modules."""
    return _lab_host(host.backend.get_hostname())


@pytest.fixture(scope="module")
def lab(lab_host, key):
    """One snapshot of what testinfra's modules cannot see (molecule/shared/lab_snapshot.py)."""
    return snapshot(lab_host, key=key)


@pytest.fixture(scope="module")
def report(host):
    """The deploy report the scenario wrote on the controller for this host."""
    return controller_reports()[host.backend.get_hostname()]


def unit_properties(lab_host, unit=UNIT):
    """``systemctl show`` of the unit (ActiveState, MainPID, NRestarts, UnitFileState, ...)."""
    return lab_host.service(unit).systemd_properties


def last_good(lab_host):
    """The release record (deploy.json) of the last good release, or None where none was recorded."""
    record = lab_host.file("/opt/sglang/state/last_good/deploy.json")
    return json.loads(record.content_string) if record.exists else None


def current(lab_host):
    """Where /opt/sglang/current points (None when it is not a link)."""
    link = lab_host.file("/opt/sglang/current")
    return link.linked_to if link.is_symlink else None


def releases(lab_host):
    """The release directories on the host."""
    root = lab_host.file("/opt/sglang/releases")
    return sorted(root.listdir()) if root.is_directory else []


def main_pid(lab_host, unit=UNIT):
    """The unit's main process id (0: none)."""
    return int(lab_host.check_output("systemctl show --property=MainPID --value %s.service" % unit))


def process_env(lab_host, unit=UNIT):
    """The environment the unit's main process runs with (from /proc, not from the files that configure it)."""
    raw = lab_host.check_output("tr '\\0' '\\n' < /proc/%d/environ" % main_pid(lab_host, unit))
    return dict(line.split("=", 1) for line in raw.splitlines() if "=" in line)


def place_lock(lab_host, boot_id):
    """Another run's host lock (run otherrun0000 of alice@ctl9), as taken in the boot ``boot_id``."""
    held = {
        "run_id": "otherrun0000",
        "owner": "alice@ctl9",
        "controller_pid": 4242,
        "play": "Deploy",
        "started_at": time.time(),
        "boot_id": boot_id,
        "pid": 0,
    }
    lab_host.check_output("umask 077 && printf '%%s\\n' %s > %s" % (shlex.quote(json.dumps(held)), LOCK))
