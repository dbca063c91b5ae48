# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where a speculative decode step's host time goes, per part, for DFLASH and DDTREE servers (device runs only).

On a small pair a decode step is bound by the host: the GPU finishes each launch before Python issues the next,
so a step costs what its Python and launches cost. The 2026-12-06 control (DDTREE N=8 = the chain, 1.18x
DFLASH's step: tests/device/records/2026-12-06-h100-ddtree-e2e-interleaved-block8) put about 0.6 ms a step on
DDTREE's own work; this probe says which part takes it. A part that waits for the GPU (a hidden host
synchronisation) shows up here as a large host time too.

A server timed this way runs with ``server_env``: SPECDEC_HOST_TIME=PATH and, first on its PYTHONPATH,
tests/device/sglang_plugin, whose dist-info registers ``sglang_plugin`` under sglang's plugin entry point group
(``sglang.srt.plugins``, loaded in every process sglang starts). With the variable set it wraps, by name, the
step (DFlashWorkerV2.forward_batch_generation) and the parts in PARTS with ``time.perf_counter`` and, every
WRITE_EVERY decode steps, rewrites PATH with the running totals (``tally``). Parts are counted inside decode
steps only (a prefill's calls are not). The wrappers add two clock reads a call; the totals are host time,
not GPU time. ``summarize`` turns a file into milliseconds per decode step (tested on a CPU by
tests/device/test_ddtree_host_time.py).
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddtree_accept_stats  # tests/device: the plugin's shared file helpers

ENV = "SPECDEC_HOST_TIME"
HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_DIR = os.path.join(HERE, "sglang_plugin")
WRITE_EVERY = 32
STEP = ("sglang.srt.speculative.dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation")
# DDTREE's part of a step: the worker calls it by the name it imported, so it is wrapped where that name lives
DDTREE_STEP = ("sglang.srt.speculative.dflash_worker_v2", "ddtree_verify_step")
# (name, module, attribute path) of the parts timed inside a decode step; a part a release lacks is skipped.
PARTS = (
    ("model_forward", "sglang.srt.model_executor.model_runner", "ModelRunner.forward"),  # the draft's and the target's
    ("target_forward", "sglang.srt.managers.tp_worker", "TpModelWorker.forward_batch_generation"),
    ("prepare_for_verify", "sglang.srt.speculative.dflash_info", "DFlashVerifyInput.prepare_for_verify"),
    (
        "draft_kv_append",
        "sglang.srt.speculative.dflash_worker_v2",
        "DFlashWorkerV2._append_target_hidden_to_draft_kv_by_loc",
    ),
    (
        "mamba_commit_dflash",
        "sglang.srt.speculative.dflash_worker_v2",
        "DFlashWorkerV2._update_target_mamba_state_after_verify",
    ),
    ("ddtree_after_draft", *DDTREE_STEP),
    ("ddtree_draft_topk", "sglang.srt.speculative.ddtree_worker", "draft_topk"),
    ("ddtree_host_prefix", "sglang.srt.speculative.ddtree_worker", "host_prefix_bound"),
    ("ddtree_step_graph", "sglang.srt.speculative.ddtree_worker", "graphed_tree"),
    ("ddtree_tree_build", "sglang.srt.speculative.ddtree_worker", "build_tree_on_device"),
    ("ddtree_tree_verify", "sglang.srt.speculative.eagle_utils", "verify_tree_greedy_func"),
    ("ddtree_commit", "sglang.srt.speculative.ddtree_worker", "commit_tensors"),
    ("ddtree_mamba_commit", "sglang.srt.speculative.ddtree_worker", "commit_hybrid_state"),
)


def empty():
    return {"decode_steps": 0, "step_ms": 0.0, "parts": {}}


def tally(stats, name, ms):
    """Add one call of ``name`` taking ``ms`` to ``stats`` (the step itself is ``step``)."""
    if name == "step":
        stats["decode_steps"] += 1
        stats["step_ms"] += ms
        return stats
    part = stats["parts"].setdefault(name, {"calls": 0, "ms": 0.0})
    part["calls"] += 1
    part["ms"] += ms
    return stats


def summarize(stats):
    """Milliseconds of host time per decode step: the step and each part (parts nest: ddtree_after_draft holds the
    ddtree_* parts, target_forward and prepare_for_verify of a DDTREE step), and calls per step."""
    steps = int(stats.get("decode_steps") or 0)
    if steps == 0:
        return {"decode_steps": 0}
    parts = {
        name: {"ms_per_step": round(p["ms"] / steps, 4), "calls_per_step": round(p["calls"] / steps, 3)}
        for name, p in sorted(stats.get("parts", {}).items())
    }
    return {"decode_steps": steps, "step_ms": round(stats["step_ms"] / steps, 4), "parts": parts}


def is_decode(batch):
    """A verify step (the scheduler's decode): not a prefill, not an idle batch."""
    mode = getattr(batch, "forward_mode", None)
    if mode is None or getattr(batch, "is_extend_in_batch", False):
        return False
    return not (mode.is_extend() or mode.is_idle())


class Probe:
    """The running totals of one server process and the wrappers that feed them."""

    def __init__(self, path, clock=time.perf_counter):
        self.path, self.clock, self.stats, self.in_step = path, clock, empty(), False

    def write(self):
        ddtree_accept_stats.write(self.path, self.stats)

    def step(self, func):
        @functools.wraps(func)
        def timed(worker, batch, *args, **kwargs):
            if not is_decode(batch):
                return func(worker, batch, *args, **kwargs)
            start, self.in_step = self.clock(), True
            try:
                return func(worker, batch, *args, **kwargs)
            finally:
                self.in_step = False
                tally(self.stats, "step", (self.clock() - start) * 1000.0)
                if self.stats["decode_steps"] % WRITE_EVERY == 0:
                    self.write()

        timed.__wrapped__, timed.specdec_host_time = func, True
        return timed

    def part(self, name, func):
        @functools.wraps(func)
        def timed(*args, **kwargs):
            if not self.in_step:
                return func(*args, **kwargs)
            start = self.clock()
            try:
                return func(*args, **kwargs)
            finally:
                tally(self.stats, name, (self.clock() - start) * 1000.0)

        timed.__wrapped__, timed.specdec_host_time = func, True
        return timed


def resolve(module, path):
    """(owner, attribute, value) of ``module``'s dotted ``path``, or None where the release lacks it."""
    try:
        owner = importlib.import_module(module)
    except ImportError:
        return None
    *parents, attr = path.split(".")
    for name in parents:
        owner = getattr(owner, name, None)
        if owner is None:
            return None
    value = getattr(owner, attr, None)
    return None if value is None else (owner, attr, value)


def wrap_each(targets, marker, wrap):
    """Replace each (name, module, attribute path) of ``targets`` that the release has with ``wrap(name, func)``,
    skipping one whose value carries ``marker`` (this probe's own wrapper); returns the names wrapped."""
    wrapped = []
    for name, module, path in targets:
        found = resolve(module, path)
        if found is None or getattr(found[2], marker, False):
            continue
        owner, attr, func = found
        setattr(owner, attr, wrap(name, func))
        wrapped.append(name)
    return wrapped


def install(probe, step=STEP, parts=PARTS):
    """Wrap the step and every part a release has; returns the names wrapped (one this probe wrapped already, e.g. a
    plugin loaded twice, is left as it is; another plugin's wrapper, such as the accept-stats counter, is timed)."""
    return wrap_each(
        (("step", *step), *parts),
        "specdec_host_time",
        lambda name, func: probe.step(func) if name == "step" else probe.part(name, func),
    )


def sglang_plugin():
    """sglang's plugin hook (entry point group ``sglang.srt.plugins``): with ENV set, time every decode step."""
    path = os.environ.get(ENV)
    if path:
        install(Probe(path))


def read(path):
    return ddtree_accept_stats.read_or(path, empty)


def server_env(env, path):
    """``env`` for a server timed into ``path`` (ddtree_accept_stats.plugin_env)."""
    return ddtree_accept_stats.plugin_env(env, ENV, path)
