# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""release_paths: the release root's paths from their owner (plugins/module_utils/_release/release.py)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.specdec.sglang.plugins.filter.release_paths import FilterModule
from ansible_collections.specdec.sglang.plugins.module_utils._release import release

release_paths = FilterModule().filters()["release_paths"]


def test_the_paths_are_the_owners():
    got = release_paths("/srv/sglang/")
    assert got == {
        "root": "/srv/sglang",
        "releases": release.releases_dir("/srv/sglang"),
        "current": release.current_link("/srv/sglang"),
        "last_good": release.last_good_dir("/srv/sglang"),
    }
    assert got["current"] == "/srv/sglang/current" and got["last_good"] == "/srv/sglang/state/last_good"


def test_a_named_replica_has_its_own_last_good_state():
    assert release_paths("/srv/sglang", replica="b")["last_good"] == "/srv/sglang/state/last_good-b"


@pytest.mark.parametrize("root", ["", "relative/root", None])
def test_a_root_that_is_not_absolute_is_refused(root):
    with pytest.raises(AnsibleFilterError, match="absolute"):
        release_paths(root)
