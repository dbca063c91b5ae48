# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options every release operation shares: the sglang_release_* modules (action group specdec.sglang.release)."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
notes:
  - One operation on the release record C(<runtime_root>/state/last_good/deploy.json), whose one owner is
    C(plugins/module_utils/_release/release_steps.py) over the pure decisions of
    C(plugins/module_utils/_release/release.py).
    The options every release operation shares are this doc fragment (C(specdec.sglang.release)); the service
    role sets them once for the action group C(specdec.sglang.release) (C(module_defaults)).
seealso:
  - module: specdec.sglang.sglang_readiness
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  runtime_root:
    description:
      - The release tree (C(<root>/releases/<id>), C(<root>/current)); the service role passes C(sglang_runtime_root).
    type: path
    required: true
  state_dir:
    description: Where the record and the last good files live. Default C(<runtime_root>/state/last_good).
    type: path
  unit:
    description: The systemd unit, for example C(sglang.service).
    type: str
    default: sglang.service
  release_id:
    description: The release being deployed (its id under O(runtime_root)/releases).
    type: str
    default: ""
  ladder:
    description: Envelope names, largest first.
    type: list
    elements: str
    default: []
  envelopes:
    description: Envelope settings by name (each ladder name must be a key).
    type: dict
    default: {}
  ladder_failure_classes:
    description: Failure (cause) classes that move the ladder to the next envelope.
    type: list
    elements: str
    default: [oom_mem_fraction, cuda_oom, cuda_graph_capture, mamba_cache_oom]
  files:
    description:
      - The live files of the deploy, by role (C(unit), C(env), C(config)), as paths on the host. Their last
        good copies are kept in O(state_dir) under the same base names.
    type: dict
    default: {}
"""
