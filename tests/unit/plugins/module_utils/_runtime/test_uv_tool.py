# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""uv_tool: uv at a pinned version in its tool venv (the sglang_uv module's steps), without a host."""

import pytest
from ansible_collections.specdec.sglang.plugins.module_utils._runtime import uv_tool

TOOL = "/opt/sglang/tools/uv-0.9.5"
UV = TOOL + "/bin/uv"


class FakeHost:
    """A host whose uv answers ``answers`` in turn (None: no uv there); records what ran."""

    def __init__(self, answers, paths=(), fail=None):
        self.answers = list(answers)
        self.paths = set(paths)
        self.fail = fail or {}
        self.ran, self.removed = [], []

    def run(self, argv, env=None):
        self.ran.append((argv, env))
        if argv == [UV, "--version"]:
            return self.answers.pop(0)
        if "venv" in argv:
            self.paths.update({TOOL, TOOL + "/bin/python"})
            return self.fail.get("venv", (0, "", ""))
        if "pip" in argv:
            self.paths.add(UV)
            return self.fail.get("pip", (0, "", ""))
        raise AssertionError(argv)

    def exists(self, path):
        return path in self.paths

    def remove_tree(self, path):
        self.removed.append(path)
        self.paths = {p for p in self.paths if not p.startswith(path)}


def test_the_pinned_uv_is_left_alone():
    host = FakeHost([(0, "uv 0.9.5 (d5f39331a 2025-10-21)\n", "")], paths={TOOL, UV})
    done = uv_tool.ensure(TOOL, "0.9.5", host)
    assert done == {"changed": False, "removed": False, "created": False, "installed": False, "version": "0.9.5"}
    assert [argv for argv, _ in host.ran] == [[UV, "--version"]]


def test_a_fresh_host_gets_the_venv_and_uv_from_the_index():
    host = FakeHost([(0, "uv 0.9.5\n", "")])
    done = uv_tool.ensure(TOOL, "0.9.5", host, environment={"PIP_INDEX_URL": "https://pypi.example/simple"})
    assert done["changed"] and done["installed"] and not done["removed"]
    assert host.ran[0] == (["python3", "-m", "venv", TOOL], None)
    assert host.ran[1] == (
        [TOOL + "/bin/python", "-m", "pip", "install", "--quiet", "uv==0.9.5"],
        {"PIP_INDEX_URL": "https://pypi.example/simple"},
    )


def test_a_wheel_on_the_host_is_installed_without_an_index():
    assert uv_tool.install_argv(TOOL, "0.9.5", "/opt/sglang/tools/uv-0.9.5-py3-none-any.whl")[-2:] == [
        "--no-index",
        "/opt/sglang/tools/uv-0.9.5-py3-none-any.whl",
    ]


@pytest.mark.parametrize(
    ("paths", "answer"),
    [
        ({TOOL, TOOL + "/bin/python"}, None),  # an interrupted venv: bin/python, no uv
        ({TOOL, UV}, (1, "", "error while loading shared libraries")),  # a partial uv
        ({TOOL, UV}, (0, "uv 0.8.0\n", "")),  # another version
    ],
)
def test_a_tool_venv_without_the_pinned_uv_is_made_again(paths, answer):
    host = FakeHost(([answer] if answer else []) + [(0, "uv 0.9.5\n", "")], paths=paths)
    done = uv_tool.ensure(TOOL, "0.9.5", host, python="/usr/bin/python3.11")
    assert host.removed == [TOOL] and done["removed"] and done["installed"]
    assert ["/usr/bin/python3.11", "-m", "venv", TOOL] in [argv for argv, _ in host.ran]


def test_check_mode_reads_only():
    host = FakeHost([(0, "uv 0.8.0\n", "")], paths={TOOL, UV})
    done = uv_tool.ensure(TOOL, "0.9.5", host, check_mode=True)
    assert done["changed"] and not host.removed and len(host.ran) == 1


def test_a_uv_that_reports_another_version_after_the_install_is_refused():
    """The message the role's former assert gave: '<uv> reports <output>, sglang_runtime_uv_version=<pin>'."""
    host = FakeHost([(0, "uv 0.9.4 (abc 2025-10-01)\n", "")])
    with pytest.raises(uv_tool.UvToolError) as refused:
        uv_tool.ensure(TOOL, "0.9.5", host, variable="sglang_runtime_uv_version")
    assert refused.value.msg == UV + " reports uv 0.9.4 (abc 2025-10-01), sglang_runtime_uv_version=0.9.5"


def test_a_failed_pip_install_says_what_pip_printed():
    host = FakeHost([], fail={"pip": (1, "", "ERROR: No matching distribution found for uv==0.9.5\n")})
    with pytest.raises(uv_tool.UvToolError, match=r"installing uv 0\.9\.5 .* No matching distribution"):
        uv_tool.ensure(TOOL, "0.9.5", host)


@pytest.mark.parametrize(("output", "version"), [("uv 0.9.5 (x 2025)", "0.9.5"), ("uv", ""), ("", "")])
def test_the_reported_version_is_the_second_word(output, version):
    assert uv_tool.reported_version(output) == version
