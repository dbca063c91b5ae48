"""The README's claims that drift: its module list and the test suite's run time.

- The module table names every module under plugins/modules/ and no other.
- The suite time it quotes is the newest green run of the project's CI in docs/benchmarks.md's table (same tree,
  same seconds).
"""

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]
README = REPO / "README.md"
BENCHMARKS = REPO / "docs" / "benchmarks.md"
MODULE_ROW = re.compile(r"^\| `specdec\.sglang\.(\w+)` \|", re.M)
SUITE_CLAIM = re.compile(r"suite last took\s+(\d+) s on the project's CI \(`([0-9a-f]{7,40})`, (\d{4}-\d{2}-\d{2})\)")


def readme_modules(text):
    return sorted(MODULE_ROW.findall(text))


def shipped_modules(repo=REPO):
    return sorted(p.stem for p in (repo / "plugins" / "modules").glob("*.py") if p.stem != "__init__")


def suite_claims(text):
    return [(int(s), commit, date) for s, commit, date in SUITE_CLAIM.findall(re.sub(r"\s+", " ", text))]


def recorded_ci_runs(text):
    """(seconds, commit, date) of every row of the benchmarks' suite table measured on the project's CI."""
    rows = re.findall(r"^\| (\d{4}-\d{2}-\d{2}) \| `([0-9a-f]+)`[^|]*\| the project's CI \| (\d+) s \|", text, re.M)
    return [(int(s), commit, date) for date, commit, s in rows]


def test_the_readme_lists_every_module_and_no_other():
    listed, shipped = readme_modules(README.read_text()), shipped_modules()
    assert listed == shipped, "README.md's module table is not plugins/modules/: add %s, remove %s" % (
        sorted(set(shipped) - set(listed)),
        sorted(set(listed) - set(shipped)),
    )


def test_the_readmes_suite_time_is_a_recorded_ci_run():
    claims = suite_claims(README.read_text())
    assert len(claims) == 1, claims
    runs = recorded_ci_runs(BENCHMARKS.read_text())
    assert claims[0] in runs
    # "last took": the newest green run of the project's CI (the table is in time order; a red run has no plain time)
    assert claims[0] == runs[-1], "README.md quotes %s; the newest green run of the project's CI is %s" % (
        claims[0],
        runs[-1],
    )


def test_a_module_missing_from_the_table_is_found(tmp_path):
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    for name in ("a_mod", "b_mod"):
        (tmp_path / "plugins" / "modules" / (name + ".py")).write_text("")
    assert readme_modules("| `specdec.sglang.a_mod` | x |\n") != shipped_modules(tmp_path)
    assert readme_modules("| `specdec.sglang.b_mod` | y |\n| `specdec.sglang.a_mod` | x |\n") == ["a_mod", "b_mod"]


def test_a_suite_time_not_in_the_record_is_found():
    table = "| 2026-12-04 | `3915704` | the project's CI | 807 s |\n"
    assert suite_claims("the suite last took 807 s on the project's CI (`3915704`, 2026-12-04)") == [
        (807, "3915704", "2026-12-04")
    ]
    assert (800, "3915704", "2026-12-04") not in recorded_ci_runs(table)
    assert (807, "3915704", "2026-12-04") in recorded_ci_runs(table)
    red = "| 2026-12-05 | `1c0ce69` | the project's CI | 2232 s; **red**: molecule gateway |\n"
    assert recorded_ci_runs(table + red) == [(807, "3915704", "2026-12-04")]  # a red run is never the suite time
