#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cut the GPU down: hold device memory so that FREE_GIB stays free, until killed (device runs only).

    python gpu_holder.py FREE_GIB [--device 0]

The lent H200 has ~140 GiB; the mission's hosts have 96 GB cards. This allocates (with plain
cudaMalloc through torch) what is free beyond FREE_GIB, prints one JSON line with what it saw and
holds, then sleeps. Its own CUDA context counts as held.
"""

import argparse
import json
import signal
import sys
import time

import torch

GIB = 1 << 30


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("free_gib", type=float)
    parser.add_argument("--device", type=int, default=0)
    args = parser.parse_args()
    torch.cuda.set_device(args.device)
    free, total = torch.cuda.mem_get_info()
    hold = max(0, free - int(args.free_gib * GIB))
    blocks = []
    left = hold
    while left > 0:  # 1 GiB blocks: no single huge allocation to fail
        size = min(left, GIB)
        blocks.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        left -= size
    torch.cuda.synchronize()
    after, _ = torch.cuda.mem_get_info()
    seen = {"total_gib": total, "free_before_gib": free, "held_gib": hold, "free_after_gib": after}
    print(json.dumps({k: round(v / GIB, 3) for k, v in seen.items()}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
