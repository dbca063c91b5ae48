# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Files on a host written whole or not at all: the one way the collection's host code replaces a file.

``write_atomically`` writes to a temporary file in the target's directory, flushes it to disk, sets
its mode (and owner, when given) and renames it over the target. A reader (systemd reading a unit, a
node_exporter reading a textfile, a second deploy reading a patch set's state) sees the old file or
the new one, never part of one; a failure leaves the old file and no temporary file behind.

Stdlib only (Python >= 3.9): the watchdog copies this module to the host and runs it outside Ansible.
"""

from __future__ import annotations

import os
import tempfile


def write_atomically(path, data, mode=0o644, uid=None, gid=None):
    """Replace ``path`` with ``data`` (bytes, or text written as UTF-8), file mode ``mode``.

    ``uid`` / ``gid``: the owner to give the new file (None: the writer's). The temporary file is named
    after the target (``.<name>.<random>``) in the same directory, so the rename never crosses a filesystem.
    """
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data.encode("utf-8") if isinstance(data, str) else data)
            handle.flush()
            os.fsync(handle.fileno())
        if uid is not None or gid is not None:
            os.chown(tmp, -1 if uid is None else uid, -1 if gid is None else gid)
        os.chmod(tmp, mode)  # after chown, which may clear set-id bits
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
