# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight disk check's verdict and its message, with numbers that justify it.

``df -Pk`` gives the free space in KiB; the check needs ``sglang_preflight_min_free_disk_gb`` GiB. The
message shows the exact KiB that were compared, and GiB rounded down (never up: 0.999 GiB is not shown as
1.0 GiB next to "1 needed"), so the shown numbers always say why the check passed or failed.

Stdlib only, no Ansible: the filter ``specdec.sglang.disk_free_verdict`` calls it.
"""

from __future__ import annotations

import math

KIB_PER_GIB = 1024 * 1024


def _gib_down(kib, places=2):
    """``kib`` in GiB rounded down to ``places`` decimals (as text)."""
    scale = 10**places
    return "%.*f" % (places, math.floor(kib * scale / KIB_PER_GIB) / scale)


def disk_free_verdict(path, free_kib, min_free_gb):
    """{ok, free_kib, needed_kib, msg} for ``free_kib`` KiB free at ``path`` against ``min_free_gb`` GiB.

    Raises ValueError for a free space that is not a whole number of KiB (df's output was not read)."""
    text = str(free_kib).strip()
    if not text.isdigit():
        raise ValueError("df reported %r as the free KiB of %s, not a number" % (text[:80], path))
    free = int(text)
    needed = round(float(min_free_gb) * KIB_PER_GIB)
    ok = free >= needed
    msg = "%s has %d KiB (%s GiB) free, sglang_preflight_min_free_disk_gb=%s needs %d KiB: %s" % (
        path,
        free,
        _gib_down(free),
        min_free_gb,
        needed,
        "enough" if ok else "%d KiB short; free space or lower the value" % (needed - free),
    )
    return {"ok": ok, "free_kib": free, "needed_kib": needed, "msg": msg}
