#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Cut, from real shared objects, exactly the bytes the fatbin reader reads, for tests that CI can run.

    python tests/unit/plugins/module_utils/_gpu/fatbin_reads/cut.py WHEEL [--check]

WHEEL: sglang-kernel 0.4.5's manylinux wheel (scripts/gpu-bundle puts it under
.device/gpu-bundle/download/; ``pip download --no-deps sglang-kernel==0.4.5`` fetches the same file).
For each library of LIBRARIES the reader (plugins/module_utils/_gpu/cuda_fatbin.py) runs over the real file
through a stream that records every read; what is written, ``<library>.reads.json.gz``, holds those
reads (offset and bytes, adjacent ones merged), the file's size and sha256, the wheel's name and
sha256, and the reader's answer. test_cuda_fatbin.py replays the reads and fails on any read outside
them, so a reader that starts reading other bytes needs a new cut (this script), not a new answer.
Nothing else of the ~1.2 GB is kept: ELF header, section table, section names, and the 16-byte
container and 48-byte entry headers of ``.nv_fatbin``. ``--check`` cuts again and fails when the
committed files differ.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import importlib.util
import json
import pathlib
import sys
import tempfile
import zipfile

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[5]
# The reader itself, by path: the same file whatever collection path is installed (stdlib only).
_spec = importlib.util.spec_from_file_location("cuda_fatbin", REPO / "plugins/module_utils/_gpu/cuda_fatbin.py")
cuda_fatbin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cuda_fatbin)

LIBRARIES = (
    "sgl_kernel/sm100/common_ops.abi3.so",
    "sgl_kernel/sm90/common_ops.abi3.so",
    "sgl_kernel/flash_ops.abi3.so",
)


class Recording:
    """A binary stream over a file that remembers what was read where."""

    def __init__(self, stream):
        self.stream, self.reads = stream, []

    def seek(self, offset, whence=0):
        return self.stream.seek(offset, whence)

    def tell(self):
        return self.stream.tell()

    def read(self, size=-1):
        offset = self.stream.tell()
        data = self.stream.read(size)
        self.reads.append((offset, data))
        return data


def merged(reads):
    """Sorted, overlapping or adjacent reads joined: ``[(offset, bytes)]``."""
    out: list = []
    for offset, data in sorted(reads):
        if out and offset <= out[-1][0] + len(out[-1][1]):
            start, held = out[-1]
            end = max(start + len(held), offset + len(data))
            joined = bytearray(end - start)
            joined[: len(held)] = held
            joined[offset - start : offset - start + len(data)] = data
            out[-1] = (start, bytes(joined))
        else:
            out.append((offset, data))
    return out


def sha256(path: pathlib.Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while block := stream.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def cut(path: pathlib.Path, wheel: pathlib.Path, wheel_sha: str, member: str) -> tuple[dict, bytes]:
    with path.open("rb") as stream:
        recording = Recording(stream)
        answer = cuda_fatbin.read_shared_object(recording)
    record = {
        "wheel": wheel.name,
        "wheel_sha256": wheel_sha,
        "member": member,
        "file_size": path.stat().st_size,
        "file_sha256": sha256(path),
        "answer": answer,
        "reads": [[offset, base64.b64encode(data).decode()] for offset, data in merged(recording.reads)],
    }
    text = json.dumps(record, indent=0, sort_keys=True).encode()
    return answer, gzip.compress(text, mtime=0)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("wheel", type=pathlib.Path)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    wheel_sha = sha256(args.wheel)
    differ = []
    with tempfile.TemporaryDirectory() as scratch, zipfile.ZipFile(args.wheel) as wheel:
        for member in LIBRARIES:
            path = pathlib.Path(wheel.extract(member, scratch))
            answer, blob = cut(path, args.wheel, wheel_sha, member)
            path.unlink()
            target = HERE / (member.replace("/", "-") + ".reads.json.gz")
            if args.check:
                if not target.is_file() or target.read_bytes() != blob:
                    differ.append(target.name)
            else:
                target.write_bytes(blob)
            print(f"{member}: {json.dumps(answer)}; the reads: {len(blob)} bytes -> {target.name}")
    if differ:
        print(f"differ from a new cut: {', '.join(differ)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
