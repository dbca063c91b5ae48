#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The ddtree sets' device tree builders on torch: equal to the reference, no host sync, their cost.

    ddtree_tree_check.py [--device cuda] [--set patchsets/ddtree-0.5.17] [--builders arrays,triton]
                         [--out tree-check.json]

Builders: ``arrays`` (ddtree_tree.build_tree_arrays, array operations) and ``triton`` (the set's
ddtree_tree_kernel.build_tree_triton, one Triton program per request; on CPU tensors only under
TRITON_INTERPRET=1, Triton's interpreter).

1. equality: random batches (ties, zeros, -inf; depth 0-6, top-k 1-4, budgets past the capacity) built on
   ``--device`` by each builder equal ddtree_utils.build_tree request by request (nodes, order,
   links, ancestor mask, positions), as tests/unit/patchsets/test_ddtree_tree.py checks on numpy;
2. no host synchronisation: on CUDA each builder and full_mask run under
   ``torch.cuda.set_sync_debug_mode("error")`` (any synchronising call raises);
3. cost: the median of 50 builds (CUDA events) at the 27B geometry's block 16, top-k 8, budgets 16 and
   32, batch 1 and 8, eager and captured in a CUDA graph, per builder.

Needs torch (and numpy for nothing: the inputs are torch tensors). Exit status 0 when 1 and 2 pass for
every builder.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import random
import sys
import time

import torch

REPO = pathlib.Path(__file__).resolve().parents[2]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _inputs(rng, bs, depth, k, *, kind, device):
    if kind == 0:
        lp = [[[-float(rng.randrange(4)) for _ in range(k)] for _ in range(depth)] for _ in range(bs)]
    elif kind == 1:
        lp = [[[-rng.expovariate(1.0) for _ in range(k)] for _ in range(depth)] for _ in range(bs)]
    else:
        lp = [
            [
                [(-float("inf") if rng.random() < 0.2 else -0.5 * rng.randrange(3)) for _ in range(k)]
                for _ in range(depth)
            ]
            for _ in range(bs)
        ]
    toks = [[rng.sample(range(1000), k) for _ in range(depth)] for _ in range(bs)]
    roots = [rng.randrange(1000) for _ in range(bs)]
    prefix = [rng.randrange(50) for _ in range(bs)]

    def as_t(rows, dtype):
        return torch.tensor(rows, dtype=dtype, device=device).reshape(bs, depth, k)

    return (
        torch.tensor(roots, device=device),
        as_t(lp, torch.float32),
        as_t(toks, torch.int64),
        torch.tensor(prefix, device=device),
        lp,
        toks,
        roots,
        prefix,
    )


def equality(dt, du, device, groups, seed=0):
    rng = random.Random(seed)
    bad, total, first = 0, 0, None
    for g in range(groups):
        depth, k = rng.randrange(7), rng.randrange(1, 5)
        budget = rng.randrange(1, min(du.tree_capacity(depth + 1, k) + 3, 48))
        roots_t, lp_t, tok_t, pre_t, lp, toks, roots, prefix = _inputs(rng, 8, depth, k, kind=g % 3, device=device)
        out = dt.build_tree_arrays(roots_t, lp_t, tok_t, budget, prefix_lens=pre_t)
        out = {key: val.cpu() for key, val in out.items()}
        for b in range(8):
            total += 1
            # The reference on the float32 values the device saw.
            ref = du.build_tree(roots[b], lp_t[b].double().cpu().tolist(), toks[b], budget)
            m = int(out["num_nodes"][b])
            first_child, sibling = du.retrieve_links(ref.parents)
            ok = (
                m == len(ref)
                and out["tokens"][b, :m].tolist() == ref.tokens
                and out["parents"][b, :m].tolist() == ref.parents
                and out["depths"][b, :m].tolist() == ref.depths
                and out["ranks"][b, :m].tolist() == ref.ranks
                and out["first_child"][b, :m].tolist() == first_child
                and out["next_sibling"][b, :m].tolist() == sibling
                and out["ancestor_mask"][b, :m, :m].tolist() == du.ancestor_mask(ref.parents)
                and out["positions"][b, :m].tolist() == du.positions(ref.depths, prefix[b])
            )
            if not ok:
                bad += 1
                first = first or {
                    "budget": budget,
                    "lp": lp[b],
                    "got": out["tokens"][b, :m].tolist(),
                    "want": ref.tokens,
                }
    return {"requests": total, "mismatches": bad, "first_mismatch": first}


def no_sync(dt, device):
    """Build and lay out the mask under sync debug mode 'error': a synchronising call raises."""
    if device != "cuda":
        return {"checked": False, "why": "not CUDA"}
    rng = random.Random(1)
    roots_t, lp_t, tok_t, pre_t, *_ = _inputs(rng, 8, 15, 8, kind=1, device=device)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = dt.build_tree_arrays(roots_t, lp_t, tok_t, 32, prefix_lens=pre_t)
        dt.full_mask(out["ancestor_mask"], pre_t, 32 * (8 * 60 + 8 * 32))
    except RuntimeError as exc:
        return {"checked": True, "ok": False, "error": str(exc)[:500]}
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    return {"checked": True, "ok": True}


def cost(dt, device, reps=50):
    """Median / p90 ms of dt.build_tree_arrays, launched eagerly and replayed from a CUDA graph."""
    rows = []
    if device != "cuda":
        return rows
    rng = random.Random(2)
    for bs in (1, 8):
        for budget in (16, 32):
            roots_t, lp_t, tok_t, pre_t, *_ = _inputs(rng, bs, 15, 8, kind=1, device=device)

            def build(roots_t=roots_t, lp_t=lp_t, tok_t=tok_t, pre_t=pre_t, budget=budget):
                return dt.build_tree_arrays(roots_t, lp_t, tok_t, budget, prefix_lens=pre_t)

            row = {"batch": bs, "budget": budget, "block": 16, "topk": 8}
            runners = {"eager": build}
            try:
                build()  # warm-up before the capture
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    build()
                runners["graph"] = graph.replay
            except Exception as exc:
                row["graph_error"] = repr(exc)[:300]
            for label, fn in runners.items():
                times = []
                for _ in range(reps):
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    fn()
                    end.record()
                    end.synchronize()
                    times.append(start.elapsed_time(end))
                times.sort()
                row[label + "_ms_median"] = round(times[len(times) // 2], 4)
                row[label + "_ms_p90"] = round(times[int(len(times) * 0.9)], 4)
            rows.append(row)
    return rows


class _Triton:
    """The Triton builder behind build_tree_arrays' name, with the array module's full_mask."""

    def __init__(self, kernel, arrays):
        self.build_tree_arrays = kernel.build_tree_triton
        self.full_mask = arrays.full_mask


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--set", default="patchsets/ddtree-0.5.17")
    p.add_argument("--builders", default="arrays,triton")
    p.add_argument("--groups", type=int, default=200, help="random batches of 8 requests")
    p.add_argument("--out", default="-")
    args = p.parse_args(argv)
    files = REPO / args.set / "files/sglang/srt/speculative"
    du = _load(files / "ddtree_utils.py", "ddtree_utils_check")
    dt = _load(files / "ddtree_tree.py", "ddtree_tree_check")
    builders = [b.strip() for b in args.builders.split(",") if b.strip()]
    if not builders or set(builders) - {"arrays", "triton"}:
        p.error("--builders: arrays and / or triton (got %r)" % args.builders)
    t0 = time.monotonic()
    result = {
        "set": args.set,
        "device": args.device,
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None,
        "builders": {},
    }
    for name in builders:
        try:
            impl = (
                dt
                if name == "arrays"
                else _Triton(_load(files / "ddtree_tree_kernel.py", "ddtree_tree_kernel_check"), dt)
            )
            checks = {
                "equality": equality(impl, du, args.device, args.groups),
                "no_sync": no_sync(impl, args.device),
                "cost": cost(impl, args.device),
            }
            checks["ok"] = checks["equality"]["mismatches"] == 0 and checks["no_sync"].get("ok", True)
        except Exception as exc:  # recorded: a builder that cannot run fails the check
            checks = {"ok": False, "error": repr(exc)[:2000]}
        result["builders"][name] = checks
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["ok"] = all(b["ok"] for b in result["builders"].values())
    text = json.dumps(result, indent=1)
    if args.out == "-":
        print(text)
    else:
        pathlib.Path(args.out).write_text(text + "\n")
        print(json.dumps({"ok": result["ok"], "wall_s": result["wall_s"], "builders": {
            k: {key: v.get(key) for key in ("ok", "equality", "no_sync", "error") if key in v}
            for k, v in result["builders"].items()}}))  # fmt: skip
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
