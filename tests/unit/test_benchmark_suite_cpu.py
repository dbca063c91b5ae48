"""benchmarks/suite_cpu.py reads the kernel's process accounting records and says where each process ran.

Records are built here the way the kernel writes them (struct acct_v3), so the parser, the comp_t decoding and
the lab-host attribution are checked without root or a run of the suite.
"""

import importlib.util
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("suite_cpu", REPO / "benchmarks" / "suite_cpu.py")
suite_cpu = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_cpu)


def record(pid, ppid, comm, start, seconds, *, utime=0, stime=0, version=3):
    return suite_cpu.RECORD.pack(
        0, version, 0, 0, 0, 0, pid, ppid, start, float(seconds), utime, stime, 0, 0, 0, 0, 0, 0, comm.encode()
    )


def test_comp_t_is_a_13_bit_mantissa_with_a_base_8_exponent():
    assert suite_cpu.comp_t(100) == 100
    assert suite_cpu.comp_t(0x1FFF) == 8191
    assert suite_cpu.comp_t((1 << 13) | 5000) == 40000  # exponent 1: times 8
    assert suite_cpu.comp_t((2 << 13) | 3) == 192


def test_records_give_pid_parent_lifetime_name_and_cpu_seconds():
    (proc,) = suite_cpu.parse(record(42, 7, "ansible-playboo", 1000, 2.5, utime=150, stime=(1 << 13) | 10))
    assert (proc.pid, proc.ppid, proc.start, proc.end) == (42, 7, 1000.0, 1002.5)
    assert proc.comm == "ansible-playboo"  # the kernel keeps 15 characters of the name
    assert proc.cpu_s == pytest.approx(1.5 + 0.8)


def test_a_record_of_another_accounting_version_is_refused():
    with pytest.raises(ValueError, match="acct version 2"):
        suite_cpu.parse(record(1, 0, "sh", 1000, 1, version=2))


def test_what_descends_from_a_container_monitor_ran_on_a_lab_host_and_a_reused_pid_does_not():
    data = b"".join(
        [
            record(300, 200, "python3", 1010, 1, utime=26),  # a module run: sh (200) under conmon (100)
            record(200, 100, "sh", 1010, 1),
            record(400, 1, "ssh", 1005, 20, utime=1),  # the controller's ssh: no container ancestry
            record(500, 400, "ansible-playboo", 1006, 1, utime=16),
            record(100, 1, "conmon", 1000, 60),  # the container ends last, as its scenario's destroy
            record(200, 1, "sh", 1100, 1),  # pid 200 reused later on this machine
            record(600, 200, "python3", 1100, 1, utime=50),  # child of the later pid 200: this machine's
        ]
    )
    procs = suite_cpu.parse(data)
    assert suite_cpu.where(procs) == [
        suite_cpu.LAB,
        suite_cpu.LAB,
        suite_cpu.MACHINE,
        suite_cpu.MACHINE,
        suite_cpu.MACHINE,  # the monitor itself is podman's, on this machine
        suite_cpu.MACHINE,
        suite_cpu.MACHINE,
    ]
    result = suite_cpu.summary(procs)
    assert result["sides"] == pytest.approx({suite_cpu.LAB: 0.26, suite_cpu.MACHINE: 0.67})  # 0.01 + 0.16 + 0.5
    assert result["rows"][0] == (suite_cpu.MACHINE, "python3", 0.5, 1)
    assert (suite_cpu.LAB, "python3", 0.26, 1) in result["rows"]
    assert "| lab hosts | `python3` | 0.3 | 1 | 0.26 |" in suite_cpu.table(result)  # the share from unrounded CPU


def test_a_process_whose_parent_was_never_recorded_counts_for_this_machine():
    procs = suite_cpu.parse(record(9, 8, "python3", 1000, 1, utime=10))
    assert suite_cpu.where(procs) == [suite_cpu.MACHINE]


def test_read_prints_the_table_of_a_kept_file(tmp_path, capsys):
    kept = tmp_path / "kept.pacct"
    kept.write_bytes(record(100, 1, "conmon", 1000, 60) + record(101, 100, "systemd", 1000, 59, utime=70))
    assert suite_cpu.main(["--read", str(kept)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("0.7 CPU-s in 2 processes: lab hosts 0.7 CPU-s, this machine 0.0 CPU-s")
    assert "| lab hosts | `systemd` | 0.7 | 1 | 0.70 |" in out


def test_a_command_and_read_together_are_refused(tmp_path):
    with pytest.raises(SystemExit):
        suite_cpu.main(["--read", str(tmp_path / "x"), "true"])
