"""GPU choice: explicit ids or N healthy idle GPUs, refused with reasons, passed on as UUIDs."""

import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.gpu_selection import id_kind, select_gpus, tp_divides
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.nvidia_smi import gather

REPO = pathlib.Path(__file__).resolve().parents[5]
CONSTRUCTED = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi"
REAL = REPO / "tests" / "unit" / "fixtures" / "nvidia-smi" / "real-h200"


def facts(name: str, **kwargs) -> list:
    d = CONSTRUCTED / name if name != "real-h200" else REAL
    if not d.is_dir():
        pytest.fail(f"fixture directory missing: {d}")
    read = lambda f: (d / f).read_text() if (d / f).is_file() else None  # noqa: E731
    return gather(read("query.csv"), read("nvidia-smi-q.xml"), read("compute_apps.csv"), **kwargs)["gpus"]


def test_real_h200_auto_selects_its_one_gpu_by_uuid():
    result = select_gpus(facts("real-h200"), count=1)
    assert result["ok"] is True
    assert result["uuids"] == ["GPU-5a6eafee-1932-5f13-42d0-82f42c64e659"]
    assert result["mode"] == "auto"


def test_ct200_explicit_gpu1_next_to_a_training_job_is_chosen():
    result = select_gpus(facts("constructed-busy-8gpu"), select=["1"])
    assert result["ok"] is True
    assert result["indices"] == [1]
    assert result["uuids"] == ["GPU-c7200000-0001-5f13-42d0-82f42c64e601"]


def test_explicit_busy_gpu_is_refused_with_the_training_process():
    result = select_gpus(facts("constructed-busy-8gpu"), select=["0"])
    assert result["ok"] is False
    assert result["uuids"] == []
    assert "GPU 0" in result["errors"][0]
    assert "pid 41000 /usr/bin/python3" in result["errors"][0]


def test_explicit_busy_gpu_is_accepted_when_busy_is_allowed():
    result = select_gpus(facts("constructed-busy-8gpu", allow_busy=True), select=["0"], allow_busy=True)
    assert result["ok"] is True


def test_auto_selection_skips_busy_gpus_and_takes_lowest_idle_indices():
    result = select_gpus(facts("constructed-busy-8gpu"), count=2)
    assert result["indices"] == [1, 4]
    assert {r["index"] for r in result["refused"]} == {0, 2, 3, 5}


def test_auto_selection_never_picks_an_excluded_gpu():
    result = select_gpus(facts("constructed-busy-8gpu"), count=2, exclude=["1"])
    assert result["indices"] == [4, 6]
    assert result["excluded"] == [1]


def test_auto_selection_short_of_usable_gpus_lists_every_refusal():
    result = select_gpus(facts("constructed-busy-8gpu"), count=5)
    assert result["ok"] is False
    message = result["errors"][0]
    assert "5 usable GPUs needed, 4 found" in message
    assert "GPU 0: busy" in message


def test_lost_gpu_is_refused_when_named_explicitly():
    result = select_gpus(facts("constructed-device-handle-unknown-error"), select=["1"])
    assert result["ok"] is False
    assert "lost" in result["errors"][0]
    assert "Unknown Error" in result["errors"][0]


def test_ct129_excluding_dead_gpu1_auto_tp2_gets_gpus_0_and_2():
    result = select_gpus(facts("constructed-device-handle-unknown-error"), count=2, exclude=["1"])
    assert result["ok"] is True
    assert result["indices"] == [0, 2]


def test_unknown_gpu_index_is_refused_listing_known_gpus():
    result = select_gpus(facts("constructed-ecc-errors"), select=["9"])
    assert result["ok"] is False
    assert "GPU '9' not found" in result["errors"][0]
    assert "0=GPU-ecce0000" in result["errors"][0]


def test_unknown_uuid_and_malformed_id_are_refused():
    gpus = facts("constructed-ecc-errors")
    assert "not found" in select_gpus(gpus, select=["GPU-00000000-dead"])["errors"][0]
    assert "is not a GPU index" in select_gpus(gpus, select=["gpu7"])["errors"][0]


def test_gpu_with_ecc_errors_is_refused_by_uuid_too():
    result = select_gpus(facts("constructed-ecc-errors"), select=["GPU-ecce0000-0001-5f13-42d0-82f42c64e601"])
    assert result["ok"] is False
    assert "ecc_uncorrected" in result["errors"][0]


def test_pci_bus_id_selects_the_same_gpu_as_its_index():
    gpus = facts("constructed-busy-8gpu")
    assert select_gpus(gpus, select=["0000:9A:00.0"])["indices"] == [4]


def test_duplicate_and_selected_but_excluded_ids_are_errors():
    gpus = facts("constructed-busy-8gpu")
    assert "twice" in select_gpus(gpus, select=["1", "1"])["errors"][0]
    assert "also excluded" in select_gpus(gpus, select=["1"], exclude=["1"])["errors"][0]


def test_explicit_count_must_match_the_list_when_both_are_given():
    result = select_gpus(facts("constructed-busy-8gpu"), select=["1"], count=2)
    assert result["ok"] is False
    assert "1 GPUs listed but 2 requested" in result["errors"][0]


@pytest.mark.parametrize(
    ("ident", "kind"),
    [("3", "index"), ("GPU-5a6eafee-1932", "uuid"), ("MIG-abc-1", "uuid"), ("0000:41:00.0", "pci_bus_id"), ("x", None)],
)
def test_id_kind(ident, kind):
    assert id_kind(ident) == kind


@pytest.mark.parametrize(
    ("tp", "count", "ok"), [(1, 1, True), (2, 8, True), (3, 8, False), (4, 2, False), (0, 2, False)]
)
def test_tp_size_must_divide_the_gpu_count(tp, count, ok):
    assert tp_divides(tp, count) is ok
