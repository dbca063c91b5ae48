"""Hosts without systemd: a pid / pidfile watched through /proc, and the end of a log file."""

import os

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import process_state


def fake_proc(root, pid, state="S", start="123456", comm="python3 (sglang)"):
    d = root / str(pid)
    d.mkdir(parents=True, exist_ok=True)
    rest = [state] + ["0"] * 18 + [start] + ["0"] * 10
    (d / "stat").write_text("%d (%s) %s\n" % (pid, comm, " ".join(rest)))


def test_process_stat_handles_parentheses_in_comm(tmp_path):
    fake_proc(tmp_path, 7, state="R", start="999", comm="weird) name (x")
    assert process_state.process_stat(7, str(tmp_path)) == ("R", "999")
    assert process_state.process_stat(8, str(tmp_path)) is None


def test_read_pidfile(tmp_path):
    path = tmp_path / "pid"
    assert process_state.read_pidfile(str(path)) is None
    path.write_text("4242\n")
    assert process_state.read_pidfile(str(path)) == 4242
    path.write_text("garbage")
    assert process_state.read_pidfile(str(path)) is None


def test_pid_alive_then_dead(tmp_path):
    fake_proc(tmp_path, 10)
    watcher = process_state.ProcessWatcher(pid=10, proc_root=str(tmp_path))
    assert watcher.poll().alive
    (tmp_path / "10" / "stat").unlink()
    watch = watcher.poll()
    assert watch.dead and "gone" in watch.description


def test_zombie_counts_as_dead(tmp_path):
    fake_proc(tmp_path, 10)
    watcher = process_state.ProcessWatcher(pid=10, proc_root=str(tmp_path))
    watcher.poll()
    fake_proc(tmp_path, 10, state="Z")
    watch = watcher.poll()
    assert watch.dead and "zombie" in watch.description


def test_missing_process_at_start_is_dead(tmp_path):
    watcher = process_state.ProcessWatcher(pid=99, proc_root=str(tmp_path))
    assert watcher.poll().dead


def test_pidfile_naming_a_new_live_process_is_a_restart(tmp_path):
    pidfile = tmp_path / "sglang.pid"
    pidfile.write_text("10")
    fake_proc(tmp_path, 10)
    fake_proc(tmp_path, 11)
    watcher = process_state.ProcessWatcher(pidfile=str(pidfile), proc_root=str(tmp_path))
    assert watcher.poll().alive
    pidfile.write_text("11")
    watch = watcher.poll()
    assert watch.restarted and "10 -> 11" in watch.description


def test_reused_pid_is_a_restart(tmp_path):
    fake_proc(tmp_path, 10, start="100")
    watcher = process_state.ProcessWatcher(pid=10, proc_root=str(tmp_path))
    watcher.poll()
    fake_proc(tmp_path, 10, start="200")
    assert watcher.poll().restarted


def test_log_tail_starts_at_a_line_boundary(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("".join("line %d\n" % i for i in range(1000)))
    text = process_state.read_log_tail(str(log), max_bytes=100)
    assert text.splitlines()[0].startswith("line ")
    assert text.endswith("line 999\n")
    assert process_state.read_log_tail(str(tmp_path / "missing")) == ""
    assert process_state.read_log_tail(None) == ""


def test_read_log_with_tail_lines(tmp_path):
    log = tmp_path / "sglang.log"
    log.write_text("a\nb\nc\n")
    fake_proc(tmp_path, os.getpid())
    watcher = process_state.ProcessWatcher(pid=os.getpid(), log_file=str(log), proc_root=str(tmp_path))
    assert watcher.read_log(tail_lines=2) == "b\nc"
    assert watcher.read_log() == "a\nb\nc\n"
