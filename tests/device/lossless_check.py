#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lossless check: greedy output_ids with speculative decoding == the same target without it.

    lossless_check.py --spec http://127.0.0.1:30001 --base http://127.0.0.1:30002 --out DIR
                      [--prompts 8] [--tokens 32] [--tie-gap 0.05]

Both servers get the same prompts at temperature 0 (ignore_eos, so every output has --tokens
tokens). The non-speculative server also returns its top-2 log-probabilities per output token
(a speculative DFLASH server refuses return_logprob). At the first divergence of a prompt, the
target's own top-2 at that position decide: a gap within --tie-gap, with the speculative token
being the runner-up, is bf16 rounding at a near-tie; anything else is a bug. Writes
DIR/lossless.json; exit 0 when every prompt is identical or diverges only at a near-tie.
Stdlib only (runs with any Python on the GPU host).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.request

PROMPTS = (
    "The quick brown fox",
    "Speculative decoding drafts a block of tokens and",
    "The capital of France is",
    "Write a haiku about the sea.",
    "Count from one to ten:",
    "Explain how a GPU runs many threads at once.",
    "A scheduler batches requests;",
    "0123456789",
    "Say hi.",
    "The key value cache holds",
)


def generate(base_url, prompt, tokens, logprobs, timeout=120):
    body = {
        "text": prompt,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True},
    }
    if logprobs:
        body.update({"return_logprob": True, "top_logprobs_num": 2})
    request = urllib.request.Request(
        base_url.rstrip("/") + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def top2(entry):
    """[(logprob, token_id), ...] from one output_top_logprobs entry (tuples or lists)."""
    pairs = []
    for item in entry or []:
        if isinstance(item, dict):
            pairs.append((float(item.get("logprob")), int(item.get("token_id"))))
        else:
            pairs.append((float(item[0]), int(item[1])))
    return sorted(pairs, reverse=True)[:2]


def compare(spec_ids, base_ids, base_top, tie_gap):
    """One prompt's verdict: identical, near_tie (with the evidence) or bug."""
    if spec_ids == base_ids:
        return {"verdict": "identical"}
    position = next(
        (i for i, (a, b) in enumerate(zip(spec_ids, base_ids)) if a != b), min(len(spec_ids), len(base_ids))
    )
    evidence = {"position": position, "spec_token": None, "base_token": None, "base_top2": None, "gap": None}
    if position < len(spec_ids) and position < len(base_ids):
        evidence.update(spec_token=spec_ids[position], base_token=base_ids[position])
    pairs = top2(base_top[position]) if base_top and position < len(base_top) else []
    if len(pairs) == 2:
        gap = pairs[0][0] - pairs[1][0]
        evidence.update(base_top2=pairs, gap=round(gap, 6))
        near_tie = gap <= tie_gap and evidence["spec_token"] in (pairs[0][1], pairs[1][1])
        return dict(evidence, verdict="near_tie" if near_tie else "bug")
    return dict(evidence, verdict="bug", note="no top-2 log-probabilities at the divergence")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="base URL of the speculative server")
    parser.add_argument("--base", required=True, help="base URL of the same target without speculation")
    parser.add_argument("--out", required=True)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--tie-gap", type=float, default=0.05)
    args = parser.parse_args(argv)
    rows = []
    for prompt in PROMPTS[: args.prompts]:
        spec = generate(args.spec, prompt, args.tokens, logprobs=False)
        base = generate(args.base, prompt, args.tokens, logprobs=True)
        base_meta = base.get("meta_info", {})
        row = compare(
            spec.get("output_ids", []), base.get("output_ids", []), base_meta.get("output_top_logprobs"), args.tie_gap
        )
        row.update(
            prompt=prompt,
            spec_ids=spec.get("output_ids"),
            base_ids=base.get("output_ids"),
            spec_verify_ct=spec.get("meta_info", {}).get("spec_verify_ct"),
            spec_accept_length=spec.get("meta_info", {}).get("spec_accept_length"),
            min_base_top2_gap=min(
                (p[0][0] - p[1][0] for p in map(top2, base_meta.get("output_top_logprobs") or []) if len(p) == 2),
                default=None,
            ),
        )
        rows.append(row)
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("identical", "near_tie", "bug")}
    passed = counts["bug"] == 0 and all(len(r["spec_ids"] or []) == args.tokens for r in rows)
    report = {
        "passed": passed,
        "counts": counts,
        "prompts": len(rows),
        "tokens": args.tokens,
        "tie_gap": args.tie_gap,
        "rows": rows,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "lossless.json"), "w", encoding="utf-8") as handle:
        json.dump(report, handle, indent=1)
    print("lossless: %s %s (%d prompts x %d tokens)" % ("PASS" if passed else "FAIL", counts, len(rows), args.tokens))
    for row in rows:
        if row["verdict"] != "identical":
            print(
                "  %r: %s at %s, spec %s / base %s, base top-2 %s, gap %s"
                % (
                    row["prompt"],
                    row["verdict"],
                    row["position"],
                    row["spec_token"],
                    row["base_token"],
                    row["base_top2"],
                    row["gap"],
                )
            )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
