#!/usr/bin/env python3
"""Build STUB wheels (test doubles) for the runtime overlay in the lab.

They carry the real distribution names, versions and Requires-Dist of the cu130 runtime manifest
(torch 2.11.0+cu130, triton 3.6.0, sglang-kernel 0.4.5, flashinfer-python 0.6.15.post1; and
sglang-kernel 0.4.10 in ``torch-2.14/``, which requires torch 2.14.1), but each holds only a tiny
module that says ``STUB = True``.
The stub torch reports ``torch.version.cuda == "13.0"``. A second sglang-kernel build in
``abi-mismatch/`` raises the ImportError a real sgl_kernel raises when built against another
torch (``...common_ops.abi3.so: undefined symbol: _ZN3c10...``).

The bytes are deterministic (stored zip, fixed timestamps, sorted entries), so the sha256
values written in inventory/group_vars/lab/runtime.yml stay valid; ``--check`` proves it.

    python tests/support/build_stub_wheels.py [--out .cache/stub-wheels] [--check VARS_FILE]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import pathlib
import re
import sys
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / ".cache" / "stub-wheels"
ABI_SYMBOL = "_ZN3c1017SymbolicShapeMeta18init_is_contiguousEv"

STUB_NOTE = '"""STUB test double built by tests/support/build_stub_wheels.py: not the real package."""\n'

# The real packages' Requires-Dist (read from their index metadata): a stub carries the same, so
# the deploy plan refuses in the lab what it refuses for the real wheels. sglang-kernel 0.4.5
# declares none (its torch pin is in its description; known_runtimes.yml records it).
TORCH_2_11_0_REQUIRES = [
    "filelock",
    "typing-extensions>=4.10.0",
    "setuptools<82",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,curand,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.0.2; platform_system == "Linux"',  # noqa: E501
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux"',
    'nvidia-cudnn-cu13==9.19.0.56; platform_system == "Linux"',
    'nvidia-cusparselt-cu13==0.8.0; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.28.9; platform_system == "Linux"',
    'nvidia-nvshmem-cu13==3.4.5; platform_system == "Linux"',
    'triton==3.6.0; platform_system == "Linux"',
    'optree>=0.13.0; extra == "optree"',
    'opt-einsum>=3.3; extra == "opt-einsum"',
    'pyyaml; extra == "pyyaml"',
]
TRITON_3_6_0_REQUIRES = ['importlib-metadata; python_version < "3.10"']
FLASHINFER_0_6_15_POST1_REQUIRES = [
    "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
    "click",
    "cuda-python>=12.0",
    "cuda-tile>=1.4.0",
    "einops",
    "nccl4py>=0.3.1",
    "ninja",
    "numpy",
    "nvidia-cudnn-frontend>=1.13.0",
    "nvidia-cutlass-dsl>=4.5.0",
    "nvidia-ml-py",
    "packaging>=24.2",
    "requests",
    "tabulate",
    "torch",
    "tqdm",
    'nvidia-cutlass-dsl>=4.5.0; extra == "cu12"',
    'nvidia-cutlass-dsl[cu13]>=4.5.0; extra == "cu13"',
]

# (distribution name, version, {path: source}, Requires-Dist lines)
STUBS = [
    (
        "torch",
        "2.11.0+cu130",
        {
            "torch/__init__.py": STUB_NOTE
            + "STUB = True\n__version__ = '2.11.0+cu130'\nfrom torch import version  # noqa: E402,F401\n",
            "torch/version.py": STUB_NOTE + "__version__ = '2.11.0+cu130'\ncuda = '13.0'\ngit_version = 'stub'\n",
        },
        TORCH_2_11_0_REQUIRES,
    ),
    (
        "triton",
        "3.6.0",
        {"triton/__init__.py": STUB_NOTE + "STUB = True\n__version__ = '3.6.0'\n"},
        TRITON_3_6_0_REQUIRES,
    ),
    (
        "sglang-kernel",
        "0.4.5",
        {"sgl_kernel/__init__.py": STUB_NOTE + "STUB = True\n__version__ = '0.4.5'\nimport torch  # noqa: E402,F401\n"},
        [],
    ),
    (
        "flashinfer-python",
        "0.6.15.post1",
        {"flashinfer/__init__.py": STUB_NOTE + "STUB = True\n__version__ = '0.6.15.post1'\n"},
        FLASHINFER_0_6_15_POST1_REQUIRES,
    ),
]

# sglang 0.5.23's kernel, built for torch 2.14.1 (its Requires-Dist), in ``torch-2.14/``: the lab's
# case of a manifest that pairs it with torch 2.11.0.
OTHER_TORCH_KERNEL = (
    "sglang-kernel",
    "0.4.10",
    {"sgl_kernel/__init__.py": STUB_NOTE + "STUB = True\n__version__ = '0.4.10'\nimport torch  # noqa: E402,F401\n"},
    ["torch==2.14.1"],
)

ABI_MISMATCH = (
    "sglang-kernel",
    "0.4.5",
    {
        "sgl_kernel/__init__.py": STUB_NOTE
        + "STUB = True\n"
        + "raise ImportError(\n"
        + "    '/opt/sglang/venv/lib/python3/site-packages/sgl_kernel/sm100/common_ops.abi3.so: '\n"
        + f"    'undefined symbol: {ABI_SYMBOL}'\n"
        + ")\n"
    },
    [],
)

_DATE = (1980, 1, 1, 0, 0, 0)


def _dist(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name)


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheel(name: str, version: str, files: dict, out_dir: pathlib.Path, requires=()) -> pathlib.Path:
    """Write one deterministic py3-none-any wheel; return its path."""
    dist = _dist(name)
    info = f"{dist}-{version}.dist-info"
    entries = dict(files)
    entries[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {name}\n"
        f"Version: {version}\n"
        "Summary: STUB test double for specdec.sglang lab tests (not the real package)\n"
        + "".join(f"Requires-Dist: {line}\n" for line in requires)
    )
    entries[f"{info}/WHEEL"] = (
        "Wheel-Version: 1.0\nGenerator: specdec-build-stub-wheels\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record_lines = [
        f"{path},{_record_hash(text.encode())},{len(text.encode())}" for path, text in sorted(entries.items())
    ]
    record_lines.append(f"{info}/RECORD,,")
    entries[f"{info}/RECORD"] = "\n".join(record_lines) + "\n"
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
        for path in sorted(entries, key=lambda p: (p.endswith("/RECORD"), p)):
            zinfo = zipfile.ZipInfo(path, date_time=_DATE)
            zinfo.external_attr = 0o644 << 16
            zinfo.create_system = 3
            archive.writestr(zinfo, entries[path].encode())
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{dist}-{version}-py3-none-any.whl"
    data = buffer.getvalue()
    if not target.is_file() or target.read_bytes() != data:
        target.write_bytes(data)
    return target


def build_all(out_dir: pathlib.Path = DEFAULT_OUT) -> dict:
    """Build every stub; return {relative path: sha256}."""
    sums = {}
    for name, version, files, requires in STUBS:
        path = build_wheel(name, version, files, out_dir, requires)
        sums[path.relative_to(out_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    for (name, version, files, requires), sub in ((ABI_MISMATCH, "abi-mismatch"), (OTHER_TORCH_KERNEL, "torch-2.14")):
        path = build_wheel(name, version, files, out_dir / sub, requires)
        sums[path.relative_to(out_dir).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    (out_dir / "SHA256SUMS").write_text("".join(f"{sha}  {rel}\n" for rel, sha in sorted(sums.items())))
    return sums


def check_vars(sums: dict, vars_file: pathlib.Path) -> list[str]:
    """Every stub wheel the vars file names must carry this build's sha256 there."""
    text = vars_file.read_text()
    problems = []
    for rel, sha in sums.items():
        if rel.startswith(("abi-mismatch/", "torch-2.14/")) or f"/{rel}" not in text:
            continue
        if sha not in text:
            problems.append(f"{rel}: sha256 {sha} not found in {vars_file}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    parser.add_argument("--check", type=pathlib.Path, help="vars file that must carry these sha256 values")
    args = parser.parse_args(argv)
    sums = build_all(args.out)
    for rel, sha in sorted(sums.items()):
        print(f"{sha}  {args.out / rel}")
    if args.check:
        problems = check_vars(sums, args.check)
        for problem in problems:
            print(problem, file=sys.stderr)
        return 1 if problems else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
