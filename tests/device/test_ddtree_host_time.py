# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host-time probe (ddtree_host_time.py) on a CPU: stand-in sglang modules, a hand-driven clock."""

import configparser
import importlib.metadata
import os
import pathlib
import sys
import types

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import ddtree_host_time as dht


class Mode:
    def __init__(self, extend=False, idle=False):
        self.extend, self.idle = extend, idle

    def is_extend(self):
        return self.extend

    def is_idle(self):
        return self.idle


class Batch:
    def __init__(self, **mode):
        self.forward_mode = Mode(**mode)


@pytest.fixture
def fake_sglang(monkeypatch):
    """A worker module whose step calls a ddtree module's parts, each advancing a fake clock by a known amount."""
    clock = {"now": 0.0}

    def spend(ms):
        clock["now"] += ms / 1000.0

    ddtree = types.ModuleType("fake_ddtree_worker")

    def draft_topk():
        spend(0.2)

    def ddtree_verify_step():
        spend(0.1)
        ddtree.draft_topk()  # through the module, as the set's step calls its helpers

    ddtree.draft_topk, ddtree.ddtree_verify_step = draft_topk, ddtree_verify_step
    worker = types.ModuleType("fake_dflash_worker_v2")

    class DFlashWorkerV2:
        def forward_batch_generation(self, batch):
            spend(1.0)
            ddtree.ddtree_verify_step()
            return "result"

    worker.DFlashWorkerV2 = DFlashWorkerV2
    monkeypatch.setitem(sys.modules, "fake_ddtree_worker", ddtree)
    monkeypatch.setitem(sys.modules, "fake_dflash_worker_v2", worker)
    parts = (
        ("after_draft", "fake_ddtree_worker", "ddtree_verify_step"),
        ("topk", "fake_ddtree_worker", "draft_topk"),
        ("absent", "fake_ddtree_worker", "no_such_part"),
        ("absent_module", "no_such_sglang_module", "f"),
    )
    return worker, ddtree, parts, (lambda: clock["now"])


def test_decode_steps_and_their_parts_are_timed_and_prefills_are_not(fake_sglang, tmp_path, monkeypatch):
    worker, ddtree, parts, clock = fake_sglang
    monkeypatch.setattr(dht, "WRITE_EVERY", 2)
    probe = dht.Probe(str(tmp_path / "t.json"), clock=clock)
    wrapped = dht.install(probe, step=("fake_dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation"), parts=parts)
    assert wrapped == ["step", "after_draft", "topk"]  # what the release lacks is skipped
    w = worker.DFlashWorkerV2()
    assert w.forward_batch_generation(Batch(extend=True)) == "result"  # a prefill: not counted
    ddtree.draft_topk()  # outside a step: not counted
    for _ in range(3):
        w.forward_batch_generation(Batch())
    w.forward_batch_generation(Batch(idle=True))
    assert probe.stats["decode_steps"] == 3 and probe.stats["step_ms"] == pytest.approx(3 * 1.3)
    summary = dht.summarize(probe.stats)
    assert summary["step_ms"] == pytest.approx(1.3)
    assert summary["parts"]["after_draft"] == {"ms_per_step": pytest.approx(0.3), "calls_per_step": 1.0}
    assert summary["parts"]["topk"]["ms_per_step"] == pytest.approx(0.2)
    # Written every WRITE_EVERY decode steps: after the second, not yet the third.
    assert dht.read(str(tmp_path / "t.json"))["decode_steps"] == 2


def test_a_second_install_does_not_time_twice_and_another_plugins_wrapper_is_timed(fake_sglang, tmp_path):
    worker, ddtree, parts, clock = fake_sglang
    step = ("fake_dflash_worker_v2", "DFlashWorkerV2.forward_batch_generation")

    def counted(*a, **k):  # e.g. the accept-stats counter's wrapper
        return None

    counted.__wrapped__ = ddtree.draft_topk
    ddtree.draft_topk = counted
    probe = dht.Probe(str(tmp_path / "t.json"), clock=clock)
    assert dht.install(probe, step=step, parts=parts) == ["step", "after_draft", "topk"]
    assert dht.install(probe, step=step, parts=parts) == []
    worker.DFlashWorkerV2().forward_batch_generation(Batch())
    assert probe.stats["decode_steps"] == 1 and probe.stats["parts"]["after_draft"]["calls"] == 1


def test_summarize_says_nothing_without_steps():
    assert dht.summarize(dht.empty()) == {"decode_steps": 0}
    assert dht.read("/nonexistent/host-time.json") == dht.empty()


def test_the_plugin_is_inert_without_its_variable(monkeypatch):
    monkeypatch.delenv(dht.ENV, raising=False)
    monkeypatch.setattr(dht, "install", lambda *a, **k: pytest.fail("installed without SPECDEC_HOST_TIME"))
    dht.sglang_plugin()


def test_a_timed_server_gets_the_plugin_first_on_its_path_and_sglang_finds_the_entry_point():
    env = dht.server_env({"PYTHONPATH": "/site", "X": "1"}, "/out/h.json")
    assert env["PYTHONPATH"].split(os.pathsep) == [dht.PLUGIN_DIR, dht.HERE, "/site"]
    assert env[dht.ENV] == "/out/h.json" and env["X"] == "1"
    info = pathlib.Path(dht.PLUGIN_DIR) / "specdec_device_plugin-0.dist-info"
    entry_points = configparser.ConfigParser()
    entry_points.read(info / "entry_points.txt")
    assert entry_points["sglang.srt.plugins"]["ddtree_host_time"] == "ddtree_host_time:sglang_plugin"
    found = importlib.metadata.distributions(path=[dht.PLUGIN_DIR])
    groups = {ep.name: ep.value for d in found for ep in d.entry_points if ep.group == "sglang.srt.plugins"}
    assert groups["ddtree_host_time"] == "ddtree_host_time:sglang_plugin"
