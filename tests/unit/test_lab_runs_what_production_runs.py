"""The lab runs what a production host runs: nothing of ours changes how Python or Ansible behave there.

Lab hosts are Debian containers with systemd and OpenSSH's server (lab/image/recipe), reached over SSH
as a GPU host is: OpenSSH's client, ControlPersist, ansible.cfg's pipelining; only the wire is ``podman exec``
running the container's own ``sshd -i`` (ssh's ProxyCommand). No file the lab, molecule or the
inventory carries may install an import hook into a host's Python (a site / user customize module, a
``.pth`` file, a loader or an import-path hook), ship a connection plugin of its own, or point Ansible at
one. ``hooks_in`` finds them; the tests below run it on the repository and prove on a small tree that it
finds each kind.

The hook names are built from parts so that a ``git grep`` for them finds no such hook in this
repository either: the device harness runs what the deploy renders too (since 2026-12-05 its bundle brings
sglang's pinned transformers instead of a start-up shim, and its one instrument, the accept-stats counter,
is an sglang plugin loaded through sglang's own entry points). Only the device records, which keep what
earlier runs had, still name the shim.
"""

import configparser
import pathlib
import shlex
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
# What may reach or shape a lab host: the lab itself (image recipe, lab tool, the simulator that runs
# there), molecule's scenarios and shared playbooks, molecule's configuration, the inventory, ansible.cfg.
SCANNED = ("lab", "molecule", ".config/molecule", "inventory", "ansible.cfg")
HOOK_FILES = ("site" + "customize.py", "user" + "customize.py")
HOOK_WORDS = (
    "site" + "customize",
    "user" + "customize",
    "zip" + "import",
    "Source" + "Loader",
    "sys." + "meta_path",
    "sys." + "path_hooks",
)
# Settings that make Ansible load a connection plugin from a directory of ours.
PLUGIN_SETTINGS = ("ANSIBLE_CONNECTION_PLUGINS", "connection_plugins")
PLUGIN_DIRS = ("connection", "connection_plugins")
# The connection a lab host is reached with: a GPU host's.
LAB_CONNECTION = "ssh"


def _files(root, scanned):
    for name in scanned:
        path = root / name
        if path.is_file():
            yield path
        elif path.is_dir():
            yield from (p for p in sorted(path.rglob("*")) if p.is_file() and "__pycache__" not in p.parts)


def hooks_in(root, scanned=SCANNED):
    """Every file under ``scanned`` (paths relative to ``root``) that would change a lab host's Python or
    Ansible: as ``(relative path, what)`` pairs, empty when there is none."""
    found = []
    for path in _files(root, scanned):
        rel = path.relative_to(root).as_posix()
        if path.name in HOOK_FILES or path.suffix == ".pth":
            found.append((rel, "an import hook file (%s)" % path.name))
        if path.suffix == ".py" and set(PLUGIN_DIRS) & set(path.relative_to(root).parts[:-1]):
            found.append((rel, "a connection plugin of our own"))
        try:
            text = path.read_text(errors="strict")
        except (UnicodeDecodeError, OSError):
            continue  # a binary file is no hook text
        for word in HOOK_WORDS + PLUGIN_SETTINGS:
            if word in text:
                found.append((rel, "mentions %s" % word))
    return found


class _Loader(yaml.SafeLoader):
    """YAML as Ansible writes it: a tagged value (``!unsafe``, ``!vault``) is read as its plain value."""


_Loader.add_multi_constructor(
    "!", lambda loader, _suffix, node: loader.construct_scalar(node) if isinstance(node, yaml.ScalarNode) else None
)


def connections_in(root, scanned=SCANNED):
    """Every ``ansible_connection`` value set in a YAML file under ``scanned``, as ``(path, value)``."""
    found = []

    def walk(node, rel):
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "ansible_connection":
                    found.append((rel, value))
                walk(value, rel)
        elif isinstance(node, list):
            for item in node:
                walk(item, rel)

    for path in _files(root, scanned):
        if path.suffix in (".yml", ".yaml"):
            for doc in yaml.load_all(path.read_text(), Loader=_Loader):
                walk(doc, path.relative_to(root).as_posix())
    return found


def test_no_lab_or_molecule_file_changes_a_lab_hosts_python_or_ansible():
    assert hooks_in(REPO) == []


def test_no_tracked_file_carries_a_start_up_hook_or_names_one():
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout.decode()
    files = [
        f
        for f in tracked.split("\0")
        if f and not f.startswith("tests/device/records/") and not (REPO / f).is_symlink() and (REPO / f).is_file()
    ]
    assert len(files) > 500, "git ls-files listed %d files" % len(files)
    # sys.meta_path / path_hooks may be named outside the lab (scripts/compile-triton-sm120 loads the kernels from
    # the sglang wheel in its own process, on a CPU); hook files and the start-up hook names may not, anywhere.
    found = [(rel, what) for rel, what in hooks_in(REPO, files) if "mentions sys." not in what]
    mine = pathlib.Path(__file__).relative_to(REPO).as_posix()  # names the settings it looks for
    assert [(rel, what) for rel, what in found if rel != mine] == []


def test_lab_hosts_are_reached_over_ssh_only():
    found = connections_in(REPO)
    # the lab inventory, and molecule's override of the `podman` its driver writes on every host
    assert {path for path, value in found} >= {"inventory/group_vars/lab/main.yml", ".config/molecule/config.yml"}
    assert [c for c in found if c[1] != LAB_CONNECTION] == []


def _ini(text):
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    return parser


def test_molecule_pipelines_as_the_projects_ansible_cfg_does():
    project = _ini((REPO / "ansible.cfg").read_text())
    molecule = yaml.safe_load((REPO / ".config/molecule/config.yml").read_text())["provisioner"]
    assert project.getboolean("ssh_connection", "pipelining") is True
    assert molecule["config_options"]["ssh_connection"]["pipelining"] is True
    assert molecule["connection_options"] == {"ansible_connection": LAB_CONNECTION}


def test_the_wire_is_the_containers_own_sshd_and_the_key_is_the_lab_tools():
    lab_vars = yaml.safe_load((REPO / "inventory/group_vars/lab/main.yml").read_text())
    args = shlex.split(lab_vars["ansible_ssh_common_args"])
    options = dict(a.split("=", 1) for a in args if a != "-o")
    # ProxyCommand: podman exec into the host (ssh's %h is ansible_host, the container), Debian's sshd in
    # inetd mode; nothing of ours runs there.
    proxy = shlex.split(options["ProxyCommand"])
    assert proxy[:4] == ["podman", "exec", "-i", "%h"] and proxy[4:6] == ["sh", "-c"]
    assert proxy[6].endswith("exec /usr/sbin/sshd -i"), proxy
    assert lab_vars["ansible_user"] == "root"
    # literal values only: testinfra reads the inventory without templating it
    assert "{{" not in lab_vars["ansible_ssh_common_args"]
    tool = (REPO / "lab" / "bin" / "lab").read_text()
    key = options["IdentityFile"].replace("~", "$HOME", 1)
    assert f'ssh_key="{key}"' in tool
    assert "openssh-server" in (REPO / "lab" / "image" / "recipe").read_text().split("include=", 1)[1]


def test_the_lab_image_is_named_by_its_recipe_alone():
    # Nothing but the recipe goes into the image, so nothing but the recipe names it.
    tool = (REPO / "lab" / "bin" / "lab").read_text()
    assert 'sha256sum <"$recipe"' in tool
    assert [p.name for p in (REPO / "lab" / "image").iterdir()] == ["recipe"]


@pytest.mark.parametrize(
    ("path", "text", "what"),
    [
        ("lab/image/" + HOOK_FILES[0], "import os\n", "an import hook file"),
        ("lab/image/cache.pth", "import cache\n", "an import hook file"),
        ("lab/bin/lab", "echo 'import c' >>$rootfs/etc/python3.11/" + HOOK_FILES[0] + "\n", "mentions site"),
        ("lab/image/cache.py", "import " + HOOK_WORDS[2] + "\n", "mentions zip"),
        ("lab/image/cache.py", "class L(importlib.abc." + HOOK_WORDS[3] + "): pass\n", "mentions Source"),
        ("molecule/shared/hook.py", "sys.meta_path.insert(0, Finder())\n", "mentions sys.meta_path"),
        ("lab/connection/podman.py", "from ansible.plugins.connection import ConnectionBase\n", "a connection plugin"),
        ("molecule/x/connection_plugins/fast.py", "pass\n", "a connection plugin"),
        (
            ".config/molecule/config.yml",
            "provisioner:\n  env:\n    ANSIBLE_CONNECTION_PLUGINS: lab\n",
            "mentions ANSIBLE_",
        ),
        ("ansible.cfg", "[defaults]\nconnection_plugins = lab/connection\n", "mentions connection_plugins"),
    ],
)
def test_each_kind_of_hook_is_found(tmp_path, path, text, what):
    target = tmp_path / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    found = hooks_in(tmp_path)
    assert [rel for rel, _ in found] and {rel for rel, _ in found} == {path}
    assert any(w.startswith(what) for _, w in found), found


def test_a_clean_tree_has_no_hook(tmp_path):
    (tmp_path / "lab" / "image").mkdir(parents=True)
    (tmp_path / "lab" / "image" / "recipe").write_text("suite=bookworm\ninclude=systemd,python3\n")
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = inventory/hosts.yml\n")
    assert hooks_in(tmp_path) == []


def test_another_connection_in_a_molecule_host_var_is_found(tmp_path):
    hv = tmp_path / "molecule" / "default" / "host_vars" / "lab1.yml"
    hv.parent.mkdir(parents=True)
    hv.write_text("---\nansible_connection: specdec.lab.podman\n")
    assert connections_in(tmp_path) == [("molecule/default/host_vars/lab1.yml", "specdec.lab.podman")]
