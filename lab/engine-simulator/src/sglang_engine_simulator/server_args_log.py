"""The start-up line that shows the server args, as the sglang installed beside the simulator writes it.

Real sglang logs its server args at every start (``sglang/srt/entrypoints/engine.py``), the API key
in clear: 0.5.17 ``logger.info(f"{server_args=}")``, 0.5.23 a dict that hides only the watermark
secrets. The collection's ``redact-server-args-<version>`` patch set makes that line show the fields
its ``_SECRET_SERVER_ARGS`` names as ``<redacted>``. On a lab host the simulator lives in the release
venv, where the real sglang wheel is installed (without dependencies) and the patch sets are applied
to it: so the simulator reads that engine.py (found without importing sglang, which cannot import
there) and redacts exactly the fields the installed file redacts. No sglang beside it, or an engine.py
without the patch: every value in clear, like real sglang.
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib

ENGINE = pathlib.PurePosixPath("srt/entrypoints/engine.py")
SECRETS_NAME = "_SECRET_SERVER_ARGS"


def installed_engine_py() -> pathlib.Path | None:
    """engine.py of the sglang package this interpreter would import, or None (sglang is not imported)."""
    try:
        spec = importlib.util.find_spec("sglang")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = pathlib.Path(location, ENGINE)
        if path.is_file():
            return path
    return None


def redacted_fields(engine_source: str) -> tuple[str, ...]:
    """The field names engine.py's ``_SECRET_SERVER_ARGS`` lists (the redaction patch), else ()."""
    try:
        module = ast.parse(engine_source)
    except SyntaxError:
        return ()
    for node in module.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == SECRETS_NAME for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return ()
            return tuple(v for v in value if isinstance(v, str))
    return ()


def installed_redaction() -> tuple[str, ...]:
    path = installed_engine_py()
    if path is None:
        return ()
    try:
        return redacted_fields(path.read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return ()


def server_args_line(values: dict, redacted: tuple[str, ...]) -> str:
    """``server_args=ServerArgs(name=value!r, ...)``: a set secret among ``redacted`` shows as <redacted>."""
    shown = ", ".join(f"{k}={('<redacted>' if k in redacted and v else v)!r}" for k, v in values.items())
    return f"server_args=ServerArgs({shown})"
