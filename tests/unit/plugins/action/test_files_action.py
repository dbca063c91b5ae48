"""The sglang_files action on the controller: a src read and a template rendered (Ansible's own template
lookup, with the task's variables) into each file's content; the module gets content only."""

import types

import pytest
from ansible.errors import AnsibleActionFail
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import init_plugin_loader, lookup_loader
from ansible.template import Templar
from ansible_collections.specdec.sglang.plugins.action import sglang_files as action


@pytest.fixture(scope="module", autouse=True)
def plugin_loader():
    """The template lookup is loaded by name, as in a play: the plugin loader set up once."""
    init_plugin_loader()


def run_action(monkeypatch, tmp_path, files, task_vars=None):
    """The action with a real loader and templar; returns the module args it sent."""
    sent = []
    monkeypatch.setattr(ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    loader = DataLoader()
    loader.set_basedir(str(tmp_path))
    plugin = object.__new__(action.ActionModule)
    plugin._task = types.SimpleNamespace(args={"files": files})
    plugin._loader = loader
    plugin._templar = Templar(loader=loader)
    plugin._shared_loader_obj = types.SimpleNamespace(lookup_loader=lookup_loader)
    plugin._find_needle = lambda dirname, needle: str(tmp_path / dirname / needle)

    def execute(module_name, module_args, task_vars):
        sent.append((module_name, module_args))
        return {"changed": False}

    plugin._execute_module = execute
    variables = {"ansible_search_path": [str(tmp_path)], **(task_vars or {})}
    plugin.run(task_vars=variables)
    return sent


def test_src_and_template_become_content_and_directories_stay_without(monkeypatch, tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "code.py").write_text("print('kept as is: {{ not a template }}')\n")
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates" / "unit.j2").write_text("ExecStart={{ launcher }} --port {{ port }}\n")
    sent = run_action(
        monkeypatch,
        tmp_path,
        [
            {"path": "/opt/w", "state": "directory", "mode": "0755"},
            {"path": "/opt/w/code.py", "src": "code.py", "mode": "0644"},
            {"path": "/etc/u.service", "template": "unit.j2", "mode": "0644"},
            {"path": "/etc/plain", "content": "as given\n", "mode": "0600"},
        ],
        {"launcher": "/opt/venv/bin/python3", "port": 30000},
    )
    assert [name for name, _args in sent] == [action.MODULE]
    files = sent[0][1]["files"]
    assert files[0] == {"path": "/opt/w", "state": "directory", "mode": "0755"}
    assert files[1] == {
        "path": "/opt/w/code.py",
        "content": "print('kept as is: {{ not a template }}')\n",
        "mode": "0644",
    }
    assert files[2] == {
        "path": "/etc/u.service",
        "content": "ExecStart=/opt/venv/bin/python3 --port 30000\n",
        "mode": "0644",
    }
    assert files[3]["content"] == "as given\n"


def test_two_sources_for_one_file_are_refused(monkeypatch, tmp_path):
    with pytest.raises(AnsibleActionFail, match="give one of content, src and template"):
        run_action(monkeypatch, tmp_path, [{"path": "/etc/x", "src": "a", "content": "b", "mode": "0644"}])
