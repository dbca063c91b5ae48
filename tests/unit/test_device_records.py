"""Every device record names its commit, command, GPU, compute capability and driver (RECORD.yml), each
traceable to the record's own files or to git; "not recorded" where the record does not say (issue 34)."""

import pathlib
import re
import subprocess

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
RECORDS = REPO / "tests" / "device" / "records"
DIRS = sorted(p for p in RECORDS.iterdir() if p.is_dir())
FIELDS = ("commit_added", "run_commit", "command", "gpu", "driver", "compute_capability")
# Facts a record may add after the required ones (the geometry a cost table names: scripts/make-speculation-cost).
OPTIONAL = ("geometry",)
UNKNOWN = ("not recorded", "none")


def record(directory):
    path = directory / "RECORD.yml"
    assert path.is_file(), f"{path.relative_to(REPO)} is missing (tests/device/records/README.md says what it holds)"
    data = yaml.safe_load(path.read_text())
    required, extra = list(data)[: len(FIELDS)], list(data)[len(FIELDS) :]
    assert required == list(FIELDS) and set(extra) <= set(OPTIONAL), (
        f"{path.relative_to(REPO)}: fields {list(data)}, expected {list(FIELDS)} then any of {list(OPTIONAL)}"
    )
    for field in list(data):
        assert str(data[field].get("value", "")).strip(), f"{path}: {field} has no value"
        assert str(data[field].get("source", "")).strip(), f"{path}: {field} names no source"
    return data


def source_file(directory, source):
    """The record file a source names first (``nvidia-smi.csv``, ``cost-a/nvidia-smi.csv``, ``README.md, ...``)."""
    first = source.split()[0].rstrip(",;")
    path = directory / first
    return path if path.is_file() else None


def test_there_are_records():
    assert len(DIRS) >= 11


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_commit_added_is_the_commit_git_says_added_the_record(directory):
    data = record(directory)
    log = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", str(directory.relative_to(REPO))],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    commits = log.stdout.split()
    assert commits, f"git knows no commit that added {directory.name} (a shallow clone?)"
    # An abbreviated hash: git's own abbreviation grows with the clone's object count (7 here, 8 on a
    # bigger clone), so the record's prefix is compared with the full hash, not with today's %h.
    value = str(data["commit_added"]["value"])
    assert re.fullmatch(r"[0-9a-f]{7,40}", value), f"{directory.name}: commit_added {value!r} is not a hash"
    assert commits[-1].startswith(value), f"{directory.name}: commit_added {value} but git says {commits[-1]}"


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_run_commit_is_what_the_readme_says_or_not_recorded(directory):
    value = str(record(directory)["run_commit"]["value"])
    if value == "not recorded":
        return
    assert re.fullmatch(r"[0-9a-f]{7,40}(-dirty)?", value), value
    assert value.removesuffix("-dirty") in (directory / "README.md").read_text()


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_gpu_and_driver_are_read_from_the_record_files(directory):
    data = record(directory)
    for field in ("gpu", "driver"):
        value, source = str(data[field]["value"]), data[field]["source"]
        if value in UNKNOWN:
            continue
        path = source_file(directory, source)
        assert path is not None, f"{directory.name}: {field} source {source!r} names no file of the record"
        assert value in path.read_text(), f"{directory.name}: {field}={value!r} is not in {path.name}"


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_compute_capability_is_recorded_or_says_where_it_comes_from(directory):
    data = record(directory)
    cc = data["compute_capability"]
    if data["gpu"]["value"] == "none":
        assert cc["value"] == "none"
        return
    assert re.fullmatch(r"\d{1,2}\.\d", str(cc["value"])), cc
    if cc.get("recorded") is False:
        assert cc["source"].startswith("not recorded by the run")
        assert data["gpu"]["value"] in cc["source"]


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_each_command_runs_a_script_of_this_repository(directory):
    value = str(record(directory)["command"]["value"])
    if value.startswith("README.md"):
        assert (directory / "README.md").is_file()
        return
    scripts = re.findall(r"(tests/device/[\w./-]+|scripts/[\w./-]+)", value)
    assert scripts, f"{directory.name}: the command names no script: {value!r}"
    run_commit = str(record(directory)["run_commit"]["value"]).removesuffix("-dirty")
    for script in scripts:
        here = (REPO / script).exists() or (REPO / script).with_suffix("").exists()
        assert here or existed_at(run_commit, script), f"{directory.name}: {script} is not in the repository"


def existed_at(commit, path):
    """``path`` was in the tree of ``commit`` (a record's command may name a file a later commit removed)."""
    if commit == "not recorded":
        return False
    probe = subprocess.run(["git", "cat-file", "-e", f"{commit}:{path}"], check=False, cwd=REPO, capture_output=True)
    return probe.returncode == 0
