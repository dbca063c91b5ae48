"""The .nv_fatbin reader over ELF files the test builds (tests/support/cuda_elf.py), over the bytes it reads
from sglang-kernel 0.4.5's real libraries (fatbin_reads/, cut by fatbin_reads/cut.py), and real ones where present."""

import base64
import gzip
import io
import json
import pathlib
import struct

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._gpu import cuda_fatbin
from ansible_collections.specdec.sglang.plugins.module_utils._gpu.cuda_fatbin import (
    FatbinError,
    describe,
    elf_sections,
    read_shared_object,
    runs_on,
)
from support.cuda_elf import PTX, SASS, elf_with_sections, fatbin_section, shared_object

REPO = pathlib.Path(__file__).resolve().parents[5]
CUTS = pathlib.Path(__file__).resolve().parent / "fatbin_reads"
NONE_ARCH_SPECIFIC = {"sass_arch_specific": [], "ptx_arch_specific": []}


def read(data: bytes) -> dict:
    return read_shared_object(io.BytesIO(data))


def test_sections_are_named_from_the_section_string_table():
    data = elf_with_sections({".text": b"abc", ".nv_fatbin": b"\0" * 16, ".rodata": b"x"})
    sections = elf_sections(io.BytesIO(data))
    assert set(sections) == {"", ".text", ".nv_fatbin", ".rodata", ".shstrtab"}
    offset, size = sections[".rodata"]
    assert (size, data[offset : offset + size]) == (1, b"x")


def test_an_sgl_kernel_like_library_lists_its_sass_per_sm_across_containers():
    containers = [[(SASS, sm, 40) for sm in (80, 89, 90, 100, 103, 120)] for _ in range(3)]
    summary = read(shared_object(containers))
    assert summary == {
        "containers": 3,
        "entries": 18,
        "sass": [80, 89, 90, 100, 103, 120],
        "ptx": [],
        **NONE_ARCH_SPECIFIC,
    }


def test_ptx_and_sass_entries_are_told_apart():
    summary = read(shared_object([[(SASS, 80, 24), (PTX, 90, 17)], [(SASS, 86, 5)]]))
    assert (summary["sass"], summary["ptx"]) == ([80, 86], [90])


def test_a_library_without_fatbin_section_carries_no_gpu_code():
    assert read(elf_with_sections({".text": b"\x90"})) == {
        "containers": 0,
        "entries": 0,
        "sass": [],
        "ptx": [],
        **NONE_ARCH_SPECIFIC,
    }


def test_not_an_elf_file_and_a_truncated_container_are_errors():
    with pytest.raises(FatbinError, match="not an ELF file"):
        read(b"PK\x03\x04" + b"\0" * 100)
    section = fatbin_section([[(SASS, 90, 64)]])
    broken = elf_with_sections({".nv_fatbin": section[:-40]})
    with pytest.raises(FatbinError, match="runs past"):
        read(broken)


def test_garbage_in_the_section_is_an_error_not_an_empty_answer():
    with pytest.raises(FatbinError, match="no fatbin magic"):
        read(elf_with_sections({".nv_fatbin": b"\x01\x02\x03\x04" * 8}))


@pytest.mark.parametrize(
    ("capability", "sass", "ptx", "expected"),
    [
        ("12.0", [80, 86, 90], [], None),  # FA3's flash_ops on Blackwell: no kernel image
        ("12.0", [80, 89, 90, 100, 103, 120], [], "sass sm_120"),
        ("8.6", [80, 90], [], "sass sm_80"),  # same major, lower minor: binary compatible
        ("10.0", [90], [90], "ptx compute_90 (JIT by the driver)"),
        ("9.0", [100, 120], [100], None),  # PTX only compiles forward
        ("12.0", [100, 103], [], None),  # sm_100 SASS does not run on 12.0
    ],
)
def test_runs_on(capability, sass, ptx, expected):
    assert runs_on(capability, sass, ptx) == expected


@pytest.mark.parametrize(
    ("capability", "sass", "ptx", "arch_specific", "expected"),
    [
        ("12.0", [90, 120], [], ([120], []), "sass sm_120a"),  # sm100/common_ops on the RTX PRO 6000
        ("12.1", [90, 120], [], ([120], []), None),  # sm_120a is no code for 12.1 (the family rule is for sm_120)
        ("12.1", [120], [], ([], []), "sass sm_120"),
        ("9.0", [80, 90], [], ([90], []), "sass sm_90a"),
        ("12.0", [90], [90], ([90], [90]), None),  # compute_90a PTX compiles for 9.0 only
        ("9.0", [], [90], ([], [90]), "ptx compute_90a (JIT by the driver)"),
    ],
)
def test_arch_specific_code_runs_on_its_exact_capability_only(capability, sass, ptx, arch_specific, expected):
    assert runs_on(capability, sass, ptx, *arch_specific) == expected


def test_describe_names_what_a_library_holds():
    assert describe([80, 86, 90], []) == "SASS sm_80, sm_86, sm_90; no PTX"
    assert describe([], [120]) == "no SASS; PTX compute_120"
    assert describe([80, 90, 120], [], [120]) == "SASS sm_80, sm_90, sm_120a; no PTX"


def with_flags(section: bytes, flags_by_sm: dict) -> bytes:
    """``section`` (tests/support/cuda_elf.py's, 64-byte entry headers) with entry flags set per SM at offset 40."""
    data, position = bytearray(section), 0
    while position + 16 <= len(data):
        _magic, _version, header, size = struct.unpack_from("<IHHQ", data, position)
        entry, end = position + header, position + header + size
        while entry < end:
            _kind, _ev, entry_header, payload = struct.unpack_from("<HHIQ", data, entry)
            (sm,) = struct.unpack_from("<I", data, entry + 28)
            struct.pack_into("<Q", data, entry + 40, flags_by_sm.get(sm, 0))
            entry += entry_header + payload
        position = end + (-end % 8)
    return bytes(data)


def test_an_sm_held_only_as_arch_specific_in_some_container_is_arch_specific():
    # container 0: sm_90 and sm_90a (as sgl_kernel's common_ops), sm_120a; container 1: sm_100f.
    section = fatbin_section([[(SASS, 90, 8), (SASS, 120, 8)], [(SASS, 100, 8)]])
    flagged = with_flags(section, {120: cuda_fatbin.ARCH_SPECIFIC, 100: cuda_fatbin.FAMILY_SPECIFIC})
    summary = read(elf_with_sections({".nv_fatbin": flagged}))
    assert (summary["sass"], summary["sass_arch_specific"]) == ([90, 100, 120], [120])
    entries = cuda_fatbin.fatbin_entries(io.BytesIO(flagged))
    assert [(e["sm"], e["variant"]) for e in entries] == [(90, ""), (120, "a"), (100, "f")]


class Replay(io.RawIOBase):
    """The bytes a cut recorded at their offsets; a read anywhere else fails the test."""

    def __init__(self, cut):
        self.size = cut["file_size"]
        self.extents = [(offset, base64.b64decode(data)) for offset, data in cut["reads"]]
        self.position = 0

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        self.position = {0: offset, 1: self.position + offset, 2: self.size + offset}[whence]
        return self.position

    def tell(self):
        return self.position

    def read(self, size=-1):
        size = self.size - self.position if size < 0 else min(size, self.size - self.position)
        for start, data in self.extents:
            if start <= self.position and self.position + size <= start + len(data):
                chunk = data[self.position - start : self.position - start + size]
                self.position += size
                return chunk
        raise AssertionError(f"read of {size} bytes at {self.position} is outside the cut (run fatbin_reads/cut.py)")


def cut(member: str) -> dict:
    return json.loads(gzip.decompress((CUTS / (member.replace("/", "-") + ".reads.json.gz")).read_bytes()))


@pytest.mark.parametrize(
    "member",
    ["sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm90/common_ops.abi3.so", "sgl_kernel/flash_ops.abi3.so"],
)
def test_the_reader_gives_the_recorded_answer_from_the_real_bytes_it_reads(member):
    recorded = cut(member)
    assert recorded["wheel_sha256"] == "5927a14dfff92ced8b1f7c7d5844144bc574ec58e604d4fd53e6f53c709003a8"  # PyPI's
    assert read_shared_object(Replay(recorded)) == recorded["answer"]


def test_sglang_kernel_0_4_5_sm100_common_ops_holds_sm_120a_and_runs_on_12_0_only():
    answer = read_shared_object(Replay(cut("sgl_kernel/sm100/common_ops.abi3.so")))
    assert answer["containers"] == 51 and answer["entries"] == 357  # cuobjdump --list-elf: 357 cubins
    assert answer["sass"] == [80, 89, 90, 100, 103, 120] and answer["ptx"] == []
    assert answer["sass_arch_specific"] == [100, 103, 120]
    assert runs_on("12.0", answer["sass"], answer["ptx"], answer["sass_arch_specific"]) == "sass sm_120a"
    assert runs_on("12.1", answer["sass"], answer["ptx"], answer["sass_arch_specific"]) is None


def test_sglang_kernel_0_4_5_flash_ops_holds_sm_80_86_90_only_so_fa3_has_no_code_for_12_0():
    answer = read_shared_object(Replay(cut("sgl_kernel/flash_ops.abi3.so")))
    assert (answer["sass"], answer["ptx"], answer["sass_arch_specific"]) == ([80, 86, 90], [], [90])
    assert runs_on("12.0", answer["sass"], answer["ptx"], answer["sass_arch_specific"]) is None
    assert runs_on("9.0", answer["sass"], answer["ptx"], answer["sass_arch_specific"]) == "sass sm_90a"
    assert describe(answer["sass"], answer["ptx"], answer["sass_arch_specific"]) == "SASS sm_80, sm_86, sm_90a; no PTX"


def test_real_sgl_kernel_libraries_under_the_cache_when_present():
    """Real sglang-kernel .so files only where a run already unpacked them (no 300 MB download here)."""
    found = sorted(REPO.glob(".cache/**/sgl_kernel/sm100/common_ops*.so"))
    if not found:
        pytest.skip("no real sgl_kernel .so under .cache (only stub wheels): the data file's facts stand unchecked")
    with found[0].open("rb") as stream:
        summary = cuda_fatbin.read_shared_object(stream)
    assert 120 in summary["sass"]
