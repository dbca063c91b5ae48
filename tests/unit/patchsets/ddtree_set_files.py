"""The Python files the DDTree patch sets overlay into sglang, loaded as modules on a CPU: the tests run the very
bytes a host gets, each set's own copy (the sets ship the same tree builder; a test says so)."""

import importlib.util
import itertools
import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parents[3]
SPECULATIVE = "files/sglang/srt/speculative"
SETS = tuple(sorted(p.parent.name for p in (REPO / "patchsets").glob("ddtree-0.5.*/patchset.yml")))
_COUNTER = itertools.count()


def set_file_path(set_name, filename):
    """patchsets/<set_name>/files/sglang/srt/speculative/<filename>."""
    return REPO / "patchsets" / set_name / SPECULATIVE / filename


def load(path):
    """A fresh module from the file at ``path`` (each call its own, so one test file's changes stay its own)."""
    name = "specdec_under_test_%d_%s" % (next(_COUNTER), pathlib.Path(path).stem)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def set_module(set_name, filename):
    """A set's overlay file, loaded (``set_module("ddtree-0.5.17", "ddtree_utils.py")``)."""
    return load(set_file_path(set_name, filename))
