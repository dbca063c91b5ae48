"""fail_fast: a crash on start of a first deploy leaves the unit stopped, disabled, unrecorded."""


def test_failed_first_deploy_leaves_the_unit_stopped_and_disabled(lab):
    assert lab["show"]["ActiveState"] in ("inactive", "failed")
    assert lab["show"]["UnitFileState"] == "disabled"
    assert lab["listening"].strip() == ""


def test_failed_first_deploy_records_no_last_good_release(lab):
    assert lab["last_good"] is None
