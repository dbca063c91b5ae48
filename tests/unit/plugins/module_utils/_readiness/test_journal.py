"""Journal reading of one start, traceback extraction, and byte bounding that never cuts the traceback."""

from ansible_collections.specdec.sglang.plugins.module_utils._readiness import journal

NOT_ENOUGH_MEMORY = """\
[2026-05-09 07:35:20 TP0] Load weight end. elapsed=0.05 s, type=Qwen3ForCausalLM, avail mem=88.21 GB
[2026-05-09 07:35:21 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 6361, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args)
  File "/opt/venv/lib/python3.12/site-packages/sglang/srt/model_executor/pool_configurator.py", line 97, in x
    raise RuntimeError(msg)
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.88
[2026-05-09 07:35:21] Received sigquit from a child process. It usually means the child failed."""

CHAINED = """\
[2026-05-09 07:35:21 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "decode_cuda_graph_runner.py", line 598, in __init__
    self.capture()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "decode_cuda_graph_runner.py", line 603, in __init__
    raise Exception(
Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB.
Possible solutions:
1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)
[2026-05-09 07:35:21] Received sigquit from a child process. It usually means the child failed."""


def test_journal_command_selects_one_invocation_and_systemds_own_lines_about_it():
    argv = journal.journal_command(invocation_id="abc123")
    assert argv[:4] == ["journalctl", "--no-pager", "--quiet", "--output=cat"]
    assert "_SYSTEMD_INVOCATION_ID=abc123" in argv
    assert argv[argv.index("_SYSTEMD_INVOCATION_ID=abc123") + 1 :][:2] == ["+", "INVOCATION_ID=abc123"]


def test_journal_command_falls_back_to_unit_since_start_epoch():
    argv = journal.journal_command(unit="sglang.service", since_epoch=1700000000.7, tail_lines=200)
    assert "--unit=sglang.service" in argv
    assert "--since=@1700000000" in argv
    assert "--lines=200" in argv


class FakeRunner:
    def __init__(self, answers):
        self.answers = answers
        self.calls = []

    def __call__(self, argv):
        self.calls.append(argv)
        return self.answers.pop(0)


def test_reader_uses_the_invocation_id_first():
    runner = FakeRunner([(0, "line a\nline b\n", "")])
    text = journal.JournalReader(runner).read(unit="u.service", invocation_id="inv1", since_epoch=5)
    assert text == "line a\nline b\n"
    assert len(runner.calls) == 1 and "_SYSTEMD_INVOCATION_ID=inv1" in runner.calls[0]


def test_reader_falls_back_to_since_when_the_invocation_has_no_lines():
    runner = FakeRunner([(0, "", ""), (0, "from since\n", "")])
    text = journal.JournalReader(runner).read(unit="u.service", invocation_id="inv1", since_epoch=5)
    assert text == "from since\n"
    assert "--since=@5" in runner.calls[1]


def test_reader_records_journalctl_errors_and_tries_the_fallback():
    runner = FakeRunner([(1, "", "Failed to add match"), (0, "x\n", "")])
    reader = journal.JournalReader(runner)
    assert reader.read(unit="u.service", invocation_id="inv1") == "x\n"
    runner = FakeRunner([(1, "", "No journal files were found.")])
    reader = journal.JournalReader(runner)
    assert reader.read(invocation_id="inv1") == ""
    assert "No journal files" in reader.last_error


def test_last_traceback_starts_mid_line_and_ends_at_the_next_log_record():
    tb = journal.last_traceback(NOT_ENOUGH_MEMORY)
    assert tb.startswith("[2026-05-09 07:35:21 TP0] Scheduler hit an exception: Traceback")
    assert tb.endswith("mem_fraction_static=0.88")
    assert "Received sigquit" not in tb
    assert journal.exception_line(tb).startswith("RuntimeError: Not enough memory.")


def test_chained_traceback_is_returned_whole_with_the_final_exception_line():
    tb = journal.last_traceback(CHAINED)
    assert "torch.OutOfMemoryError" in tb  # the cause is kept
    assert "During handling of the above exception" in tb
    assert tb.rstrip().endswith("(e.g., 0.8 or 0.7)")  # the multi-line message is kept
    assert journal.exception_line(tb).startswith("Exception: Capture cuda graph failed: CUDA out of memory")


def test_python_311_caret_lines_stay_in_the_frames():
    text = (
        "Traceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n'
        "    foo()\n"
        "    ^^^^^\n"
        "ValueError: boom\n"
        "after\n"
    )
    assert journal.exception_line(journal.last_traceback(text)) == "ValueError: boom"


def test_no_traceback_gives_none_and_the_last_error_line():
    text = "INFO: starting\n[2026] ERROR: bind failed: address already in use\nINFO: done\n"
    assert journal.last_traceback(text) is None
    assert journal.exception_line("no traceback") is None
    assert journal.last_error_line(text) == "[2026] ERROR: bind failed: address already in use"


def test_last_progress_is_the_newest_load_line():
    text = (
        "[TP0] Init torch distributed begin.\n"
        "Loading safetensors checkpoint shards:  50% Completed | █████     | 2/4\n"
        "unrelated line\n"
    )
    assert journal.last_progress(text).startswith("Loading safetensors checkpoint shards:  50%")
    assert journal.last_progress("nothing here") is None
    failed = text + "Exception: Capture cuda graph failed: CUDA out of memory.\n"
    assert journal.last_progress(failed).startswith("Loading safetensors")  # an error is not progress
    assert journal.saw_ready_line("[x] The server is fired up and ready to roll!")


def test_bound_keeps_short_logs_whole():
    assert journal.bound("a\nb\n", 1024) == ("a\nb\n", False)


def test_bound_keeps_the_end_within_max_bytes_at_a_line_start():
    lines = ["line %04d %s" % (i, "x" * 50) for i in range(1000)]
    text = "\n".join(lines)
    kept, truncated = journal.bound(text, 4096)
    assert truncated
    assert len(kept.encode()) <= 4096
    assert kept.splitlines()[0] in lines  # starts at a whole line
    assert kept.endswith(lines[-1])


def test_bound_never_cuts_the_last_traceback_even_past_max_bytes():
    noise = "\n".join("noise %d %s" % (i, "y" * 60) for i in range(500))
    frames = "\n".join('  File "f%d.py", line %d, in g\n    call()' % (i, i) for i in range(200))
    text = noise + "\nTraceback (most recent call last):\n" + frames + "\nRuntimeError: the real cause\ntail line"
    kept, truncated = journal.bound(text, 2048)
    assert truncated
    assert kept.startswith("Traceback (most recent call last):")
    assert "RuntimeError: the real cause" in kept and kept.endswith("tail line")
    assert len(kept.encode()) > 2048  # the traceback wins over the bound


def test_bound_keeps_a_chained_traceback_from_its_first_part():
    text = "\n".join("noise %d" % i for i in range(2000)) + "\n" + CHAINED
    kept, _ = journal.bound(text, 256)
    assert kept.startswith("[2026-05-09 07:35:21 TP0] Scheduler hit an exception: Traceback")
    assert "Capture cuda graph failed" in kept


def test_bound_counts_bytes_not_characters():
    text = "\n".join("é" * 100 for _ in range(100))  # 200 bytes per line
    kept, truncated = journal.bound(text, 1000)
    assert truncated and len(kept.encode()) <= 1000


def test_bound_of_one_oversized_line_keeps_its_end():
    kept, truncated = journal.bound("z" * 5000 + "END", 100)
    assert truncated and kept.endswith("END") and len(kept.encode()) <= 100


def test_unit_end_lines_are_recognised():
    assert journal.unit_end_seen("x\nsglang.service: Main process exited, code=killed, status=9/KILL\n")
    assert journal.unit_end_seen("sglang.service: Failed with result 'exit-code'.")
    assert not journal.unit_end_seen("Traceback (most recent call last):")


def _poll(second, status=503, path="/health"):
    return '[2026-11-30 18:00:%02d] INFO:     127.0.0.1:5%04d - "GET %s HTTP/1.1" %d Service Unavailable' % (
        second,
        second,
        path,
        status,
    )


def test_strip_ansi_removes_colour_codes_and_keeps_the_text():
    coloured = "\x1b[32m[2026-11-30 18:00:00]\x1b[0m \x1b[1;31mERROR\x1b[0m something"
    assert journal.strip_ansi(coloured) == "[2026-11-30 18:00:00] ERROR something"


def test_a_run_of_health_polls_becomes_its_first_line_and_a_count():
    lines = ["Load weight begin."] + [_poll(i) for i in range(30)] + ["Load weight end."]
    out = journal.collapse_polls("\n".join(lines)).splitlines()
    assert out[0] == "Load weight begin." and out[-1] == "Load weight end."
    assert out[1] == _poll(0)
    assert out[2] == "[29 more health-poll access lines: 30 x GET /health -> 503]"
    assert len(out) == 4


def test_short_poll_runs_and_other_access_lines_are_kept():
    generate = 'INFO:     127.0.0.1:40000 - "POST /generate HTTP/1.1" 200 OK'
    text = "\n".join([_poll(1), _poll(2), generate, _poll(3, 200, "/v1/models")])
    assert journal.collapse_polls(text) == text


def test_mixed_poll_statuses_are_counted_per_kind():
    text = "\n".join([_poll(i) for i in range(3)] + [_poll(i, 200) for i in range(4)])
    out = journal.collapse_polls(text).splitlines()
    assert out[1] == "[6 more health-poll access lines: 3 x GET /health -> 503, 4 x GET /health -> 200]"


def test_fatal_region_is_what_follows_the_last_progress_line():
    log = "\n".join(
        [
            "OpenAI Responses API (/v1/responses) disabled: (ModuleNotFoundError: No module named 'openai_harmony')",
            "Load weight end. type=Qwen3ForCausalLM",
            "The server is fired up and ready to roll!",
            'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK',
            "Subprocess scheduler_0 (pid=7) crashed with exit code -9. Triggering SIGQUIT for cleanup...",
        ]
    )
    fatal = journal.fatal_region(log)
    assert "openai_harmony" not in fatal
    assert fatal.splitlines()[-1].startswith("Subprocess scheduler_0")


def test_fatal_region_of_a_log_without_progress_is_the_whole_log():
    assert journal.fatal_region("Traceback (most recent call last):\nValueError: x") == (
        "Traceback (most recent call last):\nValueError: x"
    )


def test_sync_asks_journald_and_says_whether_it_answered():
    runner = FakeRunner([(0, "", "")])
    reader = journal.JournalReader(runner)
    assert reader.sync() is True
    assert runner.calls == [["journalctl", "--sync"]]
    runner = FakeRunner([(1, "", "Failed to open /run/systemd/journal/io.systemd.journal: Permission denied")])
    reader = journal.JournalReader(runner)
    assert reader.sync() is False
    assert "Permission denied" in reader.last_error


CUT = (
    "[2026-11-30 22:50:01 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "model_runner.py", line 611, in initialize\n'
    "    self.init_device_graphs()\n"
)
UNIT_END_LINE = "sim-cuda_oom.service: Main process exited, code=killed, status=9/KILL"


def test_systemds_line_inside_the_last_traceback_goes_to_the_end():
    """journald can write PID 1's line while it still reads the dead process's last output."""
    text = CUT + UNIT_END_LINE + "\nException: Capture cuda graph failed: CUDA out of memory\n"
    cleaned = journal.clean(text)
    assert cleaned.splitlines()[-1] == UNIT_END_LINE
    assert journal.exception_line(journal.last_traceback(cleaned)).startswith("Exception: Capture cuda graph failed")
    assert journal.traceback_complete(text)


def test_a_traceback_cut_before_its_exception_line_is_not_complete():
    assert not journal.traceback_complete(CUT + UNIT_END_LINE + "\n")
    assert journal.traceback_complete("no traceback at all\n" + UNIT_END_LINE)
    assert journal.unit_lines_last("plain\nlines\n") == "plain\nlines\n"  # nothing to move: unchanged
