# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""`--config <file>.yaml`, as sglang reads it (server_args.prepare_server_args, 0.5.3 and later).

sglang turns the YAML mapping into flags placed BEFORE the command line's own (the command line
wins), drops `--config <path>`, and accepts one config file only. A `true` value adds a
store-true flag, `false` leaves it out. Options such as the API key can so stay out of
/proc/<pid>/cmdline.

The simulator has no YAML library: it reads the subset the service role writes (a flat
mapping; values quoted as JSON strings, or plain scalars). Anything else is refused.
"""

from __future__ import annotations

import json
import os


class ConfigError(ValueError):
    """The config file cannot be used; the message is sglang's where sglang has one."""


def _scalar(text: str):
    if text.startswith('"'):
        try:
            return json.loads(text)
        except ValueError:
            raise ConfigError(f"unsupported quoted value {text!r} (the simulator reads JSON-style quotes)") from None
    if len(text) >= 2 and text[0] == text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if text in ("true", "false"):
        return text == "true"
    return text


def parse(text: str) -> dict:
    """A flat YAML mapping (the subset the role writes) -> dict."""
    data = {}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "{}"):
            continue
        key, sep, value = stripped.partition(":")
        if not sep or line[0].isspace() or not key.strip():
            raise ConfigError(f"line {number}: expected `key: value` at the top level")
        data[key.strip()] = _scalar(value.strip())
    return data


def merge(argv: list[str]) -> list[str]:
    """argv with `--config <path>` replaced by the file's flags, placed first (like sglang)."""
    indices = [i for i, arg in enumerate(argv) if arg == "--config"]
    if not indices:
        return argv
    if len(indices) > 1:
        raise ConfigError("Multiple config files specified! Only one allowed.")
    index = indices[0]
    if index == len(argv) - 1:
        raise ConfigError("No config file specified after --config flag!")
    path = argv[index + 1]
    if os.path.splitext(path)[1].lower() not in (".yaml", ".yml"):
        raise ConfigError(f"Config file must be YAML format, got: {os.path.splitext(path)[1]}")
    if not os.path.exists(path):
        raise ConfigError(f"Config file not found: {path}")
    with open(path, encoding="utf-8") as handle:
        config = parse(handle.read())
    flags = []
    for key, value in config.items():
        if value is True:
            flags.append(f"--{key}")
        elif value is not False:
            flags += [f"--{key}", str(value)]
    return flags + argv[:index] + argv[index + 2 :]
