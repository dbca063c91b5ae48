"""Log lines in sglang's format (`[YYYY-mm-dd HH:MM:SS TP0] message`), written and flushed at once."""

from __future__ import annotations

import sys
import threading
import time

_LOCK = threading.Lock()


def _write(stream, text: str) -> None:
    with _LOCK:
        stream.write(text)
        stream.flush()


def log(message: str, rank: int | None = None) -> None:
    """A logging line as sglang prints it: main process without a rank, scheduler lines with `TPn`."""
    where = "" if rank is None else f" TP{rank}"
    _write(sys.stderr, f"[{time.strftime('%Y-%m-%d %H:%M:%S')}{where}] {message}\n")


def raw(text: str, stream=None) -> None:
    """A line without sglang's prefix (uvicorn, tqdm, tracebacks, warnings)."""
    _write(stream or sys.stderr, text if text.endswith("\n") else text + "\n")


def access(client: str, method: str, path: str, status: int, phrase: str) -> None:
    """uvicorn's access log line; uvicorn writes these to stdout."""
    raw(f'INFO:     {client} - "{method} {path} HTTP/1.1" {status} {phrase}', sys.stdout)
