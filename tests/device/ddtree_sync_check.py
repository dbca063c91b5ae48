# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Host synchronisations inside a speculative decode step, DFLASH's and DDTREE's (device runs only).

Issue 32 asks that DDTREE's verify step run with no host synchronisation. tests/device/ddtree_tree_check.py
proves it for the tree builders alone; this probe watches the whole step of a real server: the step
(DFlashWorkerV2.forward_batch_generation, the draft forward included) runs under torch's sync debug mode
``warn`` (``torch.cuda.set_sync_debug_mode``, which makes every synchronising CUDA call of torch warn), and each
warning is counted by where it was raised (file:line) and whether it came from inside DDTREE's own part
(ddtree_worker.ddtree_verify_step: the tree, the verify forward, the commit). A DFLASH server measured the same
way is the baseline: syncs both share (the scheduler's, the draft's) are not DDTREE's.

A server checked this way runs with ``server_env``: SPECDEC_SYNC_CHECK=PATH and, first on its PYTHONPATH,
tests/device/sglang_plugin, whose dist-info registers ``sglang_plugin`` under sglang's plugin entry point group
(``sglang.srt.plugins``, loaded in every process sglang starts). Every WRITE_EVERY decode steps PATH is rewritten
with the running totals (``tally``); ``summarize`` turns them into steps with and without a sync and the
locations (tested on a CPU by tests/device/test_ddtree_sync_check.py). The mode is process-wide, so a sync of
another thread during a step is counted too, under its own location. Warn mode changes nothing but warnings;
still, keep a checked server apart from speed records.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddtree_accept_stats  # tests/device: the plugins' shared file helpers
import ddtree_host_time  # tests/device: how a decode step is found and a part resolved

ENV = "SPECDEC_SYNC_CHECK"
WRITE_EVERY = 16
STEP = ddtree_host_time.STEP
PART = ddtree_host_time.DDTREE_STEP
# torch's warning text for a synchronising call under set_sync_debug_mode("warn")
SYNC_WARNING = "called a synchronizing CUDA operation"


def empty():
    return {"decode_steps": 0, "steps_with_sync": 0, "steps_with_ddtree_sync": 0, "locations": {}}


def tally(stats, syncs):
    """Add one decode step whose syncs are ``syncs``: [(location, inside DDTREE's part)]."""
    stats["decode_steps"] += 1
    stats["steps_with_sync"] += bool(syncs)
    stats["steps_with_ddtree_sync"] += any(inside for _, inside in syncs)
    for location, inside in syncs:
        entry = stats["locations"].setdefault(
            location, {"syncs": 0, "in_ddtree_part": 0, "first_step": stats["decode_steps"]}
        )
        entry["syncs"] += 1
        entry["in_ddtree_part"] += int(inside)
    return stats


def summarize(stats):
    """Decode steps, those with any sync and with one inside DDTREE's part, and every location (most first)."""
    steps = int(stats.get("decode_steps") or 0)
    locations = sorted(stats.get("locations", {}).items(), key=lambda item: (-item[1]["syncs"], item[0]))
    return {
        "decode_steps": steps,
        "steps_with_sync": int(stats.get("steps_with_sync") or 0),
        "steps_with_ddtree_sync": int(stats.get("steps_with_ddtree_sync") or 0),
        "locations": [dict(location=name, **entry) for name, entry in locations],
    }


def _torch_mode():
    import torch  # noqa: PLC0415 - only in a server that sglang started

    return torch.cuda.get_sync_debug_mode, torch.cuda.set_sync_debug_mode


class Probe:
    """The running totals of one server process and the wrappers that feed them. ``mode``: (get, set) of the
    sync debug mode (torch's by default)."""

    def __init__(self, path, mode=None):
        self.path, self.mode, self.stats = path, mode, empty()
        self.in_step, self.in_part, self.syncs = False, False, []

    def _recorder(self, shown):
        """A showwarning that counts torch's sync warnings and passes every other warning to ``shown``."""

        def record(message, category, filename, lineno, *rest, **kw):
            if SYNC_WARNING in str(message):
                self.syncs.append(("%s:%d" % (os.path.basename(filename), lineno), self.in_part))
            else:
                shown(message, category, filename, lineno, *rest, **kw)

        return record

    def step(self, func):
        @functools.wraps(func)
        def checked(worker, batch, *args, **kwargs):
            if self.in_step or not ddtree_host_time.is_decode(batch):
                return func(worker, batch, *args, **kwargs)
            get_mode, set_mode = self.mode or _torch_mode()
            before = get_mode()
            self.in_step, self.syncs = True, []
            shown = warnings.showwarning
            with warnings.catch_warnings():
                warnings.simplefilter("always")  # every sync, not the first of each line
                warnings.showwarning = self._recorder(shown)
                set_mode("warn")
                try:
                    return func(worker, batch, *args, **kwargs)
                finally:
                    set_mode(before)
                    self.in_step = False
                    tally(self.stats, self.syncs)
                    if self.stats["decode_steps"] % WRITE_EVERY == 0:
                        ddtree_accept_stats.write(self.path, self.stats)

        checked.__wrapped__, checked.specdec_sync_check = func, True
        return checked

    def part(self, func):
        @functools.wraps(func)
        def checked(*args, **kwargs):
            outer, self.in_part = self.in_part, self.in_step
            try:
                return func(*args, **kwargs)
            finally:
                self.in_part = outer

        checked.__wrapped__, checked.specdec_sync_check = func, True
        return checked


def install(probe, step=STEP, part=PART):
    """Wrap the step and DDTREE's part where the release has them; returns the names wrapped (a second install
    wraps nothing again)."""
    return ddtree_host_time.wrap_each(
        (("step", *step), ("ddtree_part", *part)),
        "specdec_sync_check",
        lambda name, func: probe.step(func) if name == "step" else probe.part(func),
    )


def read(path):
    return ddtree_accept_stats.read_or(path, empty)


def server_env(env, path):
    """``env`` for a server checked into ``path`` (ddtree_accept_stats.plugin_env)."""
    return ddtree_accept_stats.plugin_env(env, ENV, path)


def sglang_plugin():
    """sglang's plugin hook (entry point group ``sglang.srt.plugins``): with ENV set, check every decode step."""
    path = os.environ.get(ENV)
    if path:
        install(Probe(path))
