"""The checkout is a runnable playbook project with an address-free inventory."""

import ipaddress
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
ENV = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}


def _ansible(tool, *args):
    proc = subprocess.run(
        [str(BIN / tool), *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode:
        pytest.fail(f"{tool} {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def test_inventory_lists_field_hosts_and_lab_group():
    graph = _ansible("ansible-inventory", "--graph")
    for name in ("ct200", "ct129", "@lab:", "@gpu:"):
        assert name in graph, graph


def test_field_hosts_carry_their_report_facts():
    inv = json.loads(_ansible("ansible-inventory", "--list"))
    ct200 = inv["_meta"]["hostvars"]["ct200"]
    ct129 = inv["_meta"]["hostvars"]["ct129"]
    assert ct200["sglang_service_port"] == 30001
    assert ct200["sglang_preflight_gpus"] == ["1"]
    assert ct129["sglang_preflight_excluded_gpus"] == ["1"]
    assert ct129["sglang_service_tp_size"] == 2


def test_field_hosts_have_no_address_in_the_repository():
    inv = json.loads(_ansible("ansible-inventory", "--list"))
    for host in ("ct200", "ct129"):
        assert "ansible_host" not in inv["_meta"]["hostvars"][host], f"{host} has an address in the repo"


def test_deploy_entry_point_passes_syntax_check_for_ct200():
    out = _ansible("ansible-playbook", "deploy.yml", "-l", "ct200", "--syntax-check")
    assert "playbook: deploy.yml" in out


IPV4 = re.compile(r"(?<![\d.])(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})(?![\d.])")
# A four-part package version is not an address: after `version: "`, `==`, a package name and
# `-`, in the rows of a version table (package, expected, actual), or in JSON "actual"/"expected".
# podman's default network, and the documentation ranges of RFC 5737 (never routed anywhere).
NEVER_ROUTED = [ipaddress.ip_network(n) for n in ("10.88.0.0/16", "192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24")]
VERSION_BEFORE = re.compile(
    r"(version\W{0,4}|==|-|\"(actual|expected|nvidia-[\w-]+)\": \"|(^|\n|\\n)[a-z][\w.+-]*\s+(\S+\s+)?)$"
)


def _tracked_text_files():
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in files:
        path = REPO / name
        if path.is_file() and not path.is_symlink() and path.suffix not in {".whl", ".gz", ".pyc"}:
            try:
                yield name, path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue


def test_no_private_or_public_address_is_named_in_the_repository():
    offenders = []
    for name, text in _tracked_text_files():
        for match in IPV4.finditer(text):
            if VERSION_BEFORE.search(text[max(0, match.start() - 60) : match.start()]):
                continue
            try:
                addr = ipaddress.ip_address(match.group(1))
            except ValueError:
                continue  # version strings such as 1.2.3.400
            if addr.is_loopback or addr.is_unspecified or any(addr in net for net in NEVER_ROUTED):
                continue
            if addr.is_private or addr.is_global:
                offenders.append(f"{name}: {addr}")
    assert not offenders, offenders


def test_variables_reference_matches_the_argument_specs():
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts/gen-variables-doc"), "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
