"""requirements: the one parser of Requires-Dist lines, PEP 440 versions and PEP 508 markers."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._runtime.requirements import (
    LINUX_X86_64,
    RequirementError,
    active_requirements,
    evaluate_marker,
    metadata_identity,
    metadata_requires,
    parse_requirement,
    parse_version,
    satisfies,
)

ENV = dict(LINUX_X86_64, python_version="3.12", python_full_version="3.12.3")


@pytest.mark.parametrize(
    ("line", "name", "extras", "specifiers", "marker"),
    [
        ("torch==2.11.0", "torch", [], [("==", "2.11.0")], ""),
        ("flashinfer_python[cu13]==0.7.2", "flashinfer_python", ["cu13"], [("==", "0.7.2")], ""),
        ("kernels<0.15,>=0.14.1", "kernels", [], [("<", "0.15"), (">=", "0.14.1")], ""),
        (
            "apache-tvm-ffi!=0.1.8,!=0.1.8.post0,<0.2,>=0.1.6",
            "apache-tvm-ffi",
            [],
            [("!=", "0.1.8"), ("!=", "0.1.8.post0"), ("<", "0.2"), (">=", "0.1.6")],
            "",
        ),
        ('addict==2.4.0; extra == "diffusion"', "addict", [], [("==", "2.4.0")], 'extra == "diffusion"'),
        ("aiohttp", "aiohttp", [], [], ""),
        ("foo (>=1.0)", "foo", [], [(">=", "1.0")], ""),
        ("bar @ https://example.invalid/bar.whl", "bar", [], [], ""),
    ],
)
def test_parse_requirement(line, name, extras, specifiers, marker):
    parsed = parse_requirement(line)
    assert (parsed["name"], parsed["extras"], parsed["specifiers"], parsed["marker"]) == (
        name,
        extras,
        specifiers,
        marker,
    )


def test_parse_requirement_normalises_the_key():
    assert parse_requirement("Sglang_Kernel==0.4.5")["key"] == "sglang-kernel"


def test_unreadable_requirement_is_refused():
    with pytest.raises(RequirementError):
        parse_requirement("torch=2.11")


@pytest.mark.parametrize(
    ("version", "specifiers", "expected"),
    [
        ("2.11.0", [("==", "2.11.0")], True),
        ("2.11.0+cu130", [("==", "2.11.0")], True),  # a local label is ignored by a public pin
        ("2.11.0", [("==", "2.14.1")], False),
        ("2.11", [("==", "2.11.0")], True),  # trailing zeros
        ("2.11.0+cu130", [("==", "2.11.0+cu128")], False),
        ("0.6.15.post1", [("==", "0.6.15.post1")], True),
        ("0.6.15.post1", [("==", "0.6.15")], False),
        ("0.1.11", [("!=", "0.1.8"), ("!=", "0.1.8.post0"), ("<", "0.2"), (">=", "0.1.6")], True),
        ("0.1.8.post0", [("!=", "0.1.8"), ("!=", "0.1.8.post0"), ("<", "0.2"), (">=", "0.1.6")], False),
        ("0.2.0", [("<", "0.2")], False),
        ("2.13.0", [("==", "2.13.*")], True),
        ("2.14.1", [("==", "2.13.*")], False),
        ("1.4.2", [("~=", "1.4")], True),
        ("2.0", [("~=", "1.4")], False),
        ("1.0rc1", [(">=", "1.0")], False),
        ("1.0.dev1", [("<", "1.0a1")], True),
        ("1.0.post1", [(">", "1.0")], True),
        ("1.0", [], True),
    ],
)
def test_satisfies(version, specifiers, expected):
    assert satisfies(version, specifiers) is expected


def test_version_order_follows_pep_440():
    ordered = ["1.0.dev0", "1.0a1", "1.0b2", "1.0rc1", "1.0", "1.0.post1", "1.1", "1!0.1"]
    assert sorted(ordered, key=parse_version) == ordered


def test_not_a_version_is_refused():
    with pytest.raises(RequirementError):
        parse_version("latest")


@pytest.mark.parametrize(
    ("marker", "expected"),
    [
        ('sys_platform == "linux"', True),
        (
            'sys_platform != "linux" or (sys_platform == "linux" and platform_machine != "aarch64"'
            ' and platform_machine != "arm64")',
            True,
        ),
        ('sys_platform == "linux" and (platform_machine == "aarch64" or platform_machine == "arm64")', False),
        ('python_version >= "3.10"', True),
        ('python_version < "3.9"', False),
        ('"3.1" < python_version', True),  # a version compare, not a string compare ("3.12" > "3.1")
        ('extra == "diffusion"', False),
        ('platform_machine in "x86_64 amd64"', True),
        ('platform_machine not in "x86_64 amd64"', False),
        ("", True),
    ],
)
def test_evaluate_marker(marker, expected):
    assert evaluate_marker(marker, ENV) is expected


def test_unreadable_marker_is_refused():
    with pytest.raises(RequirementError):
        evaluate_marker('sys_platform == "linux" and', ENV)


METADATA = """Metadata-Version: 2.4
Name: sglang
Version: 0.5.23
Requires-Dist: torch==2.14.1
Requires-Dist: sglang-kernel==0.4.10
Requires-Dist: flashinfer_python[cu13]==0.7.2
Requires-Dist: av==16.1.0; sys_platform == "linux" and (platform_machine == "aarch64")
Requires-Dist: diffusers==0.37.0; extra == "diffusion"

Long description with Requires-Dist: fake==1 in the body.
"""


def test_metadata_requires_and_identity_read_the_headers_only():
    assert metadata_requires(METADATA) == [
        "torch==2.14.1",
        "sglang-kernel==0.4.10",
        "flashinfer_python[cu13]==0.7.2",
        'av==16.1.0; sys_platform == "linux" and (platform_machine == "aarch64")',
        'diffusers==0.37.0; extra == "diffusion"',
    ]
    assert metadata_identity(METADATA) == ("sglang", "0.5.23")


def test_active_requirements_apply_markers_and_requested_extras():
    lines = metadata_requires(METADATA)
    assert [r["key"] for r in active_requirements(lines, ENV)] == ["torch", "sglang-kernel", "flashinfer-python"]
    with_extra = active_requirements(lines, ENV, extras=["diffusion"])
    assert [r["key"] for r in with_extra][-1] == "diffusers"
