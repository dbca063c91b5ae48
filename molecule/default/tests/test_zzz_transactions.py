"""Deploys as transactions on the lab host (issue 23), after every other check of this scenario (file order).

Two deploys started at once onto a stale lock (another run's, taken before the host's last boot): the first to
reach the host takes it over and says so, the other waits for the host lock, both finish, and the host is left in
the state of the one that finished last (its environment in the file, in the running process and in the record),
with no lock left.

A deploy cancelled while readiness waits, and the deploy after it, run where AWX runs them: through
ansible-runner's own cancel (tests/awx/test_runner_lab.py); drift of a process started with another environment:
molecule rollback (test_zz_fault_trial.py).
"""

import json

import deploy_process
from deploy_process import finish
from scenario_fixtures import LOCK, main_pid, place_lock, process_env

ROOT = "/opt/sglang"
ENV_FILE = "/etc/sglang/sglang.env"


def start(marker):
    """A deploy (molecule/shared/deploy_process.py), ``marker`` in its environment, no report, a long lock wait."""
    return deploy_process.start(
        {
            "sglang_service_report_dir": "",
            "sglang_service_lock_timeout_s": 500,
            "sglang_service_environment": {"SPECDEC_TEST_RUN": marker},
        }
    )


def record(lab_host):
    return json.loads(lab_host.file(ROOT + "/state/last_good/deploy.json").content_string)


def test_two_deploys_at_once_onto_a_stale_lock_one_takes_it_over_one_waits_the_last_to_finish_serves(lab_host):
    assert not lab_host.file(LOCK).exists  # the earlier runs released theirs
    place_lock(lab_host, "00000000-not-this-boot")
    first = start("concurrent-a")
    second = start("concurrent-b")
    out_a, out_b = finish(first), finish(second)
    assert first.returncode == 0, out_a[-3000:]
    assert second.returncode == 0, out_b[-3000:]
    # Exactly one took the stale lock over (said, with why); the other found that run's live lock and waited.
    said = ("taking over the stale lock of run otherrun0000", "the host rebooted")
    took_over = [out for out in (out_a, out_b) if all(words in out for words in said)]
    assert len(took_over) == 1, (out_a[-3000:], out_b[-3000:])
    last = "concurrent-a" if first.finished_at > second.finished_at else "concurrent-b"
    # The state is the finished one's: the environment file, the running process, the record's observation.
    assert 'SPECDEC_TEST_RUN="%s"' % last in lab_host.file(ENV_FILE).content_string
    assert process_env(lab_host)["SPECDEC_TEST_RUN"] == last
    observed = record(lab_host)["observed"]
    invocation = lab_host.check_output("systemctl show --property=InvocationID --value sglang.service").strip()
    assert (observed["main_pid"], observed["invocation_id"]) == (main_pid(lab_host), invocation)
    assert not lab_host.file(LOCK).exists
