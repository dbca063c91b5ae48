"""The last N starts of a unit in its journal (issue 35, item 6): by "unit starting" message, else by invocation."""

import json

from ansible_collections.specdec.sglang.plugins.filter.journal_last_starts import FilterModule
from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal

STARTING = journal.UNIT_STARTING_MESSAGE_ID
T0 = 1_764_900_000_000_000  # us


def export(starts, message_ids=False, lines_per_start=4):
    """A unit's journal of ``starts`` starts, oldest first, as journalctl -o json writes it: systemd's own lines
    (INVOCATION_ID; with the "unit starting" MESSAGE_ID only when ``message_ids``) and the process's lines."""
    entries = []
    for n in range(starts):
        invocation, at = "%032x" % (n + 1), T0 + n * 60_000_000
        starting = {"INVOCATION_ID": invocation, "MESSAGE": "Starting sglang.service...", "__REALTIME_TIMESTAMP": at}
        if message_ids:
            starting["MESSAGE_ID"] = STARTING
        entries.append(starting)
        for k in range(lines_per_start):
            entries.append(
                {"_SYSTEMD_INVOCATION_ID": invocation, "MESSAGE": "line %d" % k, "__REALTIME_TIMESTAMP": at + k + 1}
            )
        entries.append({"INVOCATION_ID": invocation, "MESSAGE": "Main process exited", "__REALTIME_TIMESTAMP": at + 50})
    return [{key: str(value) for key, value in entry.items()} for entry in entries]


def kept(entries, since_us):
    return {
        entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID")
        for entry in entries
        if since_us is None or int(entry["__REALTIME_TIMESTAMP"]) >= since_us
    }


def test_41_starts_without_message_ids_keep_the_last_3_by_invocation():
    entries = export(41)
    found = journal.last_starts(entries, 3)
    assert (found["by"], found["starts"], found["kept"]) == ("invocation_id", 41, 3)
    assert found["since_us"] == T0 + 38 * 60_000_000  # the first line of start 39 of 41
    assert kept(entries, found["since_us"]) == {"%032x" % n for n in (39, 40, 41)}


def test_the_process_lines_alone_are_enough():
    entries = [entry for entry in export(41) if "_SYSTEMD_INVOCATION_ID" in entry]
    found = journal.last_starts(entries, 3)
    assert kept(entries, found["since_us"]) == {"%032x" % n for n in (39, 40, 41)}


def test_starting_messages_decide_where_the_journal_has_them():
    entries = export(10, message_ids=True)
    found = journal.last_starts(entries, 2)
    assert (found["by"], found["starts"], found["since_us"]) == ("message_id", 10, T0 + 8 * 60_000_000)


def test_fewer_starts_than_asked_keep_the_whole_journal():
    assert journal.last_starts(export(2), 3) == {"since_us": None, "by": "invocation_id", "starts": 2, "kept": 2}
    assert journal.last_starts(export(3), 3)["since_us"] is None
    assert journal.last_starts([], 3) == {"since_us": None, "by": "none", "starts": 0, "kept": 0}


def test_the_since_argument_keeps_the_microseconds():
    assert journal.since_argument(1_764_900_123_000_045) == "--since=@1764900123.000045"
    assert journal.since_argument(None) == ""


def test_the_filter_reads_journalctl_json_lines():
    text = "-- No entries --\n" + "".join(json.dumps(entry) + "\n" for entry in export(41))
    found = FilterModule().filters()["journal_last_starts"](text, 3)
    assert (found["starts"], found["kept"]) == (41, 3)
    assert found["since"] == "--since=@%d.000000" % ((T0 + 38 * 60_000_000) // 1_000_000)
