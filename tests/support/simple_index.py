#!/usr/bin/env python3
"""Write a PEP 503 simple index (with PEP 658 metadata) over a set of wheels: the lab's package index.

    python tests/support/simple_index.py --out DIR WHEEL [WHEEL ...]

DIR gets ``simple/index.html`` (the projects), ``simple/<project>/index.html`` (one link per file,
``#sha256=<hex>`` and ``data-dist-info-metadata``/``data-core-metadata`` attributes), the wheels under
``files/`` and each wheel's METADATA next to it as ``<wheel>.metadata``. Serve DIR with any static
HTTP server (``python3 -m http.server --directory DIR``); the index URL is ``http://HOST:PORT/simple``.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import pathlib
import re
import shutil
import sys
import zipfile


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata(wheel: pathlib.Path) -> bytes:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        return archive.read(name)


def build(out: pathlib.Path, wheels) -> dict:
    """Write the index; return {project: [(file name, sha256)]}."""
    files = out / "files"
    files.mkdir(parents=True, exist_ok=True)
    projects: dict[str, list] = {}
    for wheel in map(pathlib.Path, wheels):
        target = files / wheel.name
        shutil.copyfile(wheel, target)
        metadata = _metadata(wheel)
        (files / (wheel.name + ".metadata")).write_bytes(metadata)
        digest = hashlib.sha256(target.read_bytes()).hexdigest()
        meta_digest = hashlib.sha256(metadata).hexdigest()
        projects.setdefault(normalize(wheel.name.split("-", 1)[0]), []).append((wheel.name, digest, meta_digest))
    simple = out / "simple"
    simple.mkdir(exist_ok=True)
    links = "".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(projects))
    (simple / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{links}</body></html>\n")
    for project, entries in projects.items():
        (simple / project).mkdir(exist_ok=True)
        rows = "".join(
            f'<a href="../../files/{html.escape(name)}#sha256={digest}" data-dist-info-metadata="sha256={meta}"'
            f' data-core-metadata="sha256={meta}">{html.escape(name)}</a>\n'
            for name, digest, meta in sorted(entries)
        )
        (simple / project / "index.html").write_text(f"<!DOCTYPE html>\n<html><body>\n{rows}</body></html>\n")
    return {p: [(n, d) for n, d, _m in e] for p, e in projects.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("wheels", nargs="+")
    args = parser.parse_args(argv)
    for project, entries in sorted(build(args.out, args.wheels).items()):
        for name, digest in entries:
            print(f"{digest}  {project}/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
