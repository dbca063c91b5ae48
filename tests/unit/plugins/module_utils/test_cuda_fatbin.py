"""The .nv_fatbin reader over ELF files the test builds (tests/support/cuda_elf.py), and real ones where present."""

import io
import pathlib

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils import cuda_fatbin
from ansible_collections.specdec.sglang.plugins.module_utils.cuda_fatbin import (
    FatbinError,
    describe,
    elf_sections,
    read_shared_object,
    runs_on,
)
from support.cuda_elf import PTX, SASS, elf_with_sections, fatbin_section, shared_object

REPO = pathlib.Path(__file__).resolve().parents[4]


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
    assert summary == {"containers": 3, "entries": 18, "sass": [80, 89, 90, 100, 103, 120], "ptx": []}


def test_ptx_and_sass_entries_are_told_apart():
    summary = read(shared_object([[(SASS, 80, 24), (PTX, 90, 17)], [(SASS, 86, 5)]]))
    assert (summary["sass"], summary["ptx"]) == ([80, 86], [90])


def test_a_library_without_fatbin_section_carries_no_gpu_code():
    assert read(elf_with_sections({".text": b"\x90"})) == {"containers": 0, "entries": 0, "sass": [], "ptx": []}


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


def test_describe_names_what_a_library_holds():
    assert describe([80, 86, 90], []) == "SASS sm_80, sm_86, sm_90; no PTX"
    assert describe([], [120]) == "no SASS; PTX compute_120"


def test_real_sgl_kernel_libraries_under_the_cache_when_present():
    """Real sglang-kernel .so files only where a run already unpacked them (no 300 MB download here)."""
    found = sorted(REPO.glob(".cache/**/sgl_kernel/sm100/common_ops*.so"))
    if not found:
        pytest.skip("no real sgl_kernel .so under .cache (only stub wheels): the data file's facts stand unchecked")
    with found[0].open("rb") as stream:
        summary = cuda_fatbin.read_shared_object(stream)
    assert 120 in summary["sass"]
