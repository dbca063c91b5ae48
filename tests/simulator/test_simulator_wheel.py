"""The simulator builds into a wheel offline and runs from a bare venv by its console script."""

import os
import subprocess
import sys
import zipfile

from simulator_harness import REPO


def test_build_wheel_offline_then_console_script_runs_in_a_fresh_venv(tmp_path):
    env = {**os.environ, "PIP_NO_INDEX": "1"}
    built = subprocess.run(
        [str(REPO / "lab" / "engine-simulator" / "build-wheel")],
        check=False, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    wheel = built.stdout.strip().splitlines()[-1]
    assert wheel.startswith(str(REPO / ".cache" / "wheels" / "sglang_engine_simulator-")) and wheel.endswith(".whl")
    with zipfile.ZipFile(wheel) as zf:
        metadata = next(zf.read(n).decode() for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        entry_points = next(zf.read(n).decode() for n in zf.namelist() if n.endswith("entry_points.txt"))
    assert "Requires-Dist" not in metadata, "stdlib only: the lab venv installs it with no index"
    assert "sglang-engine-simulator = sglang_engine_simulator.cli:main" in entry_points
    assert not (REPO / "lab" / "engine-simulator" / "build").exists()

    venv = tmp_path / "release-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q", "--no-index",
         "--no-deps", wheel],
        check=True, timeout=120, env=env,
    )  # fmt: skip
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = {"check": False, "capture_output": True, "text": True, "timeout": 30, "env": clean}
    helped = subprocess.run([str(venv / "bin" / "sglang-engine-simulator"), "--help"], **run)  # noqa: PLW1510
    assert helped.returncode == 0 and "TEST DOUBLE" in helped.stdout
    argv = [str(venv / "bin" / "python"), "-m", "sglang_engine_simulator", "--model-path", "/x", "--nope"]
    bad = subprocess.run(argv, **run)  # noqa: PLW1510  (check=False is in run)
    assert bad.returncode == 2 and "unrecognized arguments: --nope" in bad.stderr
