#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""sglang 0.5.17's own tree kernels for hybrid targets, fed DDTree's links: every node from its parent.

    python tests/device/ddtree_hybrid_kernels.py [--device cuda] [--sglang-src DIR] [--trees 12]

The two triton kernels a hybrid (Gated DeltaNet) target's TARGET_VERIFY runs under DDTREE with the
ddtree-0.5.17 patch set, called the way gdn_backend.forward_extend calls them:

- causal_conv1d_update (kernels/ops/mamba/causal_conv1d_triton.py) with retrieve_next_token /
  retrieve_next_sibling from ddtree_utils.retrieve_links: per node the conv output and the saved conv
  window (intermediate_conv_window), and the parents it writes (retrieve_parent_token);
- fused_sigmoid_gating_delta_rule_update (kernels/ops/attention/fla/fused_sigmoid_gating_recurrent.py)
  with those parents: per node the output and the saved ssm state (intermediate_states_buffer).

Reference for node i: the same kernel run as a chain over node i's path (root .. i) from the same
request state, i.e. what the target alone computes after consuming the path. Checked per node: output,
snapshot, parent; and that the flattened-order run (no links: what topk 1 did) differs off the chain.
DDTree trees from ddtree_utils.build_tree (random drafts), two requests per call, scattered state
slots. Exit status 0 when every node matches.

On the device machine it runs the real kernels on the GPU (run-ddtree --hybrid); on a CPU, triton's
interpreter runs them (TRITON_INTERPRET=1, set here when --device cpu; needs torch, triton and numpy
< 2.4 (numpy 2.4 refuses the interpreter's one-element loop bounds), and --sglang-src: an unpacked
sglang wheel, e.g. .cache/sglang-src/0.5.17 from scripts/fetch-sglang). With
--sglang-src .cache/sglang-src/0.5.23 it checks 0.5.23's own kernels (the GDN kernel moved to
kernels/ops/attention/linear/ there), the ones the ddtree-0.5.23 set hands the same links to.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import pathlib
import random
import sys
import types

REPO = pathlib.Path(__file__).resolve().parents[2]
SET_UTILS = REPO / "patchsets" / "ddtree-0.5.17" / "files" / "sglang" / "srt" / "speculative" / "ddtree_utils.py"
CONV = "sglang/kernels/ops/mamba/causal_conv1d_triton.py"
GDN = "sglang/kernels/ops/attention/fla/fused_sigmoid_gating_recurrent.py"
GDN_0_5_23 = "sglang/kernels/ops/attention/linear/fused_sigmoid_gating_recurrent.py"  # moved in 0.5.23
SCATTER = "sglang/kernels/ops/mamba/mamba_state_scatter_triton.py"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def load_kernels(sglang_src):
    """(causal_conv1d_update, fused_sigmoid_gating_delta_rule_update, ddtree_utils, the commit scatter)."""
    du = _load("ddtree_utils_kernels_check", SET_UTILS)
    if sglang_src is None:
        from sglang.kernels.ops.attention.fla.fused_sigmoid_gating_recurrent import (  # noqa: PLC0415
            fused_sigmoid_gating_delta_rule_update,
        )
        from sglang.kernels.ops.mamba.causal_conv1d_triton import causal_conv1d_update  # noqa: PLC0415
        from sglang.kernels.ops.mamba.mamba_state_scatter_triton import (  # noqa: PLC0415
            scatter_mamba_states_after_mtp_verify,
        )

        return causal_conv1d_update, fused_sigmoid_gating_delta_rule_update, du, scatter_mamba_states_after_mtp_verify
    # Only the kernel files, by path; the few sglang helpers they import are answered here (0.5.23's
    # GDN and scatter files also ask sglang.srt.utils for the device, and the scatter for a pointer
    # table: a CPU under the interpreter is no CUDA device, and the scatter is run on a GPU only).
    jit = types.ModuleType("sglang.kernels.jit.utils")
    jit.is_arch_support_pdl = lambda: False
    sys.modules["sglang.kernels.jit.utils"] = jit
    utils = types.ModuleType("sglang.srt.utils")
    for name in ("is_cuda", "is_hip", "is_gfx95_supported", "is_sm90_supported"):
        setattr(utils, name, lambda: False)
    utils.get_device_sm = lambda: 0
    common = types.ModuleType("sglang.srt.utils.common")
    common.get_device_core_count = lambda *_a, **_k: 1
    ptr_table = types.ModuleType("sglang.kernels.ops.memory.ptr_table")
    ptr_table.make_ptr_table = None
    for module in (utils, common, ptr_table):
        sys.modules.setdefault(module.__name__, module)
    src = pathlib.Path(sglang_src)
    conv = _load("sglang_conv_kernel_under_test", src / CONV)
    gdn = _load("sglang_gdn_kernel_under_test", next(p for p in (src / GDN, src / GDN_0_5_23) if p.is_file()))
    scatter = _load("sglang_scatter_kernel_under_test", src / SCATTER)
    return (
        conv.causal_conv1d_update,
        gdn.fused_sigmoid_gating_delta_rule_update,
        du,
        scatter.scatter_mamba_states_after_mtp_verify,
    )


def random_tree(du, rng, budget):
    """A DDTree of exactly `budget` nodes from a random draft (block 3-6, top-k 2-4)."""
    while True:
        block, topk = rng.randint(3, 6), rng.randint(2, 4)
        if du.tree_capacity(block, topk) >= budget:
            break
    lps, toks = [], []
    for _ in range(block - 1):
        raw = sorted((rng.random() for _ in range(topk)), reverse=True)
        total = sum(raw) * (1.0 + rng.random())
        lps.append([math.log(x / total) for x in raw])
        toks.append(rng.sample(range(1, 500), topk))
    return du.build_tree(rng.randrange(1, 500), lps, toks, budget)


class Case:
    """Two requests, one tree each (same N), with random inputs and per-slot states."""

    DIM, WIDTH, HV, KD = 24, 4, 2, 16  # conv channels, conv kernel, value heads, key = value dim

    def __init__(self, torch, du, trees, rng_seed, device):
        self.torch, self.du, self.trees, self.device = torch, du, trees, device
        g = torch.Generator().manual_seed(rng_seed)
        n = len(trees[0])
        bs, f32 = len(trees), torch.float32
        self.n, self.bs = n, bs
        self.slots = torch.tensor([5, 2], dtype=torch.int64)[:bs]  # scattered state slots
        self.x = torch.randn(bs, n, self.DIM, generator=g)  # per node conv input
        self.weight = torch.randn(self.DIM, self.WIDTH, generator=g) * 0.5
        self.conv_state = torch.randn(8, self.DIM, self.WIDTH - 1, generator=g)
        self.q = torch.randn(bs, n, 1, self.KD, generator=g)
        self.k = torch.randn(bs, n, 1, self.KD, generator=g)
        self.v = torch.randn(bs, n, self.HV, self.KD, generator=g)
        self.a = torch.randn(bs, n, self.HV, generator=g)
        self.b = torch.randn(bs, n, self.HV, generator=g)
        self.A_log = torch.randn(self.HV, generator=g) * 0.1
        self.dt_bias = torch.randn(self.HV, generator=g) * 0.1
        self.ssm = torch.randn(8, self.HV, self.KD, self.KD, generator=g, dtype=f32) * 0.1
        links = [du.retrieve_links(t.parents) for t in trees]
        self.next_token = torch.tensor([fc for fc, _ in links], dtype=torch.int64)
        self.next_sibling = torch.tensor([ns for _, ns in links], dtype=torch.int64)

    def to(self, t):
        return t.to(self.device)

    def conv(self, kernel, x, nodes, links):
        """causal_conv1d_update as gdn_backend calls it in TARGET_VERIFY. x: [bs, T, dim]."""
        torch = self.torch
        bs, t = x.shape[0], x.shape[1]
        state = self.to(self.conv_state.clone())
        inter = self.to(torch.zeros(bs + 1, t, self.DIM, self.WIDTH - 1))
        parent = self.to(torch.full((bs, t), -7, dtype=torch.int64)) if links else None
        out = kernel(
            self.to(x.contiguous()).transpose(1, 2),  # [bs, dim, T], the view gdn_backend passes
            state,
            self.to(self.weight),
            None,
            "silu",
            conv_state_indices=self.to(self.slots[:bs].to(torch.int32)),
            intermediate_conv_window=inter,
            intermediate_state_indices=self.to(torch.arange(bs, dtype=torch.int32)),
            retrieve_next_token=self.to(nodes[0]) if links else None,
            retrieve_next_sibling=self.to(nodes[1]) if links else None,
            retrieve_parent_token=parent,
        )
        return out.transpose(1, 2).cpu(), inter[:bs].cpu(), None if parent is None else parent.cpu()

    def gdn(self, kernel, rows, parents):
        """fused_sigmoid_gating_delta_rule_update as the triton GDN target_verify calls it."""
        torch = self.torch
        q, k, v, a, b = rows
        bs, t = q.shape[0], q.shape[1]
        state = self.to(self.ssm.clone())
        inter = self.to(torch.zeros(bs + 1, t, self.HV, self.KD, self.KD))
        out = kernel(
            A_log=self.to(self.A_log),
            dt_bias=self.to(self.dt_bias),
            q=self.to(q.reshape(1, bs * t, 1, self.KD)),
            k=self.to(k.reshape(1, bs * t, 1, self.KD)),
            v=self.to(v.reshape(1, bs * t, self.HV, self.KD)),
            a=self.to(a.reshape(bs * t, self.HV)),
            b=self.to(b.reshape(bs * t, self.HV)),
            initial_state_source=state,
            initial_state_indices=self.to(self.slots[:bs].to(torch.int32)),
            cu_seqlens=self.to(torch.arange(0, bs * t + 1, t, dtype=torch.int32)),
            use_qk_l2norm_in_kernel=True,
            softplus_beta=1.0,
            softplus_threshold=20.0,
            is_kda=False,
            disable_state_update=True,
            intermediate_states_buffer=inter,
            intermediate_state_indices=self.to(torch.arange(bs, dtype=torch.int32)),
            cache_steps=t,
            retrieve_parent_token=None if parents is None else self.to(parents),
        )
        after = state.cpu()
        return out.reshape(bs, t, self.HV, self.KD).cpu(), inter[:bs].cpu(), after

    def path_rows(self, b, path):
        pick = self.torch.tensor(path)
        return [t[b : b + 1, pick] for t in (self.q, self.k, self.v, self.a, self.b)]


def commit_check(torch, kernels, case, snapshots, *, rng, tol):
    """sglang's commit (scatter_mamba_states_after_mtp_verify) at ddtree_utils.commit_nodes' step.

    Per request a random accepted path (root, then a child at each depth); the slot's ssm state and
    conv window after the commit must be the chain's over that path. CUDA only (the scatter refuses CPU).
    """
    conv_k, gdn_k, du, scatter = kernels
    g_inter, win = snapshots
    bs, n = case.bs, case.n
    rows, drafts, paths = [], [], []
    for b, tree in enumerate(case.trees):
        path = [0]
        while True:
            kids = [c for c in range(n) if tree.parents[c] == path[-1]]
            if not kids or rng.random() < 0.25:
                break
            path.append(rng.choice(kids))
        paths.append(path)
        rows.append([b * n + i for i in path] + [-1] * (n - len(path)))
        drafts.append(len(path) - 1)
    nodes = du.commit_nodes(rows, drafts, n)
    caches = types.SimpleNamespace(
        temporal=case.to(case.ssm.clone()).unsqueeze(0).contiguous(),
        intermediate_ssm=case.to(g_inter).unsqueeze(0).contiguous(),
        conv=[case.to(case.conv_state.clone()).unsqueeze(0).contiguous()],
        intermediate_conv_window=[case.to(win).unsqueeze(0).contiguous()],
    )
    scatter(
        caches,
        case.to(case.slots.to(torch.int32)),
        case.to(torch.tensor(nodes, dtype=torch.int64)),
        None,
        None,
    )
    bad = []
    for b, path in enumerate(paths):
        sub = Case.__new__(Case)
        sub.__dict__.update(case.__dict__)
        sub.slots = case.slots[b : b + 1]
        _o, c_win, _p = sub.conv(conv_k, case.x[b : b + 1, torch.tensor(path)], None, False)
        _g, r_inter, _a = sub.gdn(gdn_k, sub.path_rows(b, path), None)
        slot = int(case.slots[b])
        ssm_err = float((caches.temporal[0, slot].cpu() - r_inter[0, -1]).abs().max())
        conv_err = float((caches.conv[0][0, slot].cpu() - c_win[0, -1]).abs().max())
        if ssm_err > tol or conv_err > tol:
            bad.append({"request": b, "path": path, "ssm_err": ssm_err, "conv_err": conv_err})
    return {"committed": bs, "off_chain_commits": sum(p != list(range(len(p))) for p in paths), "mismatches": bad}


def check(torch, kernels, case, tol):
    conv_k, gdn_k = kernels[:2]
    report = {"nodes": 0, "mismatches": [], "flattened_off_chain_differs": 0, "off_chain": 0}
    out, win, parents = case.conv(conv_k, case.x, (case.next_token, case.next_sibling), True)
    flat_out, _fw, _ = case.conv(conv_k, case.x, None, False)
    g_rows = [case.q, case.k, case.v, case.a, case.b]
    g_out, g_inter, g_after = case.gdn(gdn_k, g_rows, parents)
    flat_g_out, _fi, _ = case.gdn(gdn_k, g_rows, None)
    if not torch.equal(g_after, case.ssm):
        report["mismatches"].append("the verify changed a request's ssm state (disable_state_update)")
    for b, tree in enumerate(case.trees):
        want_parents = [0, *tree.parents[1:]]
        if parents[b].tolist() != want_parents:
            report["mismatches"].append({"request": b, "kernel_parents": parents[b].tolist(), "want": want_parents})
        for i in range(case.n):
            path = [i]
            while tree.parents[path[-1]] >= 0:
                path.append(tree.parents[path[-1]])
            path.reverse()
            pick = torch.tensor(path)
            sub = Case.__new__(Case)
            sub.__dict__.update(case.__dict__)
            sub.slots = case.slots[b : b + 1]
            c_out, c_win, _ = sub.conv(conv_k, case.x[b : b + 1, pick], None, False)
            r_out, r_inter, _ = sub.gdn(gdn_k, sub.path_rows(b, path), None)
            got = {
                "conv_out": (out[b, i], c_out[0, -1]),
                "conv_window": (win[b, i], c_win[0, -1]),
                "gdn_out": (g_out[b, i], r_out[0, -1]),
                "ssm_snapshot": (g_inter[b, i], r_inter[0, -1]),
            }
            for what, (tree_val, chain_val) in got.items():
                err = float((tree_val - chain_val).abs().max())
                if err > tol:
                    report["mismatches"].append({"request": b, "node": i, "what": what, "max_err": err})
            report["nodes"] += 1
            if path != list(range(i + 1)):
                report["off_chain"] += 1
                flat_err = max(
                    float((flat_out[b, i] - c_out[0, -1]).abs().max()),
                    float((flat_g_out[b, i] - r_out[0, -1]).abs().max()),
                )
                report["flattened_off_chain_differs"] += int(flat_err > 100 * tol)
    if case.device != "cpu":
        commit = commit_check(torch, kernels, case, (g_inter, win), rng=random.Random(case.n * 31), tol=tol)
        report["commit"] = commit
        report["mismatches"] += commit["mismatches"]
    return report


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--sglang-src", help="load the two kernel files from this unpacked sglang (else import sglang)")
    p.add_argument("--trees", type=int, default=12, help="calls (two requests, one DDTree each)")
    p.add_argument("--budgets", default="8,16", help="tree sizes N, used in turn (one kernel compile each)")
    p.add_argument("--tol", type=float, default=2e-4)
    p.add_argument("--out", help="write the report here (JSON)")
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    import torch  # noqa: PLC0415

    kernels = load_kernels(args.sglang_src)
    du = kernels[2]
    rng = random.Random(20261201)
    total = {"calls": 0, "nodes": 0, "off_chain": 0, "flattened_off_chain_differs": 0, "mismatches": []}
    total["commits"] = total["off_chain_commits"] = 0
    if args.device == "cpu":
        total["commit"] = "not checked on the CPU: sglang's commit scatter kernel refuses CPU tensors"
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    for call in range(args.trees):
        budget = budgets[call % len(budgets)]
        case = Case(torch, du, [random_tree(du, rng, budget), random_tree(du, rng, budget)], 1000 + call, args.device)
        rep = check(torch, kernels, case, args.tol)
        total["calls"] += 1
        for key in ("nodes", "off_chain", "flattened_off_chain_differs"):
            total[key] += rep[key]
        if "commit" in rep:
            total["commits"] += rep["commit"]["committed"]
            total["off_chain_commits"] += rep["commit"]["off_chain_commits"]
        total["mismatches"] += rep["mismatches"][:5]
    total["pass"] = (
        not total["mismatches"]
        and total["off_chain"] > 0
        and total["flattened_off_chain_differs"] == total["off_chain"]
        and (args.device == "cpu" or total["off_chain_commits"] > 0)
    )
    text = json.dumps(total, indent=1)
    if args.out:
        pathlib.Path(args.out).write_text(text)
    print(text)
    print("PASS" if total["pass"] else "FAIL")
    return 0 if total["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
