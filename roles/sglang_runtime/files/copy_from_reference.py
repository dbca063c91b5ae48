# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Copy distributions from a known-good reference venv into this venv, with their dist-info.

Run with the TARGET venv's Python (ansible.builtin.script, executable=<venv>/bin/python).
For every --dist NAME: the files listed in the reference dist-info RECORD (inside
site-packages) are copied; a distribution of the same name already in the target (e.g. a
+cu128 torch pulled in by sglang) is removed first, file by file from its own RECORD.
This is the field fix (ct129's torch/triton/sgl_kernel copied to ct200) done reproducibly.
Prints one JSON line: {"copied": {name: {"version", "files"}}, "removed": {...}}.
"""

import argparse
import glob
import json
import os
import re
import shutil
import sys
import sysconfig


def normalize(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def find_dist_info(site, name):
    for path in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
        metadata = os.path.join(path, "METADATA")
        if not os.path.isfile(metadata):
            continue
        dist_name = version = None
        with open(metadata, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.startswith("Name:"):
                    dist_name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                if not line.strip() or (dist_name and version):
                    break
        if dist_name and normalize(dist_name) == normalize(name):
            return path, version
    return None, None


def record_files(site, dist_info):
    files = []
    with open(os.path.join(dist_info, "RECORD"), encoding="utf-8") as handle:
        for line in handle:
            rel = line.rsplit(",", 2)[0].strip()
            if not rel:
                continue
            full = os.path.normpath(os.path.join(site, rel))
            if full.startswith(os.path.normpath(site) + os.sep):
                files.append(os.path.relpath(full, site))
    return files


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reference", required=True)
    parser.add_argument("--dist", action="append", default=[])
    args = parser.parse_args()
    target_site = sysconfig.get_paths()["purelib"]
    pyver = "python%d.%d" % sys.version_info[:2]
    ref_site = os.path.join(args.reference, "lib", pyver, "site-packages")
    if not os.path.isdir(ref_site):
        found = glob.glob(os.path.join(args.reference, "lib", "python*", "site-packages"))
        sys.exit(
            "reference venv %s has no %s site-packages (found: %s): its Python must match the release's"
            % (args.reference, pyver, ", ".join(found) or "none")
        )
    report = {"copied": {}, "removed": {}}
    for name in args.dist:
        ref_info, version = find_dist_info(ref_site, name)
        if ref_info is None:
            sys.exit("distribution %s not found in %s" % (name, ref_site))
        old_info, old_version = find_dist_info(target_site, name)
        if old_info is not None:
            for rel in record_files(target_site, old_info):
                path = os.path.join(target_site, rel)
                if os.path.isfile(path) or os.path.islink(path):
                    os.remove(path)
            shutil.rmtree(old_info, ignore_errors=True)
            report["removed"][name] = old_version
        files = record_files(ref_site, ref_info)
        for rel in files:
            src = os.path.join(ref_site, rel)
            if not os.path.exists(src):
                continue
            dest = os.path.join(target_site, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            shutil.copy2(src, dest)
        report["copied"][name] = {"version": version, "files": len(files)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
