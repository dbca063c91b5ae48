# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""patchset_report: the deploy report's patch set entries (module_utils/_patchset/patchset.py report_entries)."""

from ansible_collections.specdec.sglang.plugins.filter.patchset_report import FilterModule

patchset_report = FilterModule().filters()["patchset_report"]

APPLIED = [
    {"name": "a", "sglang_version": "0.5.23", "files": [{"path": "x.py", "action": "patch"}], "changed": True},
    {"name": "b", "sglang_version": "0.5.23", "files": [], "changed": False},
]


def test_one_entry_per_set_from_both_steps():
    verified = [{"verify": {"ok": True, "mode": "compile"}}, {"verify": {"ok": True, "mode": "import"}}]
    assert patchset_report(APPLIED, verified) == [
        {
            "name": "a",
            "sglang_version": "0.5.23",
            "files": [{"path": "x.py", "action": "patch"}],
            "changed": True,
            "verify": {"ok": True, "mode": "compile"},
        },
        {
            "name": "b",
            "sglang_version": "0.5.23",
            "files": [],
            "changed": False,
            "verify": {"ok": True, "mode": "import"},
        },
    ]


def test_a_skipped_verify_is_an_empty_one():
    """Check mode skips the verify step: its items carry no verify."""
    verified = [{"skipped": True, "skip_reason": "Conditional result was False"}] * 2
    assert [entry["verify"] for entry in patchset_report(APPLIED, verified)] == [{}, {}]


def test_no_sets_no_entries():
    assert patchset_report([], []) == []
    assert patchset_report(None, None) == []
