"""The worker simulation's negative controls reach the code each patch set runs (tests/device/ddtree_worker_sim.py).

``--chain-commit`` must make the simulation fail: it replaces what decides the node a hybrid commit takes its
recurrent state from. On 2026-12-05 it replaced only ``ddtree_utils.commit_nodes``, which the 0.5.17 worker no
longer called (its commit is ``commit_tensors``, on the device), and the control passed on the GPU
(tests/device/records/2026-12-05-h100-ddtree-replay-triton). Here, without torch: every set's verify step calls
something the control replaces, and the replacement changes what that call returns.
"""

import ast
import pathlib
from types import SimpleNamespace

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER = "files/sglang/srt/speculative/ddtree_worker.py"
SETS = sorted(p for p in (REPO / "patchsets").glob("ddtree-*") if (p / WORKER).is_file())
REPLACED = {"ddtree_utils.commit_nodes", "commit_tensors"}


def _function(tree, name):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def _called_names(node):
    names = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        if isinstance(func, ast.Name):
            names.add(func.id)
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            names.add("%s.%s" % (func.value.id, func.attr))
    return names


def _mistake():
    """chain_commit_mistake, from the simulation's source alone (its module imports torch)."""
    source = (HERE / "ddtree_worker_sim.py").read_text()
    node = _function(ast.parse(source), "chain_commit_mistake")
    namespace = {}
    exec(compile(ast.Module(body=[node], type_ignores=[]), "ddtree_worker_sim.py", "exec"), namespace)
    return namespace["chain_commit_mistake"]


class _Tensor(list):
    """The few tensor methods the replacement uses, on a list."""

    dtype = "int64"
    shape = None

    def to(self, _dtype):
        return self

    def reshape(self, _shape):
        return self


def test_both_sets_are_checked():
    assert {s.name for s in SETS} >= {"ddtree-0.5.17", "ddtree-0.5.23"}


@pytest.mark.parametrize("set_dir", SETS, ids=[s.name for s in SETS])
def test_the_worker_decides_its_commit_through_what_chain_commit_replaces(set_dir):
    worker = ast.parse((set_dir / WORKER).read_text())
    callers = {
        n.name
        for n in ast.walk(worker)
        if isinstance(n, ast.FunctionDef) and n.name != "commit_tensors" and _called_names(n) & REPLACED
    }
    assert callers, "%s: no function of the worker calls %s" % (set_dir.name, sorted(REPLACED))


def test_chain_commit_replaces_both_places_and_changes_the_nodes():
    mistake = _mistake()
    accept_drafts = _Tensor([2, 0, 3])
    real_nodes = _Tensor([5, 9, 14])
    du = SimpleNamespace(commit_nodes=lambda *a: "the real one")
    dw = SimpleNamespace(commit_tensors=lambda index, drafts, *a, **k: {"nodes": real_nodes, "bonus": 1})
    mistake(du, dw)
    assert du.commit_nodes([[0, 3, 7]], [2], 8) == [2]
    out = dw.commit_tensors(None, accept_drafts, None, None, None, 8)
    assert list(out["nodes"]) == [2, 0, 3] != list(real_nodes) and out["bonus"] == 1
    # a worker without commit_tensors (0.5.23) keeps only the host-side replacement
    bare = SimpleNamespace()
    mistake(SimpleNamespace(), bare)
    assert not hasattr(bare, "commit_tensors")


def _names(node):
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def test_the_graphed_commit_goes_through_what_chain_commit_replaces():
    """Level 2 of SGLANG_DDTREE_STEP_GRAPH (0.5.17's default since 2026-12-06) replays the commit from a CUDA graph:
    had it called Triton's commit by its own name, --chain-commit would no longer reach a default step and the
    control would pass on the GPU, as it did on 2026-12-05."""
    runs = {}
    for set_dir in SETS:
        worker = ast.parse((set_dir / WORKER).read_text())
        for graph in (n for n in ast.walk(worker) if isinstance(n, ast.ClassDef) and n.name == "_CommitGraph"):
            runs[set_dir.name] = next(n for n in graph.body if isinstance(n, ast.FunctionDef) and n.name == "_run")
    assert "ddtree-0.5.17" in runs, sorted(runs)
    for name, run in runs.items():
        assert "commit_tensors" in _names(run), (
            "%s: _CommitGraph._run commits through what --chain-commit leaves" % name
        )
