#!/usr/bin/env python3
"""Where a command's CPU goes, by process name, split between this machine and the lab hosts.

    benchmarks/suite_cpu.py [--keep FILE] -- scripts/test            # the whole suite (as .ci/run runs it)
    benchmarks/suite_cpu.py -- molecule test -s default             # one scenario
    benchmarks/suite_cpu.py --read FILE                              # a kept accounting file again

It turns on the kernel's process accounting (acct(2): root, a kernel with BSD process accounting v3) for the
length of the command, so every process that ends meanwhile is counted with its CPU time, however short it
lived: the Ansible worker forks, each module's Python on a lab host, every ``ssh`` and ``podman exec``. A process
runs "on a lab host" when it descends from a ``conmon`` (podman's container monitor); everything else ran on this
machine. Processes still running when the command ends are not counted (run whole scenarios, which remove their
containers). Accounting is turned off again however the command ends. Not part of CI; docs/benchmarks.md, "The
test suite", quotes a run.
"""

import argparse
import collections
import ctypes
import dataclasses
import os
import struct
import subprocess
import sys
import tempfile
import time

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t each), comm[16].
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
ACCT_VERSION = 3
TICKS = 100  # AHZ: comp_t times count 1/100 s
CONTAINER_MONITOR = "conmon"
LAB, MACHINE = "lab hosts", "this machine"


@dataclasses.dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    start: float  # seconds since the epoch
    end: float
    comm: str
    cpu_s: float


def comp_t(value):
    """A comp_t as an integer: 13-bit mantissa, 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (((value >> 13) & 0x7) * 3)


def parse(data):
    """Every v3 record of an accounting file, in the order the processes ended."""
    procs = []
    for offset in range(0, len(data) - RECORD.size + 1, RECORD.size):
        (_, version, _, _, _, _, pid, ppid, btime, etime, utime, stime, *_, comm) = RECORD.unpack_from(data, offset)
        if version & 0x0F != ACCT_VERSION:
            raise ValueError(f"record {offset // RECORD.size}: acct version {version & 0x0F}, not {ACCT_VERSION}")
        cpu = (comp_t(utime) + comp_t(stime)) / TICKS
        procs.append(Proc(pid, ppid, float(btime), btime + etime, comm.split(b"\0")[0].decode(errors="replace"), cpu))
    return procs


def where(procs):
    """LAB or MACHINE for each process (same order): LAB when an ancestor is a container monitor.

    A parent is the process with the child's ppid that lived when the child started (pids are reused over a long
    run); one that ended unrecorded (still running at the end) ends the walk on this machine's side."""
    by_pid = collections.defaultdict(list)
    for index, proc in enumerate(procs):
        by_pid[proc.pid].append(index)

    def parent(proc):
        # btime has whole seconds: a parent may seem to start up to 1 s after its child
        alive = [
            i for i in by_pid.get(proc.ppid, ()) if procs[i].start <= proc.start + 1 and procs[i].end >= proc.start - 1
        ]
        return max(alive, key=lambda i: procs[i].start) if alive else None

    below = {}  # index -> whether what it starts runs on a lab host (it is a container monitor or under one)

    def lab_below(index):
        chain, node, found = [], index, False
        while node is not None and node not in chain:  # a pid reused within a second could loop
            if node in below:
                found = below[node]
                break
            chain.append(node)
            if procs[node].comm == CONTAINER_MONITOR:
                found = True
                break
            node = parent(procs[node])
        for seen in chain:
            below[seen] = found
        return found

    sides = []
    for proc in procs:
        up = parent(proc)
        sides.append(LAB if up is not None and lab_below(up) else MACHINE)
    return sides


def summary(procs, top=20):
    """{"total": CPU-s, "processes": n, "sides": {side: CPU-s}, "rows": [(side, comm, CPU-s, n)], largest first}
    (CPU-s unrounded: ``table`` rounds what it prints)."""
    cpu, count, sides = collections.Counter(), collections.Counter(), collections.Counter()
    for proc, side in zip(procs, where(procs)):
        cpu[(side, proc.comm)] += proc.cpu_s
        count[(side, proc.comm)] += 1
        sides[side] += proc.cpu_s
    rows = [(side, comm, seconds, count[(side, comm)]) for (side, comm), seconds in cpu.most_common(top)]
    return {"total": sum(sides.values()), "processes": len(procs), "sides": dict(sides), "rows": rows}


def table(result):
    lines = [
        f"{result['total']:.1f} CPU-s in {result['processes']} processes: "
        + ", ".join(f"{side} {seconds:.1f} CPU-s" for side, seconds in sorted(result["sides"].items())),
        "",
        "| where | process | CPU-s | processes | CPU-s each |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {s} | `{c}` | {t:.1f} | {n} | {t / n:.2f} |" for s, c, t, n in result["rows"]]
    return "\n".join(lines)


def busy_ticks():
    fields = [int(f) for f in open("/proc/stat").readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # all but idle and iowait


def account(path, command):
    """Run ``command`` with process accounting into ``path``: (exit status, wall s, busy CPU-s of the machine)."""
    libc = ctypes.CDLL(None, use_errno=True)
    open(path, "wb").close()
    if libc.acct(os.fsencode(path)) != 0:
        err = ctypes.get_errno()
        sys.exit(f"acct({path}): {os.strerror(err)} (root and a kernel with BSD process accounting are needed)")
    busy0, start = busy_ticks(), time.monotonic()
    try:
        rc = subprocess.call(command)
    finally:
        libc.acct(None)
    return rc, time.monotonic() - start, (busy_ticks() - busy0) / os.sysconf("SC_CLK_TCK")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--read", help="an accounting file to summarise instead of running a command")
    parser.add_argument("--keep", help="keep the accounting file here")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("command", nargs="*")
    args = parser.parse_args(argv)
    if bool(args.read) == bool(args.command):
        parser.error("give either --read FILE or -- COMMAND")
    rc, header = 0, ""
    if args.read:
        path = args.read
    else:
        if args.keep:
            path = args.keep
        else:
            handle, path = tempfile.mkstemp(prefix="suite-cpu-", suffix=".pacct")
            os.close(handle)
        rc, wall, busy = account(path, args.command)
        header = f"`{' '.join(args.command)}`: exit status {rc}, {wall:.0f} s, the machine busy {busy:.0f} CPU-s\n"
    with open(path, "rb") as handle:
        result = summary(parse(handle.read()), args.top)
    if not args.read and not args.keep:
        os.unlink(path)
    print(header + table(result))
    return rc


if __name__ == "__main__":
    sys.exit(main())
