# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Build small ELF64 shared objects with a ``.nv_fatbin`` section, for the fatbin reader's tests.

The layout written is the one plugins/module_utils/_gpu/cuda_fatbin.py reads (its docstring): fatbin
containers (magic 0xBA55ED50, 16-byte header) of entries with a 64-byte header (kind 1 PTX /
2 SASS, header size, payload size, the SM at offset 28) and a payload of filler bytes.
"""

import struct

PTX, SASS = 1, 2


def fatbin_container(entries) -> bytes:
    """One container of ``entries``: ``[(kind, sm, payload_size)]``."""
    body = b""
    for kind, sm, size in entries:
        header = struct.pack("<HHIQIIHHI", kind, 0x0101, 64, size, 0, 0, 0, 0, sm).ljust(64, b"\0")
        body += header + bytes([0x5A]) * size
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


def fatbin_section(containers) -> bytes:
    """Containers, each padded to 8 bytes as in real files."""
    blob = b""
    for entries in containers:
        blob += fatbin_container(entries)
        blob += b"\0" * (-len(blob) % 8)
    return blob


def elf_with_sections(sections: dict) -> bytes:
    """An ELF64 little-endian file with ``sections`` (``{name: bytes}``), a .shstrtab and a null section."""
    names = ["", *sections, ".shstrtab"]
    strtab = b"\0".join(n.encode() for n in names) + b"\0"
    offsets = {}
    position = 64
    blobs = b""
    for name, data in sections.items():
        offsets[name] = (position, len(data))
        blobs += data
        position += len(data)
    offsets[".shstrtab"] = (position, len(strtab))
    blobs += strtab
    position += len(strtab)
    position += -position % 8
    blobs += b"\0" * (position - 64 - len(blobs))
    shoff = position
    table = b"\0" * 64  # the null section
    for name in names[1:]:
        name_offset = strtab.index(name.encode() + b"\0", 1)
        offset, size = offsets[name]
        section_type = 3 if name == ".shstrtab" else 1
        table += struct.pack("<IIQQQQIIQQ", name_offset, section_type, 0, 0, offset, size, 0, 0, 8, 0)
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\0" * 8
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, len(names), len(names) - 1)
    return header + blobs + table


def shared_object(containers, extra_sections=None) -> bytes:
    """A shared object whose ``.nv_fatbin`` holds ``containers`` (lists of ``(kind, sm, size)``)."""
    sections = {".text": b"\x90" * 32}
    sections.update(extra_sections or {})
    sections[".nv_fatbin"] = fatbin_section(containers)
    return elf_with_sections(sections)
