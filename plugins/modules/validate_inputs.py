#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate_inputs
short_description: Check every input of a playbook or a role on the controller, all errors at once
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - Templates the play's variables as the controller sees them and hands them to one pure function,
    C(check_inputs) of C(plugins/module_utils/_plan/validation_rules.py), which holds every rule as data - each
    variable's type, choices and default from its role's C(meta/argument_specs.yml), ranges, patterns and paths
    (C(ROLE_RULES)), the checks across variables and across roles (C(CROSS_RULES)), each playbook's own
    variables (C(PLAYS)). It fails with every error at once. No host is contacted.
  - A string is never read as a list or a dict. Ansible's own argument spec validation splits C("1,2") into a
    list, and a role reading the string would see C("1") and C(","); here it is refused, with the C(-e) JSON that
    passes a list. Integers, floats and booleans given as strings (C(-e name=value)) are accepted.
  - With O(play), a role-prefixed variable that no role reads, and a C(sglang_*) variable whose prefix is a typo
    of a role's or a playbook's (C(sglang_servce_port)), are refused naming the closest variable.
  - A runtime, algorithm and attention backend whose combination has no GPU record
    (C(roles/sglang_runtime/files/known_runtimes.yml)) is refused unless C(sglang_runtime_allow_unproven=true);
    the message says where it was proven (a GPU record, the lab only, nowhere).
  - Each message names the variable, the value found (never a secret's) and the values allowed.
options:
  play:
    description:
      - The entry playbook whose inputs are checked (its own variables, the variables of its roles, unknown
        names). Without O(play) and O(roles), the variables of the role the task belongs to are checked.
    type: str
    choices: [deploy, rollback, stop, diagnose]
  roles:
    description:
      - The roles whose variables and checks apply (default those of O(play), else the calling role). With
        C(sglang_patches), each directory of C(sglang_patches_sets) is read and validated as a patch set; the
        parsed sets are returned in RV(results).
    type: list
    elements: str
attributes:
  check_mode:
    description: Runs the same in check mode; it changes nothing.
    support: full
  action:
    description: An action plugin; it needs no connection to the host.
    support: full
notes:
  - An action plugin; it needs no connection to the host.
"""

EXAMPLES = r"""
- name: Check every input of the deploy (no host is contacted)
  specdec.sglang.validate_inputs:
    play: deploy

- name: Check this role's variables when the role runs alone
  specdec.sglang.validate_inputs: {}
"""

RETURN = r"""
checked:
  description: The variables that were set and checked.
  returned: always
  type: list
  elements: str
  sample: [sglang_service_port, sglang_service_tp_size]
deferred:
  description: Variables whose value depends on a fact set later in the deploy (checked when that is set).
  returned: always
  type: list
  elements: str
  sample: [sglang_patches_release_dir]
errors:
  description: One message per invalid variable, naming it, the value found and the values allowed.
  returned: always
  type: list
  elements: str
  sample: ['sglang_service_port="80": must be in 1024-65535']
results:
  description:
    - With C(sglang_patches) among the roles, one entry per patch set of C(sglang_patches_sets), for the tasks
      that apply them - C(item) (the directory), C(name), C(sglang_version), C(manifest) and C(files).
  returned: always
  type: list
  elements: dict
"""
