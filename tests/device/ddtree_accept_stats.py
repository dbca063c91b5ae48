# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where DDTREE's accepted tokens come from: the top-1 chain or the rest of the tree (device runs only).

ddtree-0.5.17 seeds every tree with the draft's top-1 chain at node indices 1..B-1 (depth j at index j,
ddtree_utils.build_tree), then adds the best-scoring other nodes. An accepted node at path position j
is therefore on the chain exactly when its index in the request's tree is j; any other index is a node
DFLASH would not have verified (off the chain), and so are all accepted nodes below it.

A server counted this way runs with ``server_env``: SPECDEC_DDTREE_ACCEPT_STATS=PATH and, first on its
PYTHONPATH, tests/device/sglang_plugin, whose dist-info registers ``sglang_plugin`` under sglang's own plugin
entry point group (``sglang.srt.plugins``; sglang loads its plugins in every process it starts, the scheduler's
included). ``sglang_plugin`` wraps sglang's ``eagle_utils.verify_tree_greedy_func`` (what the set's verify step
calls) with ``wrap_verify``: after each call the accepted paths are read once to the host, counted, and the running
totals rewritten to PATH (one small JSON file per server). The counting is pure Python (tested on a CPU
by tests/device/test_ddtree_accept_stats.py); reading the paths costs one device-to-host copy per
step, so a server counted this way is not timed.
"""

from __future__ import annotations

import json
import os

ENV = "SPECDEC_DDTREE_ACCEPT_STATS"
HERE = os.path.dirname(os.path.abspath(__file__))
PLUGIN_DIR = os.path.join(HERE, "sglang_plugin")  # the dist-info whose entry point names sglang_plugin
FIELDS = ("verify_calls", "request_steps", "accepted_drafts", "off_chain_accepted", "request_steps_off_chain")


def empty():
    return dict.fromkeys(FIELDS, 0) | {"accepted_by_depth": [], "off_chain_by_depth": []}


def _bump(counts, depth):
    while len(counts) <= depth:
        counts.append(0)
    counts[depth] += 1


def count_step(stats, accept_index, accept_drafts, nodes_per_request):
    """Add one verify call to ``stats``.

    accept_index: per request, the accepted path as global node indices (request b's nodes are
    b * nodes_per_request + 0..N-1; position 0 is the root; -1 pads); accept_drafts: per request, how
    many drafted nodes (below the root) were accepted.
    """
    stats["verify_calls"] += 1
    for b, (row, accepted) in enumerate(zip(accept_index, accept_drafts)):
        stats["request_steps"] += 1
        off = 0
        for j in range(1, int(accepted) + 1):
            local = int(row[j]) - b * nodes_per_request
            if not 0 < local < nodes_per_request:
                raise ValueError(
                    "request %d: accepted node %s is not in its tree of %d" % (b, row[j], nodes_per_request)
                )
            stats["accepted_drafts"] += 1
            _bump(stats["accepted_by_depth"], j)
            if local != j:
                off += 1
                _bump(stats["off_chain_by_depth"], j)
        stats["off_chain_accepted"] += off
        stats["request_steps_off_chain"] += 1 if off else 0
    return stats


def delta(before, after):
    """What was counted between two readings of the same server's file."""
    out = {k: after.get(k, 0) - before.get(k, 0) for k in FIELDS}
    for key in ("accepted_by_depth", "off_chain_by_depth"):
        a, b = after.get(key, []), before.get(key, [])
        out[key] = [a[i] - (b[i] if i < len(b) else 0) for i in range(len(a))]
    return out


def read_json(path):
    """A device plugin's totals file, or None when it is missing or unreadable (here and in ddtree_host_time)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def read(path):
    return read_or(path, empty)


def read_or(path, empty_stats):
    """A plugin's totals from ``path``, or ``empty_stats()`` where there are none yet."""
    found = read_json(path)
    return empty_stats() if found is None else found


def write(path, stats):
    """``stats`` to ``path`` atomically (a reader never sees half a file)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(stats, handle)
    os.replace(tmp, path)


def wrap_verify(func, path):
    """verify_tree_greedy_func counted into ``path`` (its arguments and results unchanged)."""
    stats = empty()

    def counted(*args, **kwargs):
        result = func(*args, **kwargs)
        _predicts, accept_index, accept_drafts = result
        n = int(kwargs["retrieve_index"].shape[-1])
        count_step(stats, accept_index.tolist(), accept_drafts.tolist(), n)
        write(path, stats)
        return result

    counted.__wrapped__ = func
    return counted


def sglang_plugin():
    """sglang's plugin hook (entry point group ``sglang.srt.plugins``): with ENV set, count every verify call."""
    path = os.environ.get(ENV)
    if not path:
        return
    from sglang.srt.speculative import eagle_utils  # noqa: PLC0415 - only in a server that sglang started

    if not hasattr(eagle_utils.verify_tree_greedy_func, "__wrapped__"):
        eagle_utils.verify_tree_greedy_func = wrap_verify(eagle_utils.verify_tree_greedy_func, path)


def server_env(env, path):
    """``env`` for a server whose accepted nodes are counted into ``path`` (plugin_env)."""
    return plugin_env(env, ENV, path)


def plugin_env(env, variable, path):
    """``env`` for a server one device plugin writes into ``path``: ``variable`` set, the plugin's dist-info and
    this folder first on PYTHONPATH (nothing else changes; a server without it runs as deployed)."""
    pythonpath = [PLUGIN_DIR, HERE, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return dict(env, **{variable: str(path), "PYTHONPATH": os.pathsep.join(pythonpath)})
