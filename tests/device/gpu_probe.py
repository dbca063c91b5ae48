#!/usr/bin/env python3
"""Run the GPU preflight and runtime-probe logic on a real GPU host, without Ansible.

Same code as the modules (plugins/module_utils): nvidia_smi + gpu_selection, runtime_probe +
runtime_manifest. Python >= 3.9, stdlib only; run it from a checkout copied to the GPU box.

    python3 tests/device/gpu_probe.py facts [--count N | --select 0 ...] [--exclude 1] [--min-cuda 13.0]
    python3 tests/device/gpu_probe.py runtime --python /opt/torch/.venv/bin/python [--cuda-check]
    python3 tests/device/gpu_probe.py all --python /opt/torch/.venv/bin/python

``facts`` prints per-GPU health, the selection and host problems as JSON. ``runtime`` probes the
venv against a manifest (default: torch 2.11.0+cu130, triton 3.6.0, sglang-kernel 0.4.10 - the
H200 box has no sgl_kernel, so that row reads ``missing``/``not_installed``) and, with
``--cuda-check``, runs the matmul sanity check on every usable GPU (or ``--gpu`` UUIDs).
Exit status: 0 when everything asked for passed, 1 otherwise (``--allow-mismatch`` ignores
manifest differences and still fails on a CUDA check failure).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "collections"))

from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_selection import select_gpus  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import (  # noqa: E402
    QUERY_APPS_FIELDS,
    QUERY_GPU_FIELDS,
    gather,
    host_problems,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_manifest import (  # noqa: E402
    compare,
    format_table,
)
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.runtime_probe import (  # noqa: E402
    cuda_check,
    probe_venv,
)

DEFAULT_MANIFEST = [
    {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch"},
    {"name": "triton", "version": "3.6.0", "local": "", "import": "triton"},
    {"name": "sglang-kernel", "version": "0.4.10", "local": "", "import": "sgl_kernel"},
]


def run_command(argv: list[str], environ_update: dict | None = None) -> tuple[int, str, str]:
    """``AnsibleModule.run_command``'s contract for runtime_probe, outside a module (this harness)."""
    env = dict(os.environ, **(environ_update or {}))
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    except FileNotFoundError as exc:
        raise OSError(f"{argv[0]}: not found") from exc
    return done.returncode, done.stdout, done.stderr


def run(binary: str, args: list[str], timeout_s: int = 60) -> tuple[int | None, str, str]:
    try:
        done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout_s, check=False)
    except FileNotFoundError:
        return None, "", f"{binary}: not found"
    return done.returncode, done.stdout, done.stderr


def gpu_facts(args) -> dict:
    rc_q, out_q, err_q = run(args.nvidia_smi, [f"--query-gpu={','.join(QUERY_GPU_FIELDS)}", "--format=csv,nounits"])
    if rc_q is None:
        return {"host_problems": [{"class": "nvidia_smi_missing", "message": err_q}], "gpus": []}
    rc_x, out_x, err_x = run(args.nvidia_smi, ["-q", "-x"])
    rc_a, out_a, _ = run(
        args.nvidia_smi, [f"--query-compute-apps={','.join(QUERY_APPS_FIELDS)}", "--format=csv,nounits"]
    )
    facts = gather(
        out_q,
        out_x if "<nvidia_smi_log" in out_x else None,
        out_a if rc_a == 0 else None,
        stderr_text=err_q + "\n" + err_x,
        allow_busy=args.allow_busy,
    )
    facts["host_problems"] = host_problems(
        facts, expected_count=args.expected_count or None, min_cuda_version=args.min_cuda or None
    )
    facts["commands"] = {"query_gpu": rc_q, "xml": rc_x, "compute_apps": rc_a}
    facts["selection"] = select_gpus(
        facts["gpus"], select=args.select, count=args.count, exclude=args.exclude, allow_busy=args.allow_busy
    )
    return facts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["facts", "runtime", "all"])
    parser.add_argument("--nvidia-smi", default="nvidia-smi")
    parser.add_argument("--select", nargs="*", default=[])
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--exclude", nargs="*", default=[])
    parser.add_argument("--allow-busy", action="store_true")
    parser.add_argument("--expected-count", type=int, default=0)
    parser.add_argument("--min-cuda", default="13.0")
    parser.add_argument("--python", default="/opt/torch/.venv/bin/python")
    parser.add_argument("--manifest", help="JSON file with a manifest list (default: torch/triton/sglang-kernel)")
    parser.add_argument("--cuda-version", default="13.0")
    parser.add_argument("--cuda-check", action="store_true")
    parser.add_argument("--gpu", nargs="*", default=[], help="GPU UUIDs for the CUDA check (default: every usable GPU)")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--allow-mismatch", action="store_true")
    args = parser.parse_args(argv)

    ok = True
    facts = None
    if args.mode in ("facts", "all") or (args.cuda_check and not args.gpu):
        facts = gpu_facts(args)
        if args.mode in ("facts", "all"):
            print(json.dumps(facts, indent=2))
            if facts["host_problems"] or not facts["selection"]["ok"]:
                ok = False
    if args.mode in ("runtime", "all"):
        manifest = json.loads(pathlib.Path(args.manifest).read_text()) if args.manifest else DEFAULT_MANIFEST
        probe = probe_venv(args.python, manifest, timeout_s=args.timeout, run_command=run_command)
        comparison = compare(manifest, probe, cuda_version=args.cuda_version)
        print(json.dumps({"probe": probe}, indent=2))
        print(format_table(comparison["rows"]))
        if not comparison["ok"] and not args.allow_mismatch:
            ok = False
        if args.cuda_check or args.mode == "all":
            uuids = args.gpu or [
                g["uuid"] for g in (facts or {}).get("gpus", []) if g["health"]["usable"] and g["uuid"]
            ]
            checks = cuda_check(args.python, uuids, timeout_s=args.timeout, run_command=run_command)
            print(json.dumps({"cuda_checks": checks}, indent=2))
            if not uuids or not all(c["ok"] for c in checks):
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
