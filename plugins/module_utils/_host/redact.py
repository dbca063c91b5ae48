# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Redaction of secrets in the files a support bundle collects (``playbooks/diagnose.yml``).

Pure functions: text in, text out. ``redact(text, "yaml")`` parses a YAML file (the server's
``--config`` file) and writes it back with every key kept and the value of each secret key replaced
by ``<redacted>``; ``redact(text, "env")`` does the same for an environment file of ``NAME=value``
lines (the unit's ``EnvironmentFile``). What cannot be parsed is withheld, never copied through:
a redacted file may be less useful, it never holds a secret.

A key is secret when its last word (words split at ``_``, ``-``, ``.``, spaces and lower-to-upper case
changes, compared without case) is or ends with ``key`` or ``token`` (``api_key``, ``api-key``,
``apiKey``, ``HF_TOKEN``, ``hftoken``), or contains ``secret``, ``password``, ``passwd``,
``credential`` or ``private`` (``AWS_SECRET_ACCESS_KEY``, ``db_password``). ``max_total_tokens`` and
``tokenizer_path`` are not secret: a word must be ``token``, not ``tokens`` nor ``tokenizer``; nor is
``KeyError`` (a traceback's exception line stays whole).

PyYAML is needed for ``"yaml"`` only (the controller always has it; the filter
``specdec.sglang.redact_secrets`` runs there).
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
FORMATS = ("yaml", "env")
# Endings of the last word, and substrings anywhere, that make a key secret (see the module docstring).
SECRET_WORD_ENDINGS = ("key", "token")
SECRET_SUBSTRINGS = ("secret", "password", "passwd", "credential", "private")
HEADER = "# redacted by specdec.sglang (playbooks/diagnose.yml): values of secret keys replaced by <redacted>\n"

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")
_ENV_LINE = re.compile(r"^(?P<lead>\s*(?:export\s+)?)(?P<name>[A-Za-z_][A-Za-z0-9_.-]*)(?P<eq>\s*=\s*)(?P<value>.*)$")


class RedactError(ValueError):
    """A format this module does not know (a bug in the caller, not in the file)."""


def is_secret(name) -> bool:
    """Whether a key (YAML) or variable name (environment file) names a secret."""
    text = str(name)
    words = [w.lower() for w in _WORD_SPLIT.split(text) if w]
    # The last word only: api_key, HF_TOKEN, apiKey are secrets; KeyError, key_path, token_count are not
    # (a traceback's "KeyError: '...'" is the exception line an operator needs, not a secret).
    if words and words[-1].endswith(SECRET_WORD_ENDINGS):
        return True
    lowered = text.lower()
    return any(part in lowered for part in SECRET_SUBSTRINGS)


def redact(text: str, fmt: str) -> str:
    """``text`` (a YAML or environment file) with the values of its secret keys replaced by ``<redacted>``."""
    if fmt == "yaml":
        return redact_yaml(text)
    if fmt == "env":
        return redact_env(text)
    raise RedactError(f"unknown format {fmt!r}; allowed: {', '.join(FORMATS)}")


def _hide(value):
    """Every leaf of a secret value redacted, its structure (mapping keys, list lengths) kept; empty stays empty."""
    if isinstance(value, dict):
        return {key: _hide(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_hide(item) for item in value]
    if value is None or value == "":
        return value
    return REDACTED


def redact_data(data):
    """A parsed document with the value of every secret key hidden, recursively.

    A mapping with a secret ``name`` and a ``value`` (``[{name: HF_TOKEN, value: ...}]``) hides its ``value`` too.
    """
    if isinstance(data, list):
        return [redact_data(item) for item in data]
    if not isinstance(data, dict):
        return data
    named_secret = "value" in data and isinstance(data.get("name"), str) and is_secret(data["name"])
    result = {}
    for key, item in data.items():
        if is_secret(key) or (named_secret and key == "value"):
            result[key] = _hide(item)
        else:
            result[key] = redact_data(item)
    return result


def redact_yaml(text: str) -> str:
    """A YAML file, parsed, with secret values hidden, written back as YAML (comments are not kept).

    Text that is not valid YAML is withheld whole: the message gives the line and column only, since
    PyYAML's own message quotes the text around the error.
    """
    import yaml  # noqa: PLC0415 - controller only (see the module docstring); env redaction needs no PyYAML

    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return HEADER + f"# withheld: the file is not valid YAML{where}; nothing of it is copied\n"
    kept = [redact_data(doc) for doc in documents if doc is not None]
    if not kept:
        return HEADER
    return HEADER + yaml.safe_dump_all(
        kept, default_flow_style=False, sort_keys=False, allow_unicode=True, explicit_start=len(kept) > 1
    )


def _open_quote(value: str) -> str:
    """The quote character a value leaves open at the end of its line ('' when none): systemd joins the next line."""
    quote = ""
    escaped = False
    for char in value:
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
    return quote or ("\\" if escaped else "")


def redact_env(text: str) -> str:
    """An environment file (``NAME=value`` lines, ``#`` comments, ``export`` allowed) with secret values hidden.

    A secret's value that continues on the next lines (an open quote, a trailing backslash) is dropped whole.
    A line that is neither a comment, blank nor an assignment is withheld.
    """
    out = [HEADER]
    continuing = ""  # the open quote (or backslash) of the assignment the current line continues
    secret = False
    for line in text.splitlines():
        if continuing:
            continuing = _continue(line, continuing)
            if not secret:
                out.append(line + "\n")
            continue
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", ";")):
            out.append(line + "\n")
            continue
        match = _ENV_LINE.match(line)
        if not match:
            out.append("# withheld: a line that is not NAME=value\n")
            continue
        continuing = _open_quote(match.group("value"))
        secret = is_secret(match.group("name"))
        if not secret:
            out.append(line + "\n")
            continue
        value = match.group("value").strip()
        hidden = value if value in ("", '""', "''") else f'"{REDACTED}"'
        out.append(f"{match.group('lead')}{match.group('name')}={hidden}\n")
    return "".join(out)


def _continue(line: str, open_with: str) -> str:
    """What is still open after ``line``, which continues a value left open with ``open_with``."""
    if open_with == "\\":
        return _open_quote(line)
    # Inside a quote: find its end, then read the rest of the line as a fresh value.
    escaped = False
    for index, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and open_with != "'":
            escaped = True
        elif char == open_with:
            return _open_quote(line[index + 1 :])
    return open_with


# --- logs and command output: stdlib only (the module sglang_diagnose_scrub runs this on the host) ----------------
# A secret-named key and its value as logs write them: api_key='...' (a dataclass repr, sglang 0.5.17's server_args),
# 'api_key': '...' (a dict repr, sglang 0.5.23's), api-key: "..." (YAML), API_KEY=... (env), --api-key ... (argv).
_KEY = r"(?<![A-Za-z0-9_.])(?P<key>[A-Za-z_][A-Za-z0-9_.-]*)"
_QUOTED = re.compile(_KEY + r"""(?P<sep>['"]?\s*[:=]\s*)(?P<q>['"])(?P<val>(?:\\.|(?!(?P=q))[^\\\n])*)(?P=q)""")
_VALUE_END = r"""\s'",;)}\]"""  # what ends a bare value
_BARE = re.compile(_KEY + r"""(?P<sep>['"]?\s*[:=]\s*)(?P<val>[^""" + _VALUE_END + "]+)")
_FLAG = re.compile(
    r"(?<![A-Za-z0-9_.-])--(?P<key>[A-Za-z][A-Za-z0-9_-]*)(?P<sep>\s+)"
    r"(?P<val>[^-" + _VALUE_END + "][^" + _VALUE_END + "]*)"
)
# Values that say "no secret here" and are kept.
_NOT_A_VALUE = ("", "None", "none", "null", "~", REDACTED, "true", "false", "True", "False")


def _secret_spans(text: str):
    """(start, end, value) of every value of a secret-named key in ``text`` (patterns overlap: each is scanned)."""
    taken = []
    for pattern in (_QUOTED, _BARE, _FLAG):
        position = 0
        while True:
            match = pattern.search(text, position)
            if match is None:
                break
            start, end = match.span("val")
            # A value that is not a secret may hold a key=value that is: scan it too.
            position = start if start > match.start() else match.end()
            key, value = match.group("key"), match.group("val")
            if not is_secret(key) or value in _NOT_A_VALUE or any(s < end and start < e for s, e, _value in taken):
                continue
            taken.append((start, end, value))
            position = end
    return sorted(taken)


def secret_values(text: str) -> set:
    """The values of secret keys in ``text`` (an environment or config file read as lines), unquoted."""
    return {value.replace('\\"', '"').replace("\\\\", "\\") for _start, _end, value in _secret_spans(text)}


def scrub(text: str, values=()) -> tuple:
    """``(text, count)``: every value of a secret-named key, and every occurrence of ``values``, replaced.

    ``values`` are the secrets known from the host's own files (``secret_values``): they are found wherever they
    appear, a key in the middle of a traceback included. A secret is never kept because it is short.
    """
    count = 0
    pieces = []
    last = 0
    for start, end, _value in _secret_spans(text):
        pieces.append(text[last:start] + REDACTED)
        last = end
        count += 1
    pieces.append(text[last:])
    text = "".join(pieces)
    for value in sorted({v for v in values if v and v not in _NOT_A_VALUE}, key=len, reverse=True):
        found = text.count(value)
        if found:
            text = text.replace(value, REDACTED)
            count += found
    return text, count
