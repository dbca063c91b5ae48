"""The preflight disk check's verdict: the shown numbers justify it (issue 35, item 7)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specdec.sglang.plugins.filter.disk_free_verdict import FilterModule
from ansible_collections.specdec.sglang.plugins.module_utils._host.disk_space import disk_free_verdict

GIB = 1024 * 1024  # KiB


def test_095_gib_free_against_1_needed_fails_and_is_not_shown_as_1_0():
    verdict = disk_free_verdict("/opt/sglang", str(int(0.95 * GIB)), 1)
    assert verdict["ok"] is False
    assert verdict["msg"] == (
        "/opt/sglang has 996147 KiB (0.94 GiB) free, sglang_preflight_min_free_disk_gb=1 needs 1048576 KiB: "
        "52429 KiB short; free space or lower the value"
    )


def test_one_kib_short_is_shown_below_what_is_needed():
    verdict = disk_free_verdict("/opt/sglang", GIB - 1, 1)
    assert verdict["ok"] is False
    assert "(0.99 GiB) free" in verdict["msg"] and "1 KiB short" in verdict["msg"]


@pytest.mark.parametrize(
    ("free", "needed", "ok"), [(GIB, 1, True), (40 * GIB + 5, 40, True), (0, 0, True), (0, 1, False)]
)
def test_the_verdict_is_free_kib_against_the_gib_needed(free, needed, ok):
    verdict = disk_free_verdict("/srv", free, needed)
    assert (verdict["ok"], verdict["free_kib"], verdict["needed_kib"]) == (ok, free, needed * GIB)
    assert verdict["msg"].endswith("enough") is ok


def test_a_fractional_minimum_is_compared_in_kib():
    assert disk_free_verdict("/srv", GIB // 2, 0.5)["ok"] is True
    assert disk_free_verdict("/srv", GIB // 2 - 1, 0.5)["ok"] is False


def test_unreadable_df_output_is_an_error_naming_it():
    with pytest.raises(ValueError, match="df reported 'df: /srv: No such file' as the free KiB of /srv"):
        disk_free_verdict("/srv", "df: /srv: No such file", 1)
    with pytest.raises(AnsibleFilterError, match="disk_free_verdict: df reported ''"):
        FilterModule().filters()["disk_free_verdict"]("", "/srv", 1)


def test_the_filter_returns_the_verdict():
    assert FilterModule().filters()["disk_free_verdict"]("2097152", "/srv", 1)["ok"] is True
