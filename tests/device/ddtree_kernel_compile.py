#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Compile the ddtree set's Triton programs to PTX for sm_90 and sm_120 on any machine (no GPU needed).

    python tests/device/ddtree_kernel_compile.py [--set patchsets/ddtree-0.5.17] [--arch 90,120]

Needs triton (not in the CI venv). Triton's interpreter (TRITON_INTERPRET=1, how the CPU checks run the
kernels) accepts code its compiler refuses: a module-level integer that is not a ``tl.constexpr``, a loop
variable whose type changes. The first device try of ``ddtree_tree_kernel`` failed on exactly those
(tests/device/records/2026-12-05-h100-ddtree-e2e-graph-fallback), so compile every variant the worker can
launch before spending device time: the tree program at register widths 16-128 with and without the FULL
mask, the commit program at block widths 2-32. Exit status 0 when every variant compiles.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

REPO = pathlib.Path(__file__).resolve().parents[2]


def load_kernels(set_dir):
    path = REPO / set_dir / "files/sglang/srt/speculative/ddtree_tree_kernel.py"
    spec = importlib.util.spec_from_file_location("ddtree_tree_kernel_compile", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variants(kernels):
    """(name, fn, signature, constexprs, num_warps) of every program variant the worker launches."""
    tree = kernels._tree_kernel
    floats = {"s_lp_ptr", "score_out"}
    bytes_ = {"mask_out", "full_out"}
    sig = {n: ("*fp64" if n in floats else "*u8" if n in bytes_ else "*i64") for n in tree.arg_names}
    sig.update(N="i32", D="i32", K="i32", CHAIN="i32", ROUNDS="i32", HAS_PREFIX="constexpr", HAS_FULL="constexpr")
    sig["P"] = "constexpr"
    for width in (16, 32, 64, 128):
        for full in (False, True):
            consts = {"HAS_PREFIX": True, "HAS_FULL": full, "P": width}
            yield "tree P=%d full=%s" % (width, full), tree, sig, consts, 4 if width <= 32 else 8
    commit = kernels._commit_kernel
    csig = {n: "*i64" for n in commit.arg_names}
    csig.update(accept_ptr="*i32", drafts_ptr="*i32", predicts_ptr="*i32", commit_out="*i32")
    csig.update(B="i32", N="i32", INTERVAL="i32", BP="constexpr")
    for width in (2, 4, 8, 16, 32):
        yield "commit BP=%d" % width, commit, csig, {"BP": width}, 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", default="patchsets/ddtree-0.5.17")
    p.add_argument("--arch", default="90,120", help="compute capabilities, e.g. 90,120")
    args = p.parse_args(argv)
    kernels = load_kernels(args.set)
    failed = 0
    for arch in (int(a) for a in args.arch.split(",")):
        for name, fn, sig, consts, warps in variants(kernels):
            try:
                out = triton.compile(
                    ASTSource(fn=fn, signature=sig, constexprs=consts),
                    target=GPUTarget("cuda", arch, 32),
                    options={"num_warps": warps},
                )
                print("sm_%d %s: ok (%d bytes of PTX)" % (arch, name, len(out.asm.get("ptx", ""))))
            except Exception as exc:  # every refusal is reported, then the exit status says it
                failed += 1
                print("sm_%d %s: FAILED %s" % (arch, name, str(exc).splitlines()[-1][:300]))
    print("triton %s: %s" % (triton.__version__, "every variant compiles" if not failed else "%d failed" % failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
