# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A set of small files and directories put in place by one module run (``sglang_files``).

A deploy writes about twenty small files (the unit, its environment and configuration, the watchdog's
code, configuration, wrapper, service and timer) and their directories. One ``copy`` or ``template``
per file costs each of them a file transfer and two module runs on the host; this is the plan for all
of them in one run: which entries are wrong, and what writing them changes. Side effects (reading the
host's files) are injected, so the plan is tested without a host.
"""

from __future__ import annotations

STATES = ("file", "directory")
# Module arguments travel through the connection (pipelined on stdin): small files only. Wheels and
# other large files keep ansible.builtin.copy.
MAX_CONTENT_BYTES = 1 << 20


def check_items(items) -> list:
    """What is wrong with ``items`` (a list of {path, state, content, mode}), as messages; [] when nothing."""
    errors = []
    seen = set()
    for index, item in enumerate(items):
        where = "files[%d]" % index
        path = item.get("path")
        if not isinstance(path, str) or not path.startswith("/"):
            errors.append("%s.path must be an absolute path, not %r" % (where, path))
            continue
        where = "%s (%s)" % (where, path)
        normalized = path.rstrip("/") or "/"
        if normalized in seen:
            errors.append("%s: the path is listed twice" % where)
        seen.add(normalized)
        state = item.get("state") or "file"
        if state not in STATES:
            errors.append("%s.state must be one of %s, not %r" % (where, ", ".join(STATES), state))
            continue
        content = item.get("content")
        if state == "file":
            if not isinstance(content, str):
                errors.append("%s: a file needs its content (content, src or template)" % where)
            elif len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
                errors.append(
                    "%s: %d bytes is over the %d bytes this module carries; use ansible.builtin.copy"
                    % (where, len(content.encode("utf-8")), MAX_CONTENT_BYTES)
                )
        elif content is not None:
            errors.append("%s: a directory has no content" % where)
        mode = item.get("mode")
        if not (isinstance(mode, str) and 3 <= len(mode) <= 4 and all(c in "01234567" for c in mode)):
            errors.append("%s.mode must be an octal string such as '0644', not %r" % (where, mode))
    return errors


def plan(items, inspect) -> list:
    """One step per item: ``(item, action)``, action ``create``, ``replace`` or ``keep`` (content or existence).

    ``inspect(path)`` returns ``None`` (nothing there), ``"directory"``, or the file's bytes; anything
    else at the path (a file where a directory belongs, a directory where a file belongs) is an error.
    Modes and owners are not part of the plan: the module sets them on every entry, as it finds them.
    """
    steps = []
    for item in items:
        path = item["path"]
        state = item.get("state") or "file"
        found = inspect(path)
        if state == "directory":
            if found is None:
                steps.append((item, "create"))
            elif found == "directory":
                steps.append((item, "keep"))
            else:
                raise ValueError("%s is a file, not a directory" % path)
            continue
        if found == "directory":
            raise ValueError("%s is a directory, not a file" % path)
        wanted = item["content"].encode("utf-8")
        if found is None:
            steps.append((item, "create"))
        else:
            steps.append((item, "keep" if found == wanted else "replace"))
    return steps
