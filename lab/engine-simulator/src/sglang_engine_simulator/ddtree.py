# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the ddtree patch sets make sglang say about the tree budget (patchsets/ddtree-*/…/ddtree_utils.py).

The real engine reads SGLANG_DDTREE_BUDGET (tree nodes verified per request per step, 0 or unset:
2 x block size) and SGLANG_DDTREE_TOPK (default 8), refuses a budget below the block size at start-up
(a ValueError while resolving the server arguments), and logs the tree it will verify.
"""

from __future__ import annotations

import os

MAX_BUDGET = 1024


def _env_int(environ, name):
    raw = (environ.get(name) or "").strip()
    if raw == "":
        return 0
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not an integer") from None


def resolve(block_size: int, environ=None) -> dict:
    """{block_size, requested, budget, topk}; ValueError with the engine's message for a bad setting."""
    environ = os.environ if environ is None else environ
    budget = _env_int(environ, "SGLANG_DDTREE_BUDGET") or 2 * block_size
    topk = _env_int(environ, "SGLANG_DDTREE_TOPK") or 8
    if budget < block_size:
        raise ValueError(
            f"SGLANG_DDTREE_BUDGET={budget} is below the block size {block_size}: the tree must hold the "
            f"top-1 chain, so the budget N must be >= B"
        )
    if budget > MAX_BUDGET:
        raise ValueError(f"SGLANG_DDTREE_BUDGET={budget} exceeds {MAX_BUDGET} tree nodes")
    if topk < 1:
        raise ValueError(f"SGLANG_DDTREE_TOPK={topk} must be >= 1")
    capacity, level = 1, 1
    for _ in range(block_size - 1):
        level *= topk
        capacity += level
        if capacity >= MAX_BUDGET:
            break
    return {"block_size": block_size, "requested": budget, "budget": min(budget, capacity), "topk": topk}


def startup_line(tree: dict) -> str:
    return (
        f"DDTREE draft tree: block_size={tree['block_size']} budget={tree['budget']} "
        f"(requested {tree['requested']}, SGLANG_DDTREE_BUDGET) topk={tree['topk']} "
        f"verify_tokens_per_request={tree['budget']}"
    )
