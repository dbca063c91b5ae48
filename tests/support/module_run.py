# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a collection module's main() in-process, as Ansible would, and return its JSON result."""

import json

import pytest
from ansible.module_utils import basic
from ansible.module_utils.common.text.converters import to_bytes


def set_module_args(monkeypatch, params):
    """Make ``params`` the module's arguments (``_ansible_check_mode`` defaults to False)."""
    args = {"_ansible_check_mode": False, **params}
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", to_bytes(json.dumps({"ANSIBLE_MODULE_ARGS": args})))
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy", raising=False)


def run_main(main, capsys):
    """Call ``main``, which must exit as a module does, and return the result it printed."""
    with pytest.raises(SystemExit):
        main()
    return json.loads(capsys.readouterr().out)
