"""docs/deploy-walkthrough.md names only files, modules and filters that exist (it follows the tree)."""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "deploy-walkthrough.md"
MODULES = {p.stem for p in (REPO / "plugins" / "modules").glob("*.py")}
FILTERS = {p.stem for p in (REPO / "plugins" / "filter").glob("*.py")}
# Variables and set_stats keys the page names (not modules).
VARIABLE_PREFIXES = (
    "sglang_service_",
    "sglang_servce_",
    "sglang_runtime_",
    "sglang_preflight_",
    "sglang_patches_",
    "sglang_deploy",
)
UTILS = {p.stem for p in (REPO / "plugins" / "module_utils").glob("_*/*.py")}


def named(text):
    """(kind, name) of every module_utils file, task file and module the page names in backticks."""
    found = []
    for token in re.findall(r"`([^`]+)`", text):
        if token.startswith("tests/"):
            continue  # a test file, checked by the path rule below
        for name in re.findall(r"(?:module_utils/)?([a-z_]+)\.py\b", token):
            found.append(("module_utils", name))
        if re.fullmatch(
            r"(nvidia_gpu_facts|sglang_[a-z_]+|deploy_plan|validate_inputs)", token
        ) and not token.startswith(VARIABLE_PREFIXES):
            found.append(("module", token))
        match = re.fullmatch(r"filter `?([a-z_]+)`?", token)
        if match:
            found.append(("filter", match.group(1)))
    return found


def missing(text):
    out = []
    for kind, name in named(text):
        if kind == "module_utils" and name not in UTILS:
            out.append(f"module_utils/{name}.py")
        if kind == "module" and name not in MODULES and not (REPO / "roles" / name).is_dir():
            out.append(f"module {name}")
    for name in re.findall(r"filter `([a-z_]+)`", text):
        if name not in FILTERS:
            out.append(f"filter {name}")
    for path in re.findall(r"`((?:roles|playbooks|plugins|tests)/[^`]+)`", text):
        if not (REPO / path).exists():
            out.append(path)
    return out


def test_the_walkthrough_names_only_what_exists():
    assert missing(PAGE.read_text()) == []


def test_the_check_finds_a_name_that_does_not_exist():
    text = "`module_utils/no_such_thing.py`, `sglang_no_such_module`, filter `no_such_filter`, `roles/no_such_role`"
    assert missing(text) == [
        "module_utils/no_such_thing.py",
        "module sglang_no_such_module",
        "filter no_such_filter",
        "roles/no_such_role",
    ]
