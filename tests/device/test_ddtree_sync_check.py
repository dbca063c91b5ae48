# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sync-check probe (ddtree_sync_check.py) on a CPU: stand-in sglang modules and a stand-in for torch's sync
debug mode that warns, as torch does, only while the mode is "warn"."""

import configparser
import importlib.metadata
import os
import pathlib
import sys
import types
import warnings

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ddtree_sync_check as dsc


class Mode:
    def __init__(self, extend=False):
        self.extend = extend

    def is_extend(self):
        return self.extend

    def is_idle(self):
        return False


class Batch:
    def __init__(self, extend=False):
        self.forward_mode = Mode(extend)


@pytest.fixture
def fake_sglang(monkeypatch):
    """A worker module whose step syncs once itself and calls DDTREE's part (imported by name) that syncs twice."""
    mode = {"now": "default", "set": []}

    def set_mode(value):
        mode["now"] = value
        mode["set"].append(value)

    def sync():  # what torch does on .item() under set_sync_debug_mode
        if mode["now"] == "warn":
            warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=2)  # the caller, as torch

    ddtree = types.ModuleType("fake_ddtree_worker")

    def ddtree_verify_step(fail=False):
        sync()
        sync()
        if fail:
            raise RuntimeError("verify failed")

    ddtree.ddtree_verify_step = ddtree_verify_step
    worker = types.ModuleType("fake_dflash_worker_v2")
    worker.ddtree_verify_step = ddtree_verify_step  # "from ... import ddtree_verify_step"

    class DFlashWorkerV2:
        def forward_batch_generation(self, batch, ddtree_part=True, fail=False):
            sync()
            if ddtree_part:
                worker.ddtree_verify_step(fail=fail)
            return "result"

    worker.DFlashWorkerV2 = DFlashWorkerV2
    monkeypatch.setitem(sys.modules, "fake_ddtree_worker", ddtree)
    monkeypatch.setitem(sys.modules, "fake_dflash_worker_v2", worker)
    step = ("fake_dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation")
    part = ("fake_dflash_worker_v2", "ddtree_verify_step")
    return worker, (lambda: mode["now"], set_mode), mode, step, part


def test_every_sync_of_a_decode_step_is_counted_by_location_and_ddtree_part(fake_sglang, tmp_path, monkeypatch):
    worker, get_set, mode, step, part = fake_sglang
    monkeypatch.setattr(dsc, "WRITE_EVERY", 2)
    probe = dsc.Probe(str(tmp_path / "s.json"), mode=get_set)
    assert dsc.install(probe, step=step, part=part) == ["step", "ddtree_part"]
    w = worker.DFlashWorkerV2()
    assert w.forward_batch_generation(Batch(extend=True)) == "result"  # a prefill: not checked
    assert mode["set"] == [] and probe.stats["decode_steps"] == 0
    w.forward_batch_generation(Batch())
    w.forward_batch_generation(Batch(), ddtree_part=False)  # a DFLASH step: one sync, none of DDTREE's
    assert mode["now"] == "default" and mode["set"] == ["warn", "default", "warn", "default"]
    summary = dsc.summarize(probe.stats)
    assert summary["decode_steps"] == 2 and summary["steps_with_sync"] == 2 and summary["steps_with_ddtree_sync"] == 1
    by_place = {entry["location"]: entry for entry in summary["locations"]}
    assert len(by_place) == 3  # the step's own sync and the part's two lines
    part_entries = [e for e in by_place.values() if e["in_ddtree_part"]]
    assert sorted(e["syncs"] for e in part_entries) == [1, 1] and all(e["first_step"] == 1 for e in part_entries)
    (outside,) = [e for e in by_place.values() if not e["in_ddtree_part"]]
    assert outside["syncs"] == 2 and outside["location"].startswith("test_ddtree_sync_check.py:")
    assert dsc.read(str(tmp_path / "s.json"))["decode_steps"] == 2  # written every WRITE_EVERY steps


def test_a_failing_step_restores_the_mode_and_is_counted(fake_sglang, tmp_path):
    worker, get_set, mode, step, part = fake_sglang
    probe = dsc.Probe(str(tmp_path / "s.json"), mode=get_set)
    dsc.install(probe, step=step, part=part)
    with pytest.raises(RuntimeError, match="verify failed"):
        worker.DFlashWorkerV2().forward_batch_generation(Batch(), fail=True)
    assert mode["now"] == "default" and not probe.in_step and not probe.in_part
    assert probe.stats["steps_with_ddtree_sync"] == 1


def test_a_step_without_syncs_counts_clean_and_other_warnings_still_show(tmp_path, monkeypatch):
    probe = dsc.Probe(str(tmp_path / "s.json"), mode=(lambda: "default", lambda value: None))

    def step(worker, batch):
        warnings.warn("something else", UserWarning, stacklevel=1)  # not a sync: shown as it would be without the probe
        return "result"

    shown = []
    monkeypatch.setattr(warnings, "showwarning", lambda message, *a, **k: shown.append(str(message)))
    assert probe.step(step)(None, Batch()) == "result"
    assert probe.stats["decode_steps"] == 1 and probe.stats["steps_with_sync"] == 0
    assert shown == ["something else"]


def test_a_second_install_wraps_nothing_and_the_plugin_is_inert_unset(fake_sglang, tmp_path, monkeypatch):
    _worker, get_set, _mode, step, part = fake_sglang
    probe = dsc.Probe(str(tmp_path / "s.json"), mode=get_set)
    assert dsc.install(probe, step=step, part=part) == ["step", "ddtree_part"]
    assert dsc.install(probe, step=step, part=part) == []
    assert dsc.install(probe, step=("no_such_module", "f"), part=("fake_dflash_worker_v2", "nothing")) == []
    monkeypatch.delenv(dsc.ENV, raising=False)
    monkeypatch.setattr(dsc, "install", lambda *a, **k: pytest.fail("installed without SPECDEC_SYNC_CHECK"))
    dsc.sglang_plugin()


def test_summarize_orders_locations_by_count_and_says_nothing_without_steps():
    stats = dsc.empty()
    dsc.tally(stats, [("a.py:1", False)])
    dsc.tally(stats, [("b.py:2", True), ("b.py:2", True), ("a.py:1", False)])
    dsc.tally(stats, [])
    summary = dsc.summarize(stats)
    assert (summary["decode_steps"], summary["steps_with_sync"], summary["steps_with_ddtree_sync"]) == (3, 2, 1)
    assert [(e["location"], e["syncs"], e["in_ddtree_part"], e["first_step"]) for e in summary["locations"]] == [
        ("a.py:1", 2, 0, 1),
        ("b.py:2", 2, 2, 2),
    ]
    assert dsc.summarize(dsc.empty())["locations"] == [] and dsc.read("/nonexistent.json") == dsc.empty()


def test_a_checked_server_gets_the_plugin_first_on_its_path_and_sglang_finds_the_entry_point():
    env = dsc.server_env({"PYTHONPATH": "/site", "X": "1"}, "/out/s.json")
    here = os.path.dirname(os.path.abspath(dsc.__file__))
    plugin_dir = os.path.join(here, "sglang_plugin")
    assert env["PYTHONPATH"].split(os.pathsep) == [plugin_dir, here, "/site"]
    assert env[dsc.ENV] == "/out/s.json" and env["X"] == "1"
    entry_points = configparser.ConfigParser()
    entry_points.read(pathlib.Path(plugin_dir) / "specdec_device_plugin-0.dist-info" / "entry_points.txt")
    assert entry_points["sglang.srt.plugins"]["ddtree_sync_check"] == "ddtree_sync_check:sglang_plugin"
    found = importlib.metadata.distributions(path=[plugin_dir])
    groups = {ep.name: ep.value for d in found for ep in d.entry_points if ep.group == "sglang.srt.plugins"}
    assert groups["ddtree_sync_check"] == "ddtree_sync_check:sglang_plugin"
