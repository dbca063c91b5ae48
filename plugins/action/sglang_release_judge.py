# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action ``specdec.sglang.sglang_release_judge``: the operation reads no host file, so it runs on the controller."""

from __future__ import annotations

from ansible_collections.specdec.sglang.plugins.plugin_utils.release_action import controller_action

ActionModule = controller_action("judge")
