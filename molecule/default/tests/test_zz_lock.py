"""The host lock on the lab host (issue 23): a deploy finds another run's live lock, waits, is refused naming
the holder and changes nothing. (A stale lock, taken before the host's last boot, is taken over by the first
of the two deploys of test_zzz_transactions.py, which saves a deploy of its own.)

Runs after test_default.py (file order): the converge and idempotence runs released their lock.
"""

import json
import time

from deploy_process import deploy
from scenario_fixtures import LOCK, place_lock


def show(lab_host):
    out = lab_host.check_output("systemctl show --property=MainPID,InvocationID,NRestarts sglang.service")
    return dict(line.split("=", 1) for line in out.splitlines())


def test_a_deploy_while_another_run_holds_the_lock_is_refused_naming_it(lab_host):
    assert not lab_host.file(LOCK).exists  # the earlier runs released theirs
    boot_id = lab_host.check_output("cat /proc/sys/kernel/random/boot_id").strip()
    place_lock(lab_host, boot_id)
    before = show(lab_host)
    try:
        started = time.monotonic()
        rc, out = deploy({"sglang_service_report_dir": "", "sglang_service_lock_timeout_s": 3})
        assert rc != 0, out[-3000:]
        assert "held by run otherrun0000 of play 'Deploy' from alice@ctl9 (controller pid 4242)" in out, out[-3000:]
        assert "host_locked" in out, out[-3000:]
        assert time.monotonic() - started >= 3
        assert json.loads(lab_host.file(LOCK).content_string)["run_id"] == "otherrun0000"
        assert show(lab_host) == before
    finally:
        lab_host.check_output("rm -f %s" % LOCK)
