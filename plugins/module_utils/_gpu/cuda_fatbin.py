# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Which GPU code a CUDA shared object carries, read from its ``.nv_fatbin`` ELF section.

Pure, stdlib only, nothing is run and no CUDA tool is needed: the module
``specdec.sglang.sglang_gpu_code`` opens a venv's ``.so`` files on the host and hands the open
file here (only headers are read); the tests build small ELF files themselves.

Layout read (the same that ``cuobjdump --list-elf`` / ``--list-ptx`` shows):

- ELF64 little endian: the section header table (``e_shoff``, ``e_shentsize``, ``e_shnum``,
  ``e_shstrndx``) names the section ``.nv_fatbin``.
- The section holds one or more fatbin containers, each 8-byte aligned: a 16-byte header
  (magic ``0xBA55ED50``, version, header size, size of the entries that follow), then entries.
- Each entry starts with a header: kind (``1`` PTX, ``2`` ELF = SASS), version, header size,
  payload size, ..., at offset 28 the SM the code is for (``120`` for sm_120) and at offset 40
  the flags (u64), where ``0x100000`` marks arch-specific code (``sm_120a``) and ``0x200000``
  family-specific code (``sm_120f``): read from what CUDA 13.0's ``fatbinary --image3=kind=elf,sm=120``
  / ``sm=120a`` / ``sm=120f`` writes, and seen in sglang-kernel 0.4.5's ``sm100/common_ops``, whose
  sm_120 entries are all ``a`` (tests/unit/plugins/module_utils/_gpu/fatbin_reads/). The payload follows
  the header.

An entry is SASS for one SM, which runs on GPUs of the same major capability and a minor at
least as high, except arch-specific SASS (``sm_120a``), which runs on its exact capability only;
PTX for ``compute_XY`` can be compiled by the driver for any capability ``>= X.Y`` (arch-specific
PTX for ``X.Y`` only).
"""

from __future__ import annotations

import struct

FATBIN_MAGIC = 0xBA55ED50
SECTION = ".nv_fatbin"
KINDS = {1: "PTX", 2: "SASS"}
ARCH_SPECIFIC, FAMILY_SPECIFIC = 0x100000, 0x200000  # entry flags: sm_XYa, sm_XYf
_ENTRY_HEAD = 48  # the fields read: kind .. flags
_ELF_MAGIC = b"\x7fELF"


class FatbinError(ValueError):
    """Bytes that are not an ELF64 file or whose fatbin section does not parse."""


def _read(stream, offset: int, size: int) -> bytes:
    stream.seek(offset)
    data = stream.read(size)
    if len(data) != size:
        raise FatbinError(f"file ends before offset {offset + size}")
    return data


def elf_sections(stream) -> dict:
    """``{name: (offset, size)}`` of an ELF64 little-endian file's sections (``stream``: binary, seekable)."""
    stream.seek(0)
    ident = stream.read(64)
    if len(ident) < 64 or ident[:4] != _ELF_MAGIC:
        raise FatbinError("not an ELF file (no \\x7fELF magic)")
    if ident[4] != 2 or ident[5] != 1:
        raise FatbinError(f"only ELF64 little endian is read (class {ident[4]}, data {ident[5]})")
    (shoff,) = struct.unpack_from("<Q", ident, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
    if shoff == 0 or shnum == 0:
        return {}
    if shentsize < 64 or shstrndx >= shnum:
        raise FatbinError(f"bad section header table ({shnum} x {shentsize} bytes, names in {shstrndx})")
    table = _read(stream, shoff, shnum * shentsize)
    headers = []
    for index in range(shnum):
        name, section_type, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", table, index * shentsize)
        headers.append((name, offset, 0 if section_type == 8 else size))  # 8: SHT_NOBITS, no bytes in the file
    strtab = _read(stream, headers[shstrndx][1], headers[shstrndx][2])
    sections = {}
    for name_offset, offset, size in headers:
        end = strtab.find(b"\0", name_offset)
        sections[strtab[name_offset : end if end >= 0 else len(strtab)].decode("ascii", "replace")] = (offset, size)
    return sections


def fatbin_entries(stream, start: int = 0, length: int | None = None) -> list[dict]:
    """Entries of the fatbin containers in ``stream[start:start+length]``: ``[{kind, sm, size, container}]``.

    Only headers are read (a 1 GB section costs a few thousand small reads, not 1 GB of memory).
    """
    if length is None:
        stream.seek(0, 2)
        length = stream.tell() - start
    limit = start + length
    entries: list[dict] = []
    position = start
    container = 0
    while position + 16 <= limit:
        header = _read(stream, position, 16)
        magic, _version, header_size, fat_size = struct.unpack("<IHHQ", header)
        if magic != FATBIN_MAGIC:
            if any(header[:8]):
                raise FatbinError(f"no fatbin magic at offset {position - start} of the section (0x{magic:08X})")
            position += 8  # padding between containers
            continue
        if header_size < 16 or position + header_size + fat_size > limit:
            raise FatbinError(f"fatbin container at offset {position - start} runs past the section")
        entry = position + header_size
        end = entry + fat_size
        while entry + 32 <= end:
            head = _read(stream, entry, 32)
            kind, _ev, entry_header, payload = struct.unpack_from("<HHIQ", head)
            if entry_header < 32 or entry + entry_header + payload > end:
                raise FatbinError(f"fatbin entry at offset {entry - start} runs past its container")
            (sm,) = struct.unpack_from("<I", head, 28)
            flags = 0
            if entry_header >= _ENTRY_HEAD:
                (flags,) = struct.unpack("<Q", _read(stream, entry + 40, 8))
            variant = "a" if flags & ARCH_SPECIFIC else "f" if flags & FAMILY_SPECIFIC else ""
            entries.append(
                {
                    "kind": KINDS.get(kind, f"kind{kind}"),
                    "sm": sm,
                    "variant": variant,
                    "size": payload,
                    "container": container,
                }
            )
            entry += entry_header + payload
        container += 1
        position = end + (-end % 8)
    return entries


def arch_specific_only(entries: list[dict], kind: str) -> list[int]:
    """SMs some container holds ``kind`` code for only as arch-specific (``sm_120a`` and no ``sm_120``):
    that container's code for the SM runs on its exact capability only."""
    held: dict = {}
    for e in entries:
        if e["kind"] == kind:
            held.setdefault((e["container"], e["sm"]), set()).add(e["variant"])
    return sorted({sm for (_container, sm), variants in held.items() if variants == {"a"}})


def read_shared_object(stream) -> dict:
    """``{containers, entries, sass, ptx, sass_arch_specific, ptx_arch_specific}`` of one shared object:
    sorted, unique SMs; the ``*_arch_specific`` ones (a subset) run on their exact capability only."""
    sections = elf_sections(stream)
    if SECTION not in sections:
        return {"containers": 0, "entries": 0, "sass": [], "ptx": [], "sass_arch_specific": [], "ptx_arch_specific": []}
    offset, size = sections[SECTION]
    entries = fatbin_entries(stream, offset, size)
    return {
        "containers": len({e["container"] for e in entries}),
        "entries": len(entries),
        "sass": sorted({e["sm"] for e in entries if e["kind"] == "SASS"}),
        "ptx": sorted({e["sm"] for e in entries if e["kind"] == "PTX"}),
        "sass_arch_specific": arch_specific_only(entries, "SASS"),
        "ptx_arch_specific": arch_specific_only(entries, "PTX"),
    }


def sm_of(capability: str) -> int:
    """``12.0`` -> 120, ``9.0`` -> 90, ``8.6`` -> 86."""
    major, _dot, minor = str(capability).partition(".")
    return int(major) * 10 + int(minor or 0)


def runs_on(
    capability: str, sass: list[int], ptx: list[int], sass_arch_specific=(), ptx_arch_specific=()
) -> str | None:
    """How code for ``capability`` is found: ``sass sm_120``, ``sass sm_120a``, ``ptx compute_90 (JIT ...)``,
    or None. Arch-specific SMs (``*_arch_specific``) count for their exact capability only."""
    want = sm_of(capability)
    if want in sass:
        return f"sass sm_{want}{'a' if want in sass_arch_specific else ''}"
    family = [sm for sm in sass if sm // 10 == want // 10 and sm <= want and sm not in sass_arch_specific]
    if family:
        return f"sass sm_{max(family)}"
    below = [sm for sm in ptx if (sm < want and sm not in ptx_arch_specific) or sm == want]
    if below:
        best = max(below)
        return f"ptx compute_{best}{'a' if best in ptx_arch_specific else ''} (JIT by the driver)"
    return None


def describe(sass: list[int], ptx: list[int], sass_arch_specific=(), ptx_arch_specific=()) -> str:
    """``SASS sm_80, sm_90, sm_120a; no PTX`` for messages."""
    parts = [
        "SASS " + ", ".join(f"sm_{sm}{'a' if sm in sass_arch_specific else ''}" for sm in sass) if sass else "no SASS"
    ]
    parts.append(
        "PTX " + ", ".join(f"compute_{sm}{'a' if sm in ptx_arch_specific else ''}" for sm in ptx) if ptx else "no PTX"
    )
    return "; ".join(parts)
