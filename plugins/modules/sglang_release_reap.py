#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_release_reap
short_description: End a readiness job an interrupted run left on the host, and remove the async leftovers
version_added: 0.2.0
author: specdec maintainers (@specdec)
description:
  - Ends a readiness job left running on the host by an interrupted run (O(job_file), written by
    M(specdec.sglang.sglang_readiness)) - SIGTERM to its async job's process group, SIGKILL after 5 s, only while
    its pid is still the process that wrote the file - and removes the job's async results file and temporary
    directory. It also removes what earlier runs of the collection left whatever the job file says - the async
    results of a readiness job for O(job_file) that ended before this step, and Ansible's C(ansible-tmp-*)
    directories under the remote temporary directory whose module wrapper runs one of this collection's modules,
    older than 60 s and used by no running process; other tools' files are never touched.
options:
  job_file:
    description: The readiness job file (the O(specdec.sglang.sglang_readiness#module:job_file)).
    type: path
extends_documentation_fragment:
  - specdec.sglang.release
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Says what it would change and changes nothing.
"""

EXAMPLES = r"""
- name: End a readiness job an interrupted run left on the host
  specdec.sglang.sglang_release_reap:
    runtime_root: /opt/sglang
    job_file: /opt/sglang/state/readiness.job
"""

RETURN = r"""
reaped:
  description: Whether a readiness job of an interrupted run was still running and was ended.
  returned: success
  type: bool
removed:
  description: The async results files and temporary directories of that job that were removed.
  returned: success
  type: list
  elements: str
"""

from ansible_collections.specdec.sglang.plugins.module_utils._release.release_steps import main as run  # noqa: E402

OPERATION = "reap"


def main():
    run(OPERATION)


if __name__ == "__main__":
    main()
