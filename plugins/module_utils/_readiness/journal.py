# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The one journal reader of the collection, and the log-text helpers that go with it.

Reading: ``journalctl`` for exactly one start of a unit, selected by the unit's
InvocationID (plus systemd's own messages about that invocation); where the id is
unknown or yields nothing, ``-u UNIT --since @<epoch of the start>``.

Text helpers (used for journals and plain log files alike): bound a log by bytes
from the end without cutting the last traceback, extract that traceback and its
exception line, find the last load-progress line.

Stdlib only: this runs on the target host.
"""

from __future__ import annotations

import re

TRACEBACK_HEADER = "Traceback (most recent call last):"
# Lines joining two tracebacks of one exception chain.
_CHAIN_LINES = (
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
)
# A line that starts a new log record (so an exception message has ended).
_LOG_RECORD = re.compile(
    r"^(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d|\d{4}-\d\d-\d\d[ T]\d\d:\d\d|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)[:\s])"
)
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b.*$")
_ERRORISH = re.compile(r"\b\w*(?:Error|Exception)\b|\berror:|\bFATAL\b|\bfailed\b", re.IGNORECASE)
_MAX_MESSAGE_LINES = 40

# Load-progress lines of sglang's start, newest wins (tokens stable across 0.5.x).
PROGRESS = re.compile(
    r"Load weight (?:begin|end)|Loading safetensors|Loading pt checkpoint|Memory pool end|KV Cache is allocated|"
    r"max_total_num_tokens=|Capture cuda graph|Capturing batches|Init torch distributed|"
    r"Application startup complete|Uvicorn running on|Start warmup|warmup|fired up and ready to roll",
    re.IGNORECASE,
)
READY_LINE = "The server is fired up and ready to roll!"
# systemd's own lines at the end of a start (selected with the invocation id): once one is in the
# journal, the dead process's last output has very likely been read by journald too.
UNIT_END = re.compile(
    r"\.service: (?:Main process exited|Failed with result|Deactivated successfully|Scheduled restart job|Succeeded\.)"
)


def journal_command(invocation_id=None, unit=None, since_epoch=None, tail_lines=None):
    """argv for this start's journal: by invocation id, else by unit and start time."""
    argv = ["journalctl", "--no-pager", "--quiet", "--output=cat"]
    if invocation_id:
        argv += [
            "_SYSTEMD_INVOCATION_ID=%s" % invocation_id,
            "+",
            "INVOCATION_ID=%s" % invocation_id,
        ]
    elif unit:
        argv += ["--unit=%s" % unit]
        if since_epoch is not None:
            argv += ["--since=@%d" % int(since_epoch)]
    else:
        raise ValueError("journal_command needs an invocation id or a unit")
    if tail_lines:
        argv += ["--lines=%d" % int(tail_lines)]
    return argv


SYNC_COMMAND = ["journalctl", "--sync"]


class JournalReader:
    """Reads one start's journal through an injected ``run_command(argv) -> (rc, out, err)``."""

    def __init__(self, run_command):
        self._run = run_command
        self.last_command = None
        self.last_error = None

    def sync(self):
        """``journalctl --sync``: True once journald has answered (it processes what is queued first).

        That does not prove a dead process's last stdout lines are in: on systemd 252 a read right
        after the sync once lacked a traceback's exception line. Callers still check the text
        (``traceback_complete``). False where the caller may not ask (not root) or journald did not
        answer.
        """
        self.last_command = SYNC_COMMAND
        rc, out, err = self._run(list(SYNC_COMMAND))
        if rc != 0:
            self.last_error = (err or out or "").strip()[:500] or "journalctl --sync exited %d" % rc
            return False
        return True

    def read(self, unit=None, invocation_id=None, since_epoch=None, tail_lines=None):
        """The text of this start (oldest first); invocation id first, then --since fallback."""
        attempts = []
        if invocation_id:
            attempts.append(journal_command(invocation_id=invocation_id, tail_lines=tail_lines))
        if unit:
            attempts.append(journal_command(unit=unit, since_epoch=since_epoch, tail_lines=tail_lines))
        text = ""
        for argv in attempts:
            self.last_command = argv
            rc, out, err = self._run(argv)
            if rc != 0:
                self.last_error = (err or out or "").strip()[:500] or "journalctl exited %d" % rc
                continue
            self.last_error = None
            text = out or ""
            if text.strip():
                return text
        return text


def split_lines(text):
    return (text or "").splitlines()


# -- the returned log: no colour codes, no wall of health-poll access lines -------------------
ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
# uvicorn access lines of the polls a readiness check (or a load balancer) sends while warming:
#   [2026-11-30 18:00:01] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 503 Service Unavailable
POLL_ACCESS = re.compile(
    r'"(?P<method>GET|HEAD) (?P<path>/health(?:_generate)?|/v1/models|/get_model_info|/ready|/model_info)'
    r'(?:\?[^ "]*)? HTTP/[\d.]+" (?P<status>\d{3})'
)
# A run of poll lines longer than this keeps its first line plus one summary line.
POLL_RUN_KEEP = 2


def strip_ansi(text):
    """``text`` without ANSI escape sequences (sglang colours its log lines)."""
    return ANSI.sub("", text or "")


def _poll_summary(run):
    counts = {}
    for _line, key in run:
        counts[key] = counts.get(key, 0) + 1
    parts = ", ".join("%d x %s" % (n, key) for key, n in counts.items())
    return "[%d more health-poll access lines: %s]" % (len(run) - 1, parts)


def collapse_polls(text):
    """Runs of health-poll access lines (``GET /health`` 503 every half second) as their first line
    plus one summary line; every other line is kept as it is."""
    out, run = [], []

    def flush():
        if len(run) > POLL_RUN_KEEP:
            out.append(run[0][0])
            out.append(_poll_summary(run))
        else:
            out.extend(entry[0] for entry in run)
        run.clear()

    for line in split_lines(text):
        match = POLL_ACCESS.search(line)
        if match:
            run.append((line, "%s %s -> %s" % (match["method"], match["path"], match["status"])))
            continue
        flush()
        out.append(line)
    flush()
    return "\n".join(out)


def clean(text):
    """The log as returned and classified: ANSI codes stripped, systemd's lines about the unit last,
    health-poll runs collapsed."""
    return collapse_polls(unit_lines_last(strip_ansi(text)))


def fatal_evidence(text):
    """(traceback, region) to classify a death by.

    The last traceback decides, unless the server logged that it was ready after it (it was
    survived); with a traceback, the rest of the log it is read against starts at the ready line
    when there is one. Without a usable traceback, only the fatal region (``fatal_region``) counts:
    the crash line and exit signal at the end, never an error logged and survived before.
    """
    lines = split_lines(text)
    ready_at = None
    for index in range(len(lines) - 1, -1, -1):
        if READY_LINE in lines[index]:
            ready_at = index
            break
    span = last_traceback_span(lines)
    if span is not None and not (ready_at is not None and span[1] <= ready_at):
        traceback = "\n".join(lines[span[0] : span[1]])
        region = "\n".join(lines[ready_at:]) if ready_at is not None else (text or "")
        return traceback, region
    return None, fatal_region(text)


def fatal_region(text):
    """The part of a log that can hold the cause of a death: everything after the last progress line.

    What was logged before the server last made progress (loaded weights, allocated the KV cache,
    said it is ready) was survived, so it cannot be why the process died.
    """
    lines = split_lines(text)
    for index in range(len(lines) - 1, -1, -1):
        if PROGRESS.search(lines[index]) and not _ERRORISH.search(lines[index]):
            return "\n".join(lines[index + 1 :])
    return text or ""


def _traceback_starts(lines):
    return [i for i, line in enumerate(lines) if TRACEBACK_HEADER in line]


def _traceback_end(lines, start):
    """Index one past the last line of the traceback that begins at ``start``."""
    i = start + 1
    n = len(lines)
    # Frames: indented lines (also Python 3.11 caret lines).
    while i < n and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
        i += 1
    if i >= n:
        return n
    # The exception line, then its message continuation until a new log record.
    i += 1
    extra = 0
    while i < n and extra < _MAX_MESSAGE_LINES:
        line = lines[i]
        if TRACEBACK_HEADER in line or _LOG_RECORD.match(line) or line.strip() in _CHAIN_LINES:
            break
        if not line.strip():
            break
        i += 1
        extra += 1
    return i


def last_traceback_span(lines):
    """(start, end) line indexes of the last traceback including its chained causes, or None."""
    starts = _traceback_starts(lines)
    if not starts:
        return None
    first = starts[-1]
    end = _traceback_end(lines, first)
    # Walk back over chained exceptions ("During handling of ..." / "direct cause of ...").
    idx = len(starts) - 1
    while idx > 0:
        prev = starts[idx - 1]
        prev_end = _traceback_end(lines, prev)
        between = [line.strip() for line in lines[prev_end:first] if line.strip()]
        if between and all(b in _CHAIN_LINES for b in between):
            first = prev
            idx -= 1
            continue
        break
    return first, end


def last_traceback(text):
    """The last traceback (with its chained causes) as text, or None."""
    lines = split_lines(text)
    span = last_traceback_span(lines)
    if span is None:
        return None
    return "\n".join(lines[span[0] : span[1]])


def exception_line(traceback_text):
    """The exception line of a traceback's final exception (``RuntimeError: ...``), or None."""
    lines = split_lines(traceback_text)
    starts = _traceback_starts(lines)
    if not starts:
        return None
    start = starts[-1]
    i = start + 1
    while i < len(lines) and (lines[i].startswith((" ", "\t")) or not lines[i].strip()):
        i += 1
    if i < len(lines):
        return lines[i].strip()
    return None


def last_error_line(text):
    """The last line that reads like an error, for logs without a traceback."""
    for line in reversed(split_lines(text)):
        stripped = line.strip()
        if stripped and (_ERRORISH.search(stripped) or _EXCEPTION_LINE.match(stripped)):
            return stripped
    return None


def last_progress(text):
    """The last load-progress line of a start, or None."""
    for line in reversed(split_lines(text)):
        if PROGRESS.search(line) and not _ERRORISH.search(line):
            return line.strip()
    return None


def unit_end_seen(text):
    """Whether systemd's end-of-start lines for the unit are in this start's journal."""
    return bool(UNIT_END.search(text or ""))


# systemd's own lines about the unit (PID 1 writes them, selected with INVOCATION_ID=).
UNIT_LINE = re.compile(r"^[\w@.:\\-]+\.(?:service|scope): ")


def _own_and_unit_lines(text):
    """(the process's own lines, systemd's lines about the unit), each in journal order."""
    own, unit = [], []
    for line in split_lines(text):
        (unit if UNIT_LINE.match(line) else own).append(line)
    return own, unit


def unit_lines_last(text):
    """The process's own lines in their order, then systemd's lines about the unit.

    journald writes PID 1's "Main process exited" as soon as it gets it, and can still be reading
    the dead process's last output from its stream then: in the journal, systemd's line can land in
    the middle of the final traceback. Never part of the process's output, it goes to the end.
    """
    own, unit = _own_and_unit_lines(text)
    return "\n".join(own + unit) if unit else text or ""


def traceback_complete(text):
    """False when the last traceback of the process's own output stops before its exception line."""
    traceback = last_traceback("\n".join(_own_and_unit_lines(text)[0]))
    return traceback is None or exception_line(traceback) is not None


def saw_ready_line(text):
    return READY_LINE in (text or "")


def bound(text, max_bytes):
    """Keep the end of ``text`` within ``max_bytes`` (UTF-8), cut at a line start.

    The last traceback is never cut: when it starts before the cut, the kept text starts
    where the traceback starts (and may then exceed ``max_bytes``). Returns (text, truncated).
    """
    text = text or ""
    data = text.encode("utf-8", "replace")
    if max_bytes is None or max_bytes <= 0 or len(data) <= max_bytes:
        return text, False
    lines = split_lines(text)
    # Byte offset of each line start.
    offsets = []
    pos = 0
    for line in lines:
        offsets.append(pos)
        pos += len(line.encode("utf-8", "replace")) + 1
    total = pos
    keep_from = 0
    for i, off in enumerate(offsets):
        if total - off <= max_bytes:
            keep_from = i
            break
    else:
        keep_from = len(lines)  # even the last line alone is too long
    span = last_traceback_span(lines)
    if span is not None and span[0] < keep_from:
        keep_from = span[0]
    if keep_from >= len(lines):
        # One oversized last line: keep its end.
        tail = data[-max_bytes:].decode("utf-8", "ignore")
        return tail, True
    return "\n".join(lines[keep_from:]), keep_from > 0


# -- the last N starts of a unit (the support bundle) -----------------------------------------------
# systemd's "unit starting" message (catalog id), where the journal holds it.
UNIT_STARTING_MESSAGE_ID = "7d4958e842da4a758f6c1cdc7b36dcc5"


def _invocation(entry):
    return str(entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID") or "")


def _realtime_us(entry):
    try:
        return int(entry.get("__REALTIME_TIMESTAMP"))
    except (TypeError, ValueError):
        return None


def last_starts(entries, keep):
    """Where the journal of a unit's last ``keep`` starts begins.

    ``entries``: the unit's journal (``journalctl -o json``, parsed), oldest first; the fields
    ``MESSAGE_ID``, ``INVOCATION_ID`` (systemd's own lines), ``_SYSTEMD_INVOCATION_ID`` (the process's) and
    ``__REALTIME_TIMESTAMP`` are read. A start is a "unit starting" message (its MESSAGE_ID) where the journal
    has them; where it has none (a container's systemd may not log them), a start is an invocation id, at its
    first entry - what every systemd writes for every start of a unit.

    Returns {since_us (the first entry of the ``keep``-th last start, None: keep everything), by
    (``message_id``, ``invocation_id`` or ``none``), starts (found), kept}."""
    keep = max(1, int(keep))
    stamps = [_realtime_us(entry) for entry in entries if entry.get("MESSAGE_ID") == UNIT_STARTING_MESSAGE_ID]
    stamps = [stamp for stamp in stamps if stamp is not None]
    by = "message_id"
    if not stamps:
        by, seen = "invocation_id", set()
        for entry in entries:
            invocation, stamp = _invocation(entry), _realtime_us(entry)
            if invocation and stamp is not None and invocation not in seen:
                seen.add(invocation)
                stamps.append(stamp)
    if not stamps:
        return {"since_us": None, "by": "none", "starts": 0, "kept": 0}
    stamps.sort()
    return {
        "since_us": stamps[-keep] if len(stamps) > keep else None,
        "by": by,
        "starts": len(stamps),
        "kept": min(keep, len(stamps)),
    }


def since_argument(since_us):
    """journalctl's ``--since`` for a realtime timestamp in microseconds ("" for none)."""
    if since_us is None:
        return ""
    return "--since=@%d.%06d" % divmod(int(since_us), 1000000)
