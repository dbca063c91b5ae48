# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Package requirements: the one parser of ``Requires-Dist`` lines, versions and markers.

A PEP 508 subset, enough for the metadata of the wheels the runtime installs:

- ``name[extra,...] (specifiers) ; marker`` with the specifiers ``== != >= <= > < ~= ===``
  (``==X.*`` / ``!=X.*`` wildcards) and URL requirements (``name @ url``) kept as unversioned;
- markers: ``and`` / ``or`` / parentheses over ``<variable> <op> "<value>"`` (either side quoted),
  ``in`` / ``not in``; variables from the environment given (``python_version``, ``sys_platform``,
  ``platform_machine``, ``extra``, ...); version comparison for the ``*version*`` variables;
- PEP 440 versions: epoch, release, pre / post / dev, local label (ordered as PEP 440 says).

Pure functions, stdlib only (plugins stay Python >= 3.9 stdlib only).
"""

from __future__ import annotations

import re
from email.parser import HeaderParser

_NAME = re.compile(r"^\s*([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*")
_SPEC = re.compile(r"^\s*(~=|===|==|!=|<=|>=|<|>)\s*([^\s,;)]+)\s*")
_VERSION = re.compile(
    r"^\s*v?(?:(?P<epoch>[0-9]+)!)?(?P<release>[0-9]+(?:\.[0-9]+)*)"
    r"(?:[-_.]?(?P<pre_l>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>[0-9]+)?)?"
    r"(?:-(?P<post_n1>[0-9]+)|[-_.]?(?P<post_l>post|rev|r)[-_.]?(?P<post_n2>[0-9]+)?)?"
    r"(?:[-_.]?(?P<dev_l>dev)[-_.]?(?P<dev_n>[0-9]+)?)?"
    r"(?:\+(?P<local>[a-z0-9]+(?:[-_.][a-z0-9]+)*))?\s*$",
    re.IGNORECASE,
)
_PRE = {"a": "a", "alpha": "a", "b": "b", "beta": "b", "c": "rc", "rc": "rc", "pre": "rc", "preview": "rc"}
# The environment of a GPU host: Linux x86_64, CPython (python_version is filled in per host).
LINUX_X86_64 = {
    "os_name": "posix",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
    "extra": "",
}


class RequirementError(ValueError):
    """A requirement, version or marker this parser cannot read."""


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: ``sglang_kernel`` and ``Sglang.Kernel`` are ``sglang-kernel``."""
    return re.sub(r"[-_.]+", "-", str(name or "")).lower()


# --- versions ---------------------------------------------------------------------------------


def parse_version(text: str) -> tuple:
    """A sortable key for a PEP 440 version; raises RequirementError when it is not one."""
    match = _VERSION.match(str(text))
    if not match:
        raise RequirementError(f"{text!r} is not a PEP 440 version")
    release = [int(p) for p in match.group("release").split(".")]
    while len(release) > 1 and release[-1] == 0:
        release.pop()
    pre_l = match.group("pre_l")
    post_n = match.group("post_n1") or match.group("post_n2")
    has_post = match.group("post_l") is not None or match.group("post_n1") is not None
    dev_l = match.group("dev_l")
    # Sort order inside one release: dev < pre < final < post (a dev of a pre/post sorts before it).
    if pre_l:
        pre = (1, _PRE[pre_l.lower()], int(match.group("pre_n") or 0))
    elif dev_l and not has_post:
        pre = (0, "", 0)
    else:
        pre = (2, "", 0)
    post = (1, int(post_n or 0)) if has_post else (0, 0)
    dev = (0, int(match.group("dev_n") or 0)) if dev_l else (1, 0)
    local_text = match.group("local") or ""
    local = tuple((1, int(p), "") if p.isdigit() else (0, 0, p.lower()) for p in re.split(r"[-_.]", local_text) if p)
    return (int(match.group("epoch") or 0), tuple(release), pre, post, dev, local)


def _public(version: str) -> str:
    return str(version).split("+", 1)[0]


def _release(text: str) -> list[int]:
    match = _VERSION.match(text)
    if not match:
        raise RequirementError(f"{text!r} is not a PEP 440 version")
    return [int(p) for p in match.group("release").split(".")]


def _padded(parts: list[int], length: int) -> list[int]:
    return parts + [0] * (length - len(parts))


def spec_matches(version: str, op: str, target: str) -> bool:
    """Does ``version`` satisfy one specifier ``op target``? (A local label counts only for ``===``.)"""
    if op == "===":
        return str(version).strip().lower() == str(target).strip().lower()
    if target.endswith(".*"):
        if op not in ("==", "!="):
            raise RequirementError(f"{op}{target}: a wildcard is allowed with == and != only")
        prefix = _release(target[:-2])
        have = _padded(_release(_public(version)), len(prefix))[: len(prefix)]
        return (have == prefix) == (op == "==")
    # A specifier without a local label ignores the candidate's local label (2.11.0+cu130 == 2.11.0).
    candidate = version if "+" in target else _public(version)
    have, want = parse_version(candidate), parse_version(target)
    if op == "==":
        return have == want
    if op == "!=":
        return have != want
    if op == "~=":
        prefix = _release(target)
        if len(prefix) < 2:
            raise RequirementError(f"~={target}: needs at least two release parts")
        stem = prefix[:-1]
        return have >= want and _padded(_release(_public(version)), len(stem))[: len(stem)] == stem
    # Ordered comparisons: a pre-release of the target's own release does not satisfy >= / >.
    return {"<": have < want, "<=": have <= want, ">": have > want, ">=": have >= want}[op]


def satisfies(version: str, specifiers) -> bool:
    """Does ``version`` satisfy every ``(op, target)`` of ``specifiers``? (None: no version pin.)"""
    return all(spec_matches(version, op, target) for op, target in specifiers or [])


def format_specifiers(specifiers) -> str:
    return ",".join(f"{op}{target}" for op, target in specifiers or []) or "(any version)"


# --- markers ----------------------------------------------------------------------------------

_MARKER_TOKEN = re.compile(
    r"\s*(?:(?P<str>'[^']*'|\"[^\"]*\")|(?P<op>===|==|!=|<=|>=|~=|<|>|not\s+in\b|in\b)"
    r"|(?P<bool>and\b|or\b)|(?P<paren>[()])|(?P<var>[A-Za-z_][A-Za-z0-9_.]*))"
)


def _tokens(marker: str) -> list[tuple[str, str]]:
    tokens, position = [], 0
    text = marker.strip()
    while position < len(text):
        match = _MARKER_TOKEN.match(text, position)
        if not match or match.end() == position:
            raise RequirementError(f"cannot read marker {marker!r} at {text[position:]!r}")
        kind = match.lastgroup
        value = match.group(kind)
        tokens.append((kind, re.sub(r"\s+", " ", value) if kind == "op" else value))
        position = match.end()
    return tokens


def evaluate_marker(marker: str, environment: dict) -> bool:
    """The truth of a PEP 508 marker in ``environment`` (``extra`` "" unless given)."""
    if not str(marker or "").strip():
        return True
    tokens = _tokens(str(marker))
    result, position = _or(tokens, 0, environment)
    if position != len(tokens):
        raise RequirementError(f"cannot read marker {marker!r}: trailing {tokens[position:]}")
    return result


def _or(tokens, position, env):
    value, position = _and(tokens, position, env)
    while position < len(tokens) and tokens[position] == ("bool", "or"):
        right, position = _and(tokens, position + 1, env)
        value = value or right
    return value, position


def _and(tokens, position, env):
    value, position = _atom(tokens, position, env)
    while position < len(tokens) and tokens[position] == ("bool", "and"):
        right, position = _atom(tokens, position + 1, env)
        value = value and right
    return value, position


def _operand(token, env) -> tuple[str, str | None]:
    kind, value = token
    if kind == "str":
        return value[1:-1], None
    if kind == "var":
        return str(env.get(value, "")), value
    raise RequirementError(f"expected a marker value, found {value!r}")


def _atom(tokens, position, env):
    if position >= len(tokens):
        raise RequirementError("marker ends too early")
    if tokens[position] == ("paren", "("):
        value, position = _or(tokens, position + 1, env)
        if position >= len(tokens) or tokens[position] != ("paren", ")"):
            raise RequirementError("marker has an unclosed parenthesis")
        return value, position + 1
    if position + 3 > len(tokens):
        raise RequirementError("marker comparison is incomplete")
    left, left_var = _operand(tokens[position], env)
    kind, op = tokens[position + 1]
    if kind != "op":
        raise RequirementError(f"expected a marker operator, found {op!r}")
    right, right_var = _operand(tokens[position + 2], env)
    variable = left_var or right_var or ""
    return _compare(left, op, right, variable), position + 3


def _compare(left: str, op: str, right: str, variable: str) -> bool:
    if op == "in":
        return left in right
    if op == "not in":
        return left not in right
    if variable == "extra":
        left, right = normalize_name(left), normalize_name(right)
    if variable.endswith("version") and op not in ("===",):
        try:
            return spec_matches(left, op, right)
        except RequirementError:
            pass
    if op in ("==", "==="):
        return left == right
    if op == "!=":
        return left != right
    return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}.get(op, False)


# --- requirements -----------------------------------------------------------------------------


def parse_requirement(line: str) -> dict:
    """``torch==2.11.0; extra == "x"`` -> ``{name, key, extras, specifiers, marker, text}``."""
    text = str(line).strip()
    body, _sep, marker = text.partition(";")
    match = _NAME.match(body)
    if not match:
        raise RequirementError(f"cannot read requirement {text!r}: no distribution name")
    name = match.group(1)
    rest = body[match.end() :]
    extras: list[str] = []
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise RequirementError(f"cannot read requirement {text!r}: unclosed [")
        extras = [normalize_name(e) for e in rest[1:close].split(",") if e.strip()]
        rest = rest[close + 1 :].strip()
    specifiers: list[tuple[str, str]] = []
    if rest.startswith("@"):
        rest = ""  # a URL requirement: no version to compare
    rest = rest.strip()
    if rest.startswith("(") and rest.endswith(")"):
        rest = rest[1:-1]
    while rest.strip():
        spec = _SPEC.match(rest)
        if not spec:
            raise RequirementError(f"cannot read requirement {text!r} at {rest.strip()!r}")
        specifiers.append((spec.group(1), spec.group(2)))
        rest = rest[spec.end() :]
        if rest.startswith(","):
            rest = rest[1:]
    return {
        "name": name,
        "key": normalize_name(name),
        "extras": extras,
        "specifiers": specifiers,
        "marker": marker.strip(),
        "text": text,
    }


def metadata_requires(metadata: str) -> list[str]:
    """The ``Requires-Dist`` lines of a METADATA / PKG-INFO text, in order."""
    headers = HeaderParser().parsestr(str(metadata or ""), headersonly=True)
    return [str(value).strip() for value in headers.get_all("Requires-Dist") or []]


def metadata_identity(metadata: str) -> tuple[str, str]:
    """(Name, Version) of a METADATA text."""
    headers = HeaderParser().parsestr(str(metadata or ""), headersonly=True)
    return str(headers.get("Name") or ""), str(headers.get("Version") or "")


def active_requirements(lines, environment: dict, extras=()) -> list[dict]:
    """The requirements whose markers hold in ``environment`` with ``extras`` requested.

    A requirement under ``extra == "x"`` counts only when ``x`` is requested (once per extra).
    """
    wanted = [normalize_name(e) for e in extras or []]
    active, seen = [], set()
    for line in lines or []:
        requirement = parse_requirement(line)
        for extra in ["", *wanted]:
            if not evaluate_marker(requirement["marker"], dict(environment, extra=extra)):
                continue
            if requirement["text"] not in seen:
                seen.add(requirement["text"])
                active.append(requirement)
            break
    return active
