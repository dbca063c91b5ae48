"""A full disk at the record step (issue 23), after the rollback checks of this scenario (file order).

On the host whose release 2 crashed on start (lab1), its deploys limited to it.

Release 1 serves and is recorded. The directory of the record and of the last good files
(``/opt/sglang/state/last_good``) is put on a file system of its own, 1 MiB, its contents kept, and filled
(a real ENOSPC: a tmpfs mounted in the container's mount namespace, the way a full disk looks to the
module). A deploy that only changes the environment then restarts, serves, and cannot record: it must fail
as ``record_failed``, roll back to the last good files and leave the record, its copies and no temporary
file behind, with the recorded environment running again. With space again the same deploy records.
"""

import json

import pytest
from deploy_process import deploy
from scenario_fixtures import last_good, process_env

# The other host (dies1) is left as its own checks found it.
testinfra_hosts = ["ansible://specdec-rollback-lab1"]
GOOD = "/opt/sglang/state/last_good"
SAVED = "/root/last_good.saved"
BALLAST = GOOD + "/ballast"
ENV_FILE = "/etc/sglang/sglang.env"


def listing(lab_host):
    return sorted(lab_host.file(GOOD).listdir())


@pytest.fixture
def full_record_dir(lab_host):
    """GOOD on a 1 MiB tmpfs holding what it held, filled to the last block; put back afterwards."""
    lab_host.check_output(
        f"set -e; rm -rf {SAVED}; cp -a {GOOD} {SAVED}; mount -t tmpfs -o size=1m,mode=0700 specdec-full {GOOD};"
        f" cp -a {SAVED}/. {GOOD}/"
    )
    try:
        fill = lab_host.run("dd if=/dev/zero of=%s bs=4k" % BALLAST)
        assert "No space left on device" in fill.stderr, fill.stderr
        yield
    finally:
        lab_host.run(
            f"set -e; rm -rf {SAVED}; cp -a {GOOD} {SAVED}; rm -f {SAVED}/ballast; umount {GOOD};"
            f" rm -rf {GOOD}; cp -a {SAVED} {GOOD}; rm -rf {SAVED}"
        )


def test_a_full_disk_at_the_record_step_rolls_back_and_keeps_the_record(lab_host, full_record_dir, tmp_path):
    record_before = lab_host.file(GOOD + "/deploy.json").content_string
    files_before = listing(lab_host)
    env_before = lab_host.file(ENV_FILE).content_string
    assert "full-disk" not in env_before
    change = {"sglang_service_environment": {"SPECDEC_TEST_RUN": "full-disk"}}

    host = lab_host.backend.get_hostname()
    rc, out = deploy({**change, "sglang_service_report_dir": str(tmp_path)}, limit=host)
    assert rc != 0, out[-3000:]
    report = json.loads((tmp_path / ("%s.json" % host)).read_text())
    assert (report["failure_class"], report["phase"]) == ("record_failed", "record"), out[-3000:]
    assert report["reason"].startswith("no space left to record the release in %s" % GOOD), report["reason"]
    assert report["rollback"]["ready"] is True
    assert report["rollback"]["probe"]["completion_tokens"] > 0
    # All or nothing: the record and the last good copies as they were, no temporary file next to them.
    assert lab_host.file(GOOD + "/deploy.json").content_string == record_before
    assert listing(lab_host) == files_before
    # The recorded environment serves again: in the file and in the running process.
    assert lab_host.file(ENV_FILE).content_string == env_before
    assert process_env(lab_host).get("SPECDEC_TEST_RUN") != "full-disk"
    assert lab_host.service("sglang").is_running

    lab_host.check_output("rm -f %s" % BALLAST)
    rc, out = deploy(change, limit=host)
    assert rc == 0, out[-3000:]
    assert process_env(lab_host)["SPECDEC_TEST_RUN"] == "full-disk"
    assert last_good(lab_host)["recorded_at"] >= json.loads(record_before)["recorded_at"]
    assert "full-disk" in lab_host.file(GOOD + "/sglang.env").content_string
