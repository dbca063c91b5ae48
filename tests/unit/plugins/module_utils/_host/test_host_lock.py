"""The host lock's decisions: take a free lock, keep our own, wait for and then refuse a live holder, take
over a stale one (rebooted host, dead host process, too old, unreadable and old) and say why."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock

NOW = 10_000.0
BOOT = "boot-a"


def record(run_id="run-other", started_at=NOW - 30, boot_id=BOOT, pid=0):
    return host_lock.make_record(
        run_id,
        owner="ctl1 (alice)",
        controller_pid=4242,
        play="Deploy",
        started_at=started_at,
        boot_id=boot_id,
        pid=pid,
    )


def decide(found, *, exists=True, waited_s=0.0, timeout_s=60, max_age_s=3600, mtime=NOW - 30, alive=True, boot=BOOT):
    return host_lock.decide(
        found,
        exists=exists,
        run_id="run-mine",
        now=NOW,
        mtime=mtime,
        boot_id=boot,
        max_age_s=max_age_s,
        waited_s=waited_s,
        timeout_s=timeout_s,
        pid_alive=lambda pid: alive,
    )


def test_a_free_host_is_taken():
    assert decide(None, exists=False)[0] == host_lock.ACQUIRE


def test_this_runs_own_lock_is_kept():
    assert decide(record(run_id="run-mine"))[0] == host_lock.OURS


def test_a_live_holder_is_waited_for_and_named():
    action, reason = decide(record(), waited_s=10)
    assert action == host_lock.WAIT
    assert "run-other" in reason and "Deploy" in reason and "ctl1 (alice)" in reason and "4242" in reason


def test_a_live_holder_is_refused_after_the_timeout_naming_it():
    action, reason = decide(record(), waited_s=60, timeout_s=60)
    assert action == host_lock.REFUSE
    assert "run run-other of play 'Deploy' from ctl1 (alice) (controller pid 4242)" in reason
    assert "started 30s ago" in reason and "timeout 60s" in reason


def test_a_zero_timeout_refuses_at_once():
    assert decide(record(), waited_s=0, timeout_s=0)[0] == host_lock.REFUSE


def test_a_lock_from_another_boot_is_taken_over_and_says_so():
    action, reason = decide(record(boot_id="boot-old"))
    assert action == host_lock.TAKE_OVER
    assert "rebooted" in reason and "boot-old" in reason and "run-other" in reason


def test_a_lock_whose_host_process_is_dead_is_taken_over():
    action, reason = decide(record(pid=999), alive=False)
    assert action == host_lock.TAKE_OVER
    assert "999" in reason and "no longer alive" in reason


def test_a_lock_whose_host_process_lives_is_waited_for():
    assert decide(record(pid=999), alive=True)[0] == host_lock.WAIT


def test_a_play_lock_without_host_pid_does_not_ask_for_a_pid():
    def never(pid):
        raise AssertionError("pid 0 checked")

    found = record(pid=0)
    action, _reason = host_lock.decide(
        found,
        exists=True,
        run_id="run-mine",
        now=NOW,
        mtime=NOW,
        boot_id=BOOT,
        max_age_s=3600,
        waited_s=0,
        timeout_s=60,
        pid_alive=never,
    )
    assert action == host_lock.WAIT


def test_a_lock_older_than_the_maximum_age_is_taken_over():
    action, reason = decide(record(started_at=NOW - 7200), max_age_s=3600)
    assert action == host_lock.TAKE_OVER
    assert "7200s ago" in reason and "3600s" in reason


def test_an_unreadable_lock_is_held_while_young_and_taken_over_when_old():
    assert decide(None, mtime=NOW - 5)[0] == host_lock.WAIT
    assert decide(None, mtime=NOW - 5, waited_s=60)[1].startswith("held by an unreadable lock")
    assert decide(None, mtime=NOW - 7200, max_age_s=3600)[0] == host_lock.TAKE_OVER


def test_a_missing_boot_id_on_either_side_is_not_a_reboot():
    found = record(boot_id="")
    assert decide(found)[0] == host_lock.WAIT
    assert decide(record(), boot="")[0] == host_lock.WAIT


@pytest.mark.parametrize("text", ["", "{", "[]", '{"owner": "x"}', '{"run_id": "r", "started_at": "soon"}'])
def test_content_that_is_not_a_record_parses_as_none(text):
    assert host_lock.parse(text) is None


def test_a_record_round_trips():
    found = record(pid=7)
    assert host_lock.parse(host_lock.dumps(found)) == found


def test_only_the_holder_releases():
    assert host_lock.release_action(record(run_id="run-mine"), True, "run-mine") == (True, "released")
    remove, reason = host_lock.release_action(record(), True, "run-mine")
    assert not remove and "run-other" in reason
    assert host_lock.release_action(None, True, "run-mine")[0] is False
    assert host_lock.release_action(None, False, "run-mine") == (False, "no lock is held")


# -- the controller's side: identity, process start, the holder's liveness ------------------------
CTL = host_lock.controller_identity("m-1", 4026531836)


def held(controller=CTL, pid=4242, start="boot-c:1000"):
    found = record()
    found.update(controller=controller, controller_pid=pid, controller_pid_start=start)
    return found


def test_the_controller_identity_is_its_machine_and_pid_namespace():
    assert CTL == "m-1/pidns:4026531836"
    assert host_lock.controller_identity("m-1", 4026532999) != CTL  # an execution environment container
    assert host_lock.controller_identity("", 1, "ctl9") == "host-ctl9/pidns:1"


def test_the_process_start_token_is_the_boot_and_field_22():
    stat = "4242 (ansible-playbook: a) S 1 4242 4242 0 -1 4194304 100 0 0 0 5 1 0 0 20 0 3 0 98765 1000 200"
    assert host_lock.process_start_token("boot-c", stat) == "boot-c:98765"
    assert host_lock.process_start_token("boot-c", "") == ""
    assert host_lock.process_start_token("boot-c", "4242 (x) S 1") == ""


def test_a_holder_whose_playbook_process_is_gone_is_dead():
    state, reason = host_lock.holder_liveness(held(), controller=CTL, pid_start=lambda pid: "")
    assert state == host_lock.DEAD and "4242" in reason and "gone" in reason


def test_a_reused_pid_is_dead():
    state, reason = host_lock.holder_liveness(held(), controller=CTL, pid_start=lambda pid: "boot-c:2000")
    assert state == host_lock.DEAD and "another process" in reason


def test_a_holder_after_a_controller_reboot_is_dead():
    state, _reason = host_lock.holder_liveness(held(), controller=CTL, pid_start=lambda pid: "boot-d:1000")
    assert state == host_lock.DEAD


def test_a_running_holder_is_alive():
    state, _reason = host_lock.holder_liveness(held(), controller=CTL, pid_start=lambda pid: "boot-c:1000")
    assert state == host_lock.ALIVE


def test_a_holder_from_another_controller_is_never_checked_here():
    def never(pid):
        raise AssertionError("another controller's pid was looked at")

    state, reason = host_lock.holder_liveness(held(controller="m-2/pidns:1"), controller=CTL, pid_start=never)
    assert state == host_lock.FOREIGN and "m-2/pidns:1" in reason
    state, _reason = host_lock.holder_liveness(held(controller=""), controller=CTL, pid_start=never)
    assert state == host_lock.FOREIGN
    assert host_lock.holder_liveness(None, controller=CTL, pid_start=never)[0] == host_lock.FOREIGN


def _decide_fresh_live_holder(found, **kwargs):
    """decide() on an existing, fresh lock of this boot whose holder pid is alive."""
    return host_lock.decide(
        found, exists=True, run_id="run-mine", now=NOW, mtime=NOW, boot_id=BOOT, max_age_s=3600,
        waited_s=0, timeout_s=60, pid_alive=lambda pid: True, **kwargs,
    )  # fmt: skip


def test_the_controller_names_a_dead_run_and_only_its_lock_is_taken_over():
    found = held()
    action, reason = _decide_fresh_live_holder(
        found,
        take_over_run_id="run-other",
        take_over_reason="its ansible-playbook process 4242 on this controller is gone",
        wait=False,
    )
    assert action == host_lock.TAKE_OVER and "run-other" in reason and "is gone" in reason
    # Another run took the lock meanwhile: the dead run's verdict does not apply to it.
    action, _reason = _decide_fresh_live_holder(
        found,
        take_over_run_id="run-dead-before",
        wait=False,
    )
    assert action == host_lock.HELD


def test_the_operator_breaks_a_foreign_lock_and_it_is_said():
    action, reason = host_lock.decide(
        held(controller="m-2/pidns:1"),
        exists=True,
        run_id="run-mine",
        now=NOW,
        mtime=NOW,
        boot_id=BOOT,
        max_age_s=3600,
        waited_s=0,
        timeout_s=60,
        pid_alive=lambda pid: True,
        break_lock=True,
    )
    assert action == host_lock.TAKE_OVER and "sglang_service_lock_break" in reason and "run-other" in reason


def test_the_refusal_names_the_holder_the_liveness_and_the_way_out():
    text = host_lock.refusal(
        held(controller="m-2/pidns:1"),
        path="/opt/sglang/state/host.lock",
        waited_s=3,
        timeout_s=3,
        max_age_s=14400,
        liveness_reason="it was taken from another controller (m-2/pidns:1)",
        now=NOW,
    )
    holder = "run run-other of play 'Deploy' from ctl1 (alice) (controller pid 4242, controller m-2/pidns:1)"
    assert "held by " + holder in text
    assert "sglang_service_lock_break=true" in text and "14400" in text and "another controller" in text
