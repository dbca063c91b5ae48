"""wedged: a server that lists models but never generates is not deployed."""


def test_wedged_first_deploy_is_stopped_and_disabled(lab):
    assert lab["show"]["ActiveState"] in ("inactive", "failed")
    assert lab["show"]["UnitFileState"] == "disabled"
    assert lab["last_good"] is None
