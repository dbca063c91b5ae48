#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""DDTree on a real GPU: the ddtree patch set's kernels, losslessness, accept length and budget.

Runs on the device machine against a venv where sglang 0.5.17 has the ddtree-0.5.17 patch set
applied (tests/device/run-h200 builds it through Ansible; or pass --apply-patchset). Stdlib only in
this process; the GPU work runs in the venv's python.

  ddtree_check.py --python VENV/bin/python --target T --draft D --out DIR [--block 4]
                  [--budgets 16,8] [--prompts 8] [--tokens 64] [--apply-patchset patchsets/ddtree-0.5.17]
                  [--prompts-file prompts.json]   (a trained pair's held-out prompts: train_tiny_pair.py)

Steps (each result in DIR/ddtree-check.json, a summary in DIR/ddtree-summary.txt, server logs in DIR):
 1. kernels: random trees from the installed ddtree_utils; sgl_kernel.reconstruct_indices_from_tree_mask
    gives the same positions / first-child / next-sibling links as ddtree_utils, and
    sgl_kernel.verify_tree_greedy accepts the same path and bonus as ddtree_utils.verify_greedy.
 2. servers, one after another, same prompts at temperature 0: the target alone, DFLASH, and DDTREE
    once per budget (SGLANG_DDTREE_BUDGET). All requests of a server are sent at once (batch > 1).
 3. checks: DDTREE output_ids == the target's (a divergence passes only at a near-tie: the target's
    own top-2 log-probabilities at that token within --tie-gap); DDTREE mean accept length >= DFLASH's;
    spec_verify_ct > 0; the tree size logged by every DDTREE verify step equals its budget.

--hybrid (a hybrid Gated DeltaNet target, e.g. build_tiny_models.build_hybrid_pair's): the servers start
at once (a hybrid cold start compiles the GDN kernels for about two minutes; --mem-fraction-static is a
share of the memory free at each server's start, so four at 0.2 fit), with --disable-radix-cache (unless
--deploy-config); the block size and the prompt vocabulary come from the pair's configs; every DDTREE verify
step must log recurrent_state=tree (the hybrid path ran). --deploy-config keeps decode CUDA graphs and the
radix cache on, as a deploy runs the servers: every DDTREE server must then log most of its verify steps
cuda_graph=True. With --readiness, the first DDTREE server is started and judged by the collection's own
readiness code (plugins/module_utils/_readiness/readiness.py, pid mode, as readiness_real.py) expecting
speculative_algorithm DDTREE with speculative evidence in its probe (the probe sends text: that server keeps
its tokenizer).
Exit status: 0 when every check passes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ddtree_accept_stats  # noqa: E402  (tests/device: the off-chain counts of --count-off-chain)

KERNEL_CHECK = r"""
import json, random, sys
import torch
from sgl_kernel import reconstruct_indices_from_tree_mask, verify_tree_greedy
from sglang.srt.speculative import ddtree_utils as du

rng = random.Random(int(sys.argv[1]))
dev = "cuda"
report = {"trees": 0, "link_mismatches": 0, "verify_mismatches": 0, "examples": []}
for trial in range(40):
    bs, block, topk = rng.randint(1, 4), rng.randint(2, 6), rng.randint(1, 4)
    budget = min(rng.randint(block, 24), du.tree_capacity(block, topk))
    trees, prefix = [], []
    for b in range(bs):
        lps = [sorted((-rng.random() * 5 for _ in range(topk)), reverse=True) for _ in range(block - 1)]
        toks = [rng.sample(range(50), topk) for _ in range(block - 1)]
        trees.append(du.build_tree(rng.randrange(50), lps, toks, budget))
        prefix.append(rng.randint(1, 300))
    n = budget
    mask = torch.tensor([du.ancestor_mask(t.parents) for t in trees], dtype=torch.bool, device=dev).reshape(-1)
    seq_lens = torch.tensor(prefix, dtype=torch.int64, device=dev)
    positions = torch.empty(bs * n, dtype=torch.int64, device=dev)
    r_index = torch.empty((bs, n), dtype=torch.int64, device=dev)
    r_next = torch.empty((bs, n), dtype=torch.int64, device=dev)
    r_sib = torch.empty((bs, n), dtype=torch.int64, device=dev)
    reconstruct_indices_from_tree_mask(mask, seq_lens, positions, r_index, r_next, r_sib, bs, n)
    want_pos, want_next, want_sib = [], [], []
    for b, t in enumerate(trees):
        fc, ns = du.retrieve_links(t.parents)
        want_pos += du.positions(t.depths, prefix[b]); want_next += fc; want_sib += ns
    got = (positions.tolist(), sum(r_next.tolist(), []), sum(r_sib.tolist(), []))
    if got != (want_pos, want_next, want_sib):
        report["link_mismatches"] += 1
        if len(report["examples"]) < 3:
            want = [want_pos, want_next, want_sib]
            report["examples"].append({"parents": [t.parents for t in trees], "got": got, "want": want})
    # Target predictions: follow a random tree child half of the time, else a random token.
    predict = []
    for t in trees:
        fc, ns = du.retrieve_links(t.parents)
        row = []
        for i in range(n):
            kids = [c for c in range(n) if t.parents[c] == i]
            row.append(t.tokens[rng.choice(kids)] if kids and rng.random() < 0.6 else rng.randrange(60))
        predict.append(row)
    cand = torch.tensor([t.tokens for t in trees], dtype=torch.int64, device=dev)
    tp = torch.tensor(predict, dtype=torch.int64, device=dev)
    links = [du.retrieve_links(t.parents) for t in trees]
    nt = torch.tensor([l[0] for l in links], dtype=torch.int64, device=dev)
    sb = torch.tensor([l[1] for l in links], dtype=torch.int64, device=dev)
    ri = torch.arange(bs * n, dtype=torch.int64, device=dev).view(bs, n)
    predicts = torch.zeros(bs * n, dtype=torch.int32, device=dev)
    acc_index = torch.full((bs, block), -1, dtype=torch.int32, device=dev)
    acc_num = torch.zeros(bs, dtype=torch.int32, device=dev)
    verify_tree_greedy(predicts=predicts, accept_index=acc_index, accept_token_num=acc_num, candidates=cand,
                       retrive_index=ri, retrive_next_token=nt, retrive_next_sibling=sb, target_predict=tp)
    for b, t in enumerate(trees):
        path, bonus = du.verify_greedy(t.tokens, t.parents, predict[b])
        k = int(acc_num[b])
        got_path = [int(x) - b * n for x in acc_index[b, : k + 1].tolist()]
        got_bonus = int(predicts[b * n + got_path[-1]])
        if got_path != path or got_bonus != bonus:
            report["verify_mismatches"] += 1
            if len(report["examples"]) < 6:
                report["examples"].append({"tokens": t.tokens, "parents": t.parents, "predict": predict[b],
                                           "kernel": [got_path, got_bonus], "reference": [path, bonus]})
    report["trees"] += bs
print(json.dumps(report))
"""


MAKE_MODELS = r"""
import json, os, sys
import torch
from safetensors.torch import save_file
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3Model

out, block, seed, head_std = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
hot, cold_std = int(sys.argv[5]), float(sys.argv[6])
sys.path.insert(0, sys.argv[7])  # tests/device: the tiny geometry's owner
from build_tiny_models import (HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, KV_HEADS, LAYERS, MASK_TOKEN_ID,
                               TARGET_LAYER_IDS, VOCAB)
torch.manual_seed(seed)
geo = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_attention_heads=HEADS,
           num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, max_position_embeddings=4096, rms_norm_eps=1e-6,
           rope_theta=1000000.0, tie_word_embeddings=False, torch_dtype="bfloat16")
target_dir, draft_dir = os.path.join(out, "target"), os.path.join(out, "draft")
target = Qwen3ForCausalLM(Qwen3Config(num_hidden_layers=LAYERS, **geo)).to(torch.bfloat16)
with torch.no_grad():
    # hot > 0: a few "hot" tokens get large lm_head rows, every other row is small. The target then
    # always answers with a hot token and the draft (which uses the target's lm_head) ranks the hot
    # tokens first, so the tree's top-k holds the target's choice much more often than the chain's
    # top-1: drafts off the chain get accepted, which is what exercises the tree mask.
    target.lm_head.weight.normal_(0.0, cold_std if hot else head_std)
    if hot:
        target.lm_head.weight[100 : 100 + hot].normal_(0.0, head_std)
target.save_pretrained(target_dir, safe_serialization=True)
layer_ids = TARGET_LAYER_IDS
body = Qwen3Model(Qwen3Config(num_hidden_layers=1, **geo)).to(torch.bfloat16)
state = {k: v.contiguous() for k, v in body.state_dict().items() if not k.startswith("embed_tokens")}
state["fc.weight"] = (torch.randn(HIDDEN, HIDDEN * len(layer_ids)) * 0.02).to(torch.bfloat16)
state["hidden_norm.weight"] = torch.ones(HIDDEN, dtype=torch.bfloat16)
os.makedirs(draft_dir, exist_ok=True)
save_file(state, os.path.join(draft_dir, "model.safetensors"), metadata={"format": "pt"})
cfg = dict(geo, architectures=["DFlashDraftModel"], model_type="qwen3", num_hidden_layers=1,
           num_target_layers=LAYERS, block_size=block,
           dflash_config={"block_size": block, "target_layer_ids": layer_ids, "mask_token_id": MASK_TOKEN_ID})
json.dump(cfg, open(os.path.join(draft_dir, "config.json"), "w"), indent=1)
print(json.dumps({"target": target_dir, "draft": draft_dir}))
"""


def log(msg):
    print("[ddtree-check] %s" % msg, flush=True)


def http_json(url, payload=None, timeout=120):
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode() or "null")


def site_packages(python):
    code = (
        "import importlib.util, os; s = importlib.util.find_spec('sglang');"
        "print(os.path.dirname(list(s.submodule_search_locations)[0]))"
    )
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def apply_patchset(python, set_dir, out):
    sys.path.insert(0, str(REPO / "collections"))
    from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps  # noqa: PLC0415

    site = site_packages(python)
    manifest = ps.load_manifest(set_dir)
    result = ps.apply(set_dir, site, str(out / "patch-backups"), manifest, python)
    log("patch set %s on %s: changed=%s" % (manifest["name"], site, result["changed"]))
    return {"site_packages": site, "changed": result["changed"]}


class Server:
    def __init__(self, name, python, args, *, env, port, out, command=None, cwd=None):
        """``command``: an argv run as is (the deploy's rendered command; its own --port), else launch_server;
        ``cwd``: the working directory (the unit's WorkingDirectory for a rendered command)."""
        if command is not None:
            port = int(command[command.index("--port") + 1])
        self.name, self.port = name, port
        self.log_path = out / ("server-%s.log" % name)
        self.url = "http://127.0.0.1:%d" % port
        cmd = list(command) if command is not None else [
            python, "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", str(port), *args
        ]  # fmt: skip
        self.cmd = cmd
        self.fh = open(self.log_path, "wb")
        self.start = time.monotonic()
        self.proc = subprocess.Popen(
            cmd, stdout=self.fh, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )

    def wait_ready(self, timeout):
        while time.monotonic() - self.start < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    "%s exited with %s before ready (see %s)" % (self.name, self.proc.returncode, self.log_path)
                )
            try:
                http_json(self.url + "/model_info", timeout=5)
                return time.monotonic() - self.start
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(1)
        raise RuntimeError("%s not ready in %ss" % (self.name, timeout))

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.fh.close()


def run_prompts(server, prompts, tokens, logprobs, on_start=None):
    """All prompts at once after one warm-up request; ``on_start()`` runs between the two."""

    def one(ids):
        payload = {
            "input_ids": ids,
            "sampling_params": {"temperature": 0, "max_new_tokens": tokens, "ignore_eos": True},
        }
        if logprobs:
            payload.update({"return_logprob": True, "top_logprobs_num": 2})
        return http_json(server.url + "/generate", payload, timeout=300)

    # Warm-up request (first-use JIT), then all prompts at once so the verify batch is > 1.
    one(prompts[0])
    if on_start is not None:
        on_start()
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
        answers = list(pool.map(one, prompts))
    wall = time.monotonic() - start
    rows = []
    for ans in answers:
        meta = ans.get("meta_info", {})
        ids = ans.get("output_ids")
        if ids is None and meta.get("output_token_logprobs"):
            ids = [t[1] for t in meta["output_token_logprobs"]]
        row = {
            "output_ids": ids,
            "completion_tokens": meta.get("completion_tokens"),
            "spec_verify_ct": meta.get("spec_verify_ct"),
            "spec_accept_length": meta.get("spec_accept_length"),
        }
        if logprobs:
            row["top2"] = [[t[0] for t in (pos or [])[:2]] for pos in meta.get("output_top_logprobs", [])]
        rows.append(row)
    total = sum(r["completion_tokens"] or 0 for r in rows)
    return {"rows": rows, "wall_s": round(wall, 3), "tokens_per_s": round(total / wall, 1) if wall else None}


def score_outputs(server, prompts, runs):
    """The target (no speculation) scores every token each speculative run emitted, in one prefill.

    For every emitted token: the gap between the target's own top-1 log-probability and the emitted
    token's, given the run's own preceding tokens. 0 = the target's greedy choice.
    """

    def one(args):
        prompt, output = args
        payload = {
            "input_ids": prompt + output,
            "sampling_params": {"temperature": 0, "max_new_tokens": 1},
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": 1,
        }
        meta = http_json(server.url + "/generate", payload, timeout=300)["meta_info"]
        chosen = meta["input_token_logprobs"][-len(output) :]
        top = meta["input_top_logprobs"][-len(output) :]
        gaps = []
        for (lp, tok, *_), best, want in zip(chosen, top, output):
            if tok != want:
                raise RuntimeError("scoring misaligned: token %s at a position of %s" % (tok, want))
            gaps.append(round(best[0][0] - lp, 5) if tok != best[0][1] else 0.0)
        return gaps

    scored = {}
    for name, rows in runs.items():
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            scored[name] = list(pool.map(one, [(p, r["output_ids"]) for p, r in zip(prompts, rows)]))
    return scored


def replay_lossless(name, gaps_per_prompt, tie_gap):
    """Lossless when every emitted token is the target's greedy choice, up to a rounding-size gap."""
    flat = [g for gaps in gaps_per_prompt for g in gaps]
    off = [g for g in flat if g > 0]
    out = {
        "tokens": len(flat),
        "target_top1": len(flat) - len(off),
        "near_tie": sum(1 for g in off if g <= tie_gap),
        "not_near_tie": sum(1 for g in off if g > tie_gap),
        "max_gap": max(flat) if flat else None,
        "tie_gap": tie_gap,
    }
    out["pass"] = bool(flat) and out["not_near_tie"] == 0
    log(
        "%s replayed by the target: %d/%d tokens its top-1, %d near-tie, %d beyond %.3f (max gap %s)"
        % (name, out["target_top1"], len(flat), out["near_tie"], out["not_near_tie"], tie_gap, out["max_gap"])
    )
    return out


def first_divergence(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def lossless(name, rows, ref_rows, tie_gap):
    out = {"identical": 0, "near_tie": 0, "bugs": 0, "divergences": []}
    for i, (r, ref) in enumerate(zip(rows, ref_rows)):
        k = first_divergence(r["output_ids"], ref["output_ids"])
        if k is None:
            out["identical"] += 1
            continue
        top2 = ref["top2"][k] if k < len(ref.get("top2", [])) else []
        gap = (top2[0] - top2[1]) if len(top2) == 2 else None
        tie = gap is not None and gap <= tie_gap
        out["near_tie" if tie else "bugs"] += 1
        out["divergences"].append({"prompt": i, "index": k, "target_top2_gap": gap, "near_tie": tie})
    out["pass"] = out["bugs"] == 0
    log(
        "%s vs target: %d identical, %d near-tie, %d NOT near-tie"
        % (name, out["identical"], out["near_tie"], out["bugs"])
    )
    return out


def mean_accept(rows):
    vals = [r["spec_accept_length"] for r in rows if r.get("spec_accept_length") is not None]
    return round(sum(vals) / len(vals), 4) if vals else None


def budget_lines(log_path):
    text = log_path.read_text(errors="replace")
    start = re.findall(r"DDTREE draft tree: block_size=(\d+) budget=(\d+) \(requested (\d+)", text)
    steps = [int(m) for m in re.findall(r"DDTREE verify step \d+: bs=\d+ tree_nodes_per_request=(\d+)", text)]
    state = re.findall(r"DDTREE verify step \d+: .* recurrent_state=(\w+)", text)
    graphs = re.findall(r"DDTREE verify step \d+: .* cuda_graph=(True|False)", text)
    return {
        "startup": [list(map(int, s)) for s in start],
        "step_tree_nodes": steps,
        "recurrent_state": state,
        "cuda_graph": {"True": graphs.count("True"), "False": graphs.count("False")},
    }


def build_parser():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", required=True, help="the venv's python (sglang 0.5.17 with the ddtree set)")
    p.add_argument("--target", help="target model dir (or --make-models)")
    p.add_argument("--draft", help="DFlash draft model dir (or --make-models)")
    p.add_argument("--make-models", metavar="DIR", help="build a tiny random Qwen3 target + DFlash draft here")
    p.add_argument("--head-std", type=float, default=0.25, help="--make-models: lm_head init std (hot rows)")
    p.add_argument("--hot-tokens", type=int, default=8, help="--make-models: tokens with large lm_head rows (0: none)")
    p.add_argument("--cold-std", type=float, default=0.02, help="--make-models: lm_head init std of the other rows")
    p.add_argument("--out", required=True)
    p.add_argument("--block", type=int, default=4, help="DFlash block size B (--speculative-num-draft-tokens)")
    p.add_argument("--budgets", default="16,8", help="SGLANG_DDTREE_BUDGET values, one DDTREE server each")
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--vocab", type=int, default=4096, help="prompt token ids are drawn below this")
    p.add_argument("--prompts-file", help="JSON list of prompts (token id lists) instead of random ids")
    p.add_argument(
        "--tie-gap",
        type=float,
        default=0.125,
        help="largest target logprob gap between its own top-1 and an emitted token that counts as rounding",
    )
    p.add_argument("--port", type=int, default=31300)
    p.add_argument("--ready-timeout", type=int, default=300)
    p.add_argument("--size-timeout", type=int, default=150, help="--hybrid: wait this long for a server's pools")
    p.add_argument("--apply-patchset", help="apply this patch set to the venv first (else it must be applied)")
    p.add_argument("--skip-kernels", action="store_true")
    p.add_argument("--no-dflash", action="store_true", help="no DFLASH server (no accept-length comparison)")
    p.add_argument("--extra-flag", action="append", default=[], help="extra launch_server flag (repeatable)")
    p.add_argument("--hybrid", action="store_true", help="a hybrid GDN target: servers at once, recurrent checks")
    p.add_argument(
        "--deploy-config", action="store_true",
        help="the servers as a deploy runs them: decode CUDA graphs on and (--hybrid) the radix cache on; every DDTREE "
        "server must then verify mostly on graphs (without it: eager, the hybrid servers' radix cache off)",
    )  # fmt: skip
    p.add_argument("--readiness", action="store_true", help="judge the first DDTREE server by sglang_readiness")
    p.add_argument(
        "--count-off-chain", action="store_true",
        help="count each DDTREE server's accepted nodes on / off the top-1 chain (ddtree_accept_stats.py, loaded "
        "by sglang's own plugin entry points; such a server is not timed)",
    )  # fmt: skip
    p.set_defaults(exclude_ids=set())
    return p


def hybrid_geometry(args):
    """--hybrid: the block size from the draft's config, the prompt vocabulary from the target's."""
    draft = json.loads((pathlib.Path(args.draft) / "config.json").read_text())
    block = (draft.get("dflash_config") or {}).get("block_size") or draft.get("block_size")
    if block:
        args.block = int(block)
    target = json.loads((pathlib.Path(args.target) / "config.json").read_text())
    vocab = (target.get("text_config") or target).get("vocab_size")
    if vocab:
        args.vocab = min(args.vocab, int(vocab) - 2)
    # No prompt token is one of the model's special ids (the vision tokens above all: an image pad
    # without an image is not a text prompt).
    for cfg in (target, target.get("text_config") or {}):
        args.exclude_ids |= {int(v) for k, v in cfg.items() if k.endswith("_token_id") and isinstance(v, int)}
    log("hybrid: block size %d, prompt ids below %d" % (args.block, args.vocab))


def random_prompt(rng, args):
    """8-24 token ids in [10, --vocab), none of them excluded (the dense runs' draw when none is)."""
    out = []
    for _ in range(rng.randint(8, 24)):
        t = rng.randrange(10, args.vocab)
        while t in args.exclude_ids:
            t = rng.randrange(10, args.vocab)
        out.append(t)
    return out


def has_tokenizer(model_dir):
    return any((pathlib.Path(model_dir) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))


def make_models(args, out):
    """(target dir, draft dir) built by MAKE_MODELS in the venv's python, or None on failure."""
    made = subprocess.run(
        [
            *(args.python, "-c", MAKE_MODELS, args.make_models, str(args.block), "1130"),
            *(str(args.head_std), str(args.hot_tokens), str(args.cold_std), str(REPO / "tests" / "device")),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    (out / "make-models.log").write_text(made.stdout + made.stderr)
    if made.returncode != 0:
        log("make-models failed: %s" % made.stderr[-3000:])
        return None
    models = json.loads(made.stdout.strip().splitlines()[-1])
    return models["target"], models["draft"]


def kernel_check(python, out):
    proc = subprocess.run([python, "-c", KERNEL_CHECK, "7"], capture_output=True, text=True, check=False)
    (out / "kernel-check.log").write_text(proc.stdout + proc.stderr)
    kern = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else {"error": proc.stderr[-2000:]}
    kern["pass"] = proc.returncode == 0 and kern.get("link_mismatches") == 0 and kern.get("verify_mismatches") == 0
    log("kernels: %s" % {k: v for k, v in kern.items() if k != "examples"})
    return kern


def plan_runs(args, budgets):
    """[(name, launch flags, extra env, want logprobs)]: DFLASH, DDTREE per budget, then the target."""
    common = [
        "--model-path", args.target, "--dtype", "bfloat16", "--attention-backend", "triton",
        "--sampling-backend", "pytorch", "--grammar-backend", "none", "--mem-fraction-static", "0.2",
        "--context-length", "2048", "--max-running-requests", str(max(8, args.prompts)),
        *([] if args.deploy_config else ["--disable-cuda-graph"]),
        "--skip-tokenizer-init",
        *args.extra_flag,
    ]  # fmt: skip
    spec = [
        "--speculative-draft-model-path", args.draft, "--speculative-num-draft-tokens", str(args.block),
        "--speculative-draft-attention-backend", "triton",
    ]  # fmt: skip
    runs = [] if args.no_dflash else [("dflash", [*common, "--speculative-algorithm", "DFLASH", *spec], {}, False)]
    for b in budgets:
        flags = [*common, "--speculative-algorithm", "DDTREE", *spec]
        env = {"SGLANG_DDTREE_BUDGET": str(b)}
        if args.count_off_chain:  # server_env: sglang's plugin hook, through tests/device/sglang_plugin
            env[ddtree_accept_stats.ENV] = str(accept_stats_path(pathlib.Path(args.out), "ddtree-n%d" % b))
        runs.append(("ddtree-n%d" % b, flags, env, False))
    runs.append(("target", common, {}, True))  # last: it also scores what the others emitted
    if args.hybrid and not args.deploy_config:
        runs = [(n, [*f, "--disable-radix-cache"], e, w) for n, f, e, w in runs]
    if args.readiness and has_tokenizer(args.target):
        # The readiness probe sends text: the judged DDTREE server keeps its tokenizer.
        first = next(i for i, r in enumerate(runs) if r[0].startswith("ddtree"))
        name, flags, env, want = runs[first]
        runs[first] = (name, [f for f in flags if f != "--skip-tokenizer-init"], env, want)
    return runs


def server_env(base_env, extra_env):
    """A run's environment: ``extra_env`` over ``base_env``; a counted run (ddtree_accept_stats.ENV) also gets
    the accept-stats plugin on its PYTHONPATH (ddtree_accept_stats.server_env)."""
    env = dict(base_env, **extra_env)
    counted = extra_env.get(ddtree_accept_stats.ENV)
    return ddtree_accept_stats.server_env(env, counted) if counted else env


def accept_stats_path(out, name):
    return out / ("accept-stats-%s.json" % name)


def run_one(server, name, prompts, args, *, results, want_logprobs):
    ready = server.wait_ready(args.ready_timeout)
    log("%s ready in %.1fs" % (name, ready))
    counted = args.count_off_chain and name.startswith("ddtree")
    stats_path = accept_stats_path(pathlib.Path(args.out), name)
    before = {}
    res = run_prompts(
        server, prompts, args.tokens, want_logprobs,
        on_start=(lambda: before.update(ddtree_accept_stats.read(stats_path))) if counted else None,
    )  # fmt: skip
    res["ready_s"] = round(ready, 1)
    res["mean_accept_length"] = mean_accept(res["rows"])
    if counted:
        res["accept_stats"] = ddtree_accept_stats.delta(before, ddtree_accept_stats.read(stats_path))
        log("%s accepted drafts: %s" % (name, res["accept_stats"]))
    if name == "target":
        spec_rows = {k: v["rows"] for k, v in results.items() if "rows" in v}
        try:
            res["replay_gaps"] = score_outputs(server, prompts, spec_rows)
        except Exception as exc:
            res["replay_error"] = repr(exc)
            log("target scoring FAILED: %r" % exc)
    log("%s: %.1f tok/s, mean accept length %s" % (name, res["tokens_per_s"] or 0, res["mean_accept_length"]))
    return res


def run_servers(args, runs, prompts, out):
    base_env = dict(os.environ, HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1")
    base_env.pop("SGLANG_DDTREE_BUDGET", None)
    results = {}
    for i, (name, flags, extra_env, want_logprobs) in enumerate(runs):
        server = Server(name, args.python, flags, env=server_env(base_env, extra_env), port=args.port + i, out=out)
        try:
            results[name] = run_one(server, name, prompts, args, results=results, want_logprobs=want_logprobs)
        except Exception as exc:
            results[name] = {"error": str(exc)}
            log("%s FAILED: %s" % (name, exc))
        finally:
            server.stop()
        if name.startswith("ddtree"):
            results[name]["budget_log"] = budget_lines(server.log_path)
        (out / "ddtree-partial.json").write_text(json.dumps(results, indent=1))  # survives a time-out
    return results


POOLS_SIZED = re.compile(r"max_total_num_tokens=\d+")


def wait_for_line(server, pattern, timeout):
    """Seconds until ``pattern`` shows in the server's log; None when it exits or the time runs out."""
    while time.monotonic() - server.start < timeout:
        if pattern.search(server.log_path.read_text(errors="replace")):
            return round(time.monotonic() - server.start, 1)
        if server.proc.poll() is not None:
            return None
        time.sleep(0.5)
    return None


def readiness_check(server, args):
    """The collection's readiness code on a DDTREE server from its start (readiness_real.py's run)."""
    import readiness_real  # noqa: PLC0415 - tests/device, next to this file

    return readiness_real.readiness_run(
        server, probe_timeout=120, startup_timeout=args.ready_timeout, settle_label="ddtree", expect="DDTREE"
    )


def _wait_all(servers, args, results):
    for name, server in servers.items():
        try:
            results.setdefault(name, {})["ready_s"] = round(server.wait_ready(args.ready_timeout), 1)
            log("%s ready in %.1fs" % (name, results[name]["ready_s"]))
        except Exception as exc:
            results[name] = {"error": str(exc)}
            log("%s FAILED: %s" % (name, exc))


def _warm_all(servers, prompts, results):
    """First requests at once: the tree kernels compile on each server's first verify."""
    live = [n for n in servers if "error" not in results[n]]
    with concurrent.futures.ThreadPoolExecutor(max(1, len(live))) as pool:
        warm = {n: pool.submit(run_prompts, servers[n], prompts[:1], 4, False) for n in live}
        for n, fut in warm.items():
            try:
                fut.result()
            except Exception as exc:
                results[n] = {"error": "warm-up: %s" % exc}


def run_servers_at_once(args, runs, prompts, out):
    """--hybrid: every server starts at once; readiness, then prompts one server after another."""
    base_env = dict(os.environ, HF_HUB_OFFLINE="1", SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK="1")
    base_env.pop("SGLANG_DDTREE_BUDGET", None)
    results, servers = {}, {}
    judged = None
    if args.readiness and has_tokenizer(args.target):
        judged = next((n for n, *_ in runs if n.startswith("ddtree")), None)
    try:
        for i, (name, flags, extra_env, _want) in enumerate(runs):
            env = server_env(base_env, extra_env)
            servers[name] = Server(name, args.python, flags, env=env, port=args.port + i, out=out)
            time.sleep(2)  # staggered: sglang picks its internal ports at start
            # --mem-fraction-static is a share of the memory free at a server's own profile: the next
            # server starts once this one has sized its pools (run 3 of 2026-12-01 lost a server when
            # four allocated at once), while the slow part, the GDN kernel compile, still overlaps.
            sized = wait_for_line(servers[name], POOLS_SIZED, args.size_timeout)
            log("%s pools sized: %s" % (name, sized))
        if judged:
            results["readiness"] = readiness_check(servers[judged], args)
        _wait_all(servers, args, results)
        _warm_all(servers, prompts, results)
        for name, _flags, _env, want_logprobs in runs:
            if "error" in results[name]:
                continue
            ready = results[name]["ready_s"]
            try:
                results[name] = run_one(
                    servers[name], name, prompts, args, results=results, want_logprobs=want_logprobs
                )
                results[name]["ready_s"] = ready
            except Exception as exc:
                results[name] = {"error": str(exc)}
                log("%s FAILED: %s" % (name, exc))
            (out / "ddtree-partial.json").write_text(json.dumps(results, indent=1))  # survives a time-out
    finally:
        for name, server in servers.items():
            server.stop()
            if name.startswith("ddtree") and name in results:
                results[name]["budget_log"] = budget_lines(server.log_path)
    return results


def hybrid_checks(results, budgets):
    checks = {}
    for b in budgets:
        name = "ddtree-n%d" % b
        state = results.get(name, {}).get("budget_log", {}).get("recurrent_state", [])
        checks["recurrent_state_%s" % name] = {
            "logged": sorted(set(state)),
            "pass": bool(state) and set(state) == {"tree"},
        }
    return checks


def mode_checks(args, results, budgets):
    checks = hybrid_checks(results, budgets) if args.hybrid else {}
    if args.readiness:
        checks["readiness_ddtree"] = readiness_verdict(results)
    return checks


def readiness_verdict(results):
    res = results.get("readiness")
    if res is None:
        return {"pass": False, "error": "no readiness run (the probe sends text: the target needs a tokenizer)"}
    probe = res.get("probe") or {}
    server = res.get("server") or {}
    return {
        "ready": res.get("ready"),
        "failure_class": res.get("failure_class"),
        "reason": res.get("reason"),
        "speculative_algorithm": server.get("speculative_algorithm"),
        "probe_spec_verify_ct": probe.get("spec_verify_ct"),
        "time_to_ready_s": res.get("time_to_ready_s"),
        "pass": res.get("ready") is True and (probe.get("spec_verify_ct") or 0) > 0,
    }


def speculative_checks(results, tie_gap):
    checks = {}
    ref = results.get("target", {}).get("rows")
    for name, res in results.items():
        if name in ("target", "readiness") or "rows" not in res or ref is None:
            continue
        first = lossless(name, res["rows"], ref, tie_gap)
        first["pass"] = True  # informative: the per-token replay below is the check
        checks["first_divergence_%s" % name] = first
        replay = results["target"].get("replay_gaps", {}).get(name)
        checks["lossless_%s" % name] = (
            replay_lossless(name, replay, tie_gap) if replay else {"pass": False, "error": "not scored"}
        )
        verify_ct = [r["spec_verify_ct"] or 0 for r in res["rows"]]
        checks["spec_verify_ct_%s" % name] = {"min": min(verify_ct), "pass": min(verify_ct) > 0}
    return checks


def accept_stats_check(res, block):
    """The counted accepted drafts against what the server reported for the same requests.

    Each request's first token comes from its prefill and each verify step commits its accepted drafts
    plus one token, so the drafts accepted are completion - 1 - spec_verify_ct, and up to B - 1 more per
    request when its last step overshot max_new_tokens.

    The overlap scheduler (sglang's default) launches the next step before it has read the last one's
    result, so a request that finished is verified once more; the scheduler drops that step's result
    and does not count it in spec_verify_ct, while the hook has counted it. So the hook may count up
    to one step per request more than the server reported (never fewer), each with up to B - 1
    drafts: the H200 run of 2026-12-02 counted exactly 8 such steps for 8 requests at N=16 and N=8
    (tests/device/records/2026-12-02-h200-hybrid-trained).
    """
    stats = res.get("accept_stats")
    if stats is None:
        return {"pass": False, "error": "no accept stats (the server did not count)"}
    rows = res.get("rows", [])
    low = sum((r["completion_tokens"] or 0) - 1 - (r["spec_verify_ct"] or 0) for r in rows)
    reported_steps = sum(r["spec_verify_ct"] or 0 for r in rows)
    dropped = stats["request_steps"] - reported_steps
    high = low + (block - 1) * (len(rows) + max(dropped, 0))
    counted = stats["accepted_drafts"]
    return {
        "accepted_drafts": counted,
        "off_chain_accepted": stats["off_chain_accepted"],
        "off_chain_share": round(stats["off_chain_accepted"] / counted, 4) if counted else None,
        "request_steps": stats["request_steps"],
        "request_steps_off_chain": stats["request_steps_off_chain"],
        "off_chain_by_depth": stats["off_chain_by_depth"],
        "reported_steps": reported_steps,
        "dropped_steps": dropped,
        "reported_accepted_range": [low, high],
        "pass": low <= counted <= high and 0 <= dropped <= len(rows) and stats["request_steps"] > 0,
    }


def ddtree_checks(results, budgets, with_dflash, count_off_chain=False, block=4, *, deploy_config=False):
    checks = {}
    dflash_acc = results.get("dflash", {}).get("mean_accept_length")
    for b in budgets:
        name = "ddtree-n%d" % b
        res = results.get(name, {})
        acc = res.get("mean_accept_length")
        if with_dflash:
            checks["accept_%s_ge_dflash" % name] = {
                "ddtree": acc,
                "dflash": dflash_acc,
                "pass": acc is not None and dflash_acc is not None and acc >= dflash_acc - 1e-6,
            }
        if count_off_chain and "rows" in res:
            checks["accept_stats_%s" % name] = accept_stats_check(res, block)
        bl = res.get("budget_log", {"startup": [], "step_tree_nodes": []})
        if deploy_config:  # verify on the target's CUDA graphs, as a deploy runs it: most steps on a graph
            graphs = bl.get("cuda_graph", {"True": 0, "False": 0})
            checks["cuda_graph_%s" % name] = {**graphs, "pass": graphs["True"] > graphs["False"]}
        nodes = set(bl["step_tree_nodes"])
        checks["budget_%s" % name] = {
            "startup": bl["startup"],
            "step_tree_nodes": sorted(nodes),
            "pass": nodes == {b} and any(s[1] == b for s in bl["startup"]),
        }
    return checks


def report(out, result, results):
    checks = result["checks"]
    result["pass"] = bool(checks) and all(c.get("pass") for c in checks.values())
    (out / "ddtree-check.json").write_text(json.dumps(result, indent=1, default=sorted))  # sets (exclude_ids)
    lines = ["%s %s" % ("PASS" if c.get("pass") else "FAIL", k) for k, c in checks.items()]
    for name, res in results.items():
        if "rows" in res:
            lines.append(
                "%s: ready %.1fs, %s tok/s, mean accept length %s"
                % (name, res["ready_s"], res["tokens_per_s"], res["mean_accept_length"])
            )
    lines.append("overall %s in %.1fs" % ("PASS" if result["pass"] else "FAIL", result["wall_s"]))
    (out / "ddtree-summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if result["pass"] else 1


def stop_on_sigterm():
    """A time-out's SIGTERM unwinds through the finally blocks, which stop the servers (own sessions)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def main(argv=None):
    stop_on_sigterm()
    parser = build_parser()
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"args": vars(args), "checks": {}}
    t0 = time.monotonic()
    if args.apply_patchset:
        result["patchset"] = apply_patchset(args.python, args.apply_patchset, out)
    if args.make_models:
        models = make_models(args, out)
        if models is None:
            return 2
        args.target, args.draft = models
    if not (args.target and args.draft):
        parser.error("--target and --draft, or --make-models, are required")
    if args.hybrid:
        hybrid_geometry(args)
    if not args.skip_kernels:
        result["checks"]["kernels"] = kernel_check(args.python, out)

    if args.prompts_file:
        prompts = json.loads(pathlib.Path(args.prompts_file).read_text())[: args.prompts]
    else:
        rng = random.Random(20261130)
        prompts = [random_prompt(rng, args) for _ in range(args.prompts)]
    result["prompts"] = prompts
    budgets = [int(b) for b in args.budgets.split(",") if b.strip()]
    runs = plan_runs(args, budgets)
    results = (run_servers_at_once if args.hybrid else run_servers)(args, runs, prompts, out)
    result["runs"] = results
    result["checks"].update(speculative_checks(results, args.tie_gap))
    result["checks"].update(
        ddtree_checks(
            results, budgets, not args.no_dflash, args.count_off_chain, args.block, deploy_config=args.deploy_config
        )
    )
    result["checks"].update(mode_checks(args, results, budgets))
    for name, *_ in runs:
        if "error" in results.get(name, {}):
            result["checks"]["run_%s" % name] = {"pass": False, "error": results[name]["error"]}
    result["wall_s"] = round(time.monotonic() - t0, 1)
    return report(out, result, results)


if __name__ == "__main__":
    sys.exit(main())
