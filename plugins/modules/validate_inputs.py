#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: validate_inputs
short_description: Check a role's variables strictly (types, choices, ranges, paths) on the controller
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - Checks every variable of the calling role's argument spec (C(meta/argument_specs.yml), entry point
    O(entry_point)) that is set, then the role's extra O(rules). Runs on the controller; no host is contacted.
  - A string is never read as a list or a dict. Ansible's own argument spec validation splits C("1,2") into a
    list, and a role reading the string would see C("1") and C(","); here it is refused, with the C(-e) JSON that
    passes a list. Integers, floats and booleans given as strings (C(-e name=value)) are accepted.
  - Each message names the variable, the value found and the values allowed.
  - The checks live in C(plugins/module_utils/validation.py).
options:
  rules:
    description:
      - Extra checks per variable. Keys C(min), C(max) (numbers, or each list element), C(pattern) and C(means)
        (a regex and its description), C(abs_path) and C(allow_empty), C(non_empty), C(unique) (lists),
        C(keys), C(required_keys), C(key_pattern), C(keys_not_in), C(value_pattern) and C(value_means) (dicts),
        C(batch_size) (Ansible's C(serial), a count, a percentage or a list of those), C(envelopes) (a dict of
        memory envelopes, C(sglang_service_envelopes), each error naming the envelope, the field and the rule broken).
    type: dict
    default: {}
  specs:
    description:
      - Argument specs of variables that no role owns (play-level variables such as C(sglang_deploy_serial)),
        in the format of C(meta/argument_specs.yml) options. When given, the role's argument spec is not read.
    type: dict
  entry_point:
    description: Entry point of the role's argument spec whose options are checked.
    type: str
    default: main
  unknown_prefixes:
    description:
      - Instead of checking values, refuse every variable with one of these prefixes that no role documents
        (C(meta/argument_specs.yml)) or sets (C(set_fact), C(register)), naming the closest known variable.
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
- name: Check this role's variables (types, choices, ranges) before anything else
  specdec.sglang.validate_inputs:
    rules:
      sglang_service_port: {min: 1024, max: 65535}
      sglang_service_model_path: {abs_path: true}

- name: Check play-level variables
  specdec.sglang.validate_inputs:
    specs:
      sglang_deploy_serial: {type: raw}
    rules:
      sglang_deploy_serial: {batch_size: true}
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
"""
