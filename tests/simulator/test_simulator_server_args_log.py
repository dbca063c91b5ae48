"""The server-args start line: the key in clear like real sglang, unless the sglang installed beside the
simulator carries the redact-server-args patch set (server_args_log.py reads its engine.py).

The fake sglang packages here hold only an engine.py (whose ``_SECRET_SERVER_ARGS`` is what the patch
adds) and an ``__init__`` that exits if imported: the simulator must read the file, never import sglang.
The real 0.5.17 / 0.5.23 engine.py, pristine and patched, are read by the same function in
tests/contract/test_redact_server_args_patchsets.py.
"""

import os

import pytest
from simulator_harness import FAST, SIM_SRC

KEY, ADMIN = "sk-sim-journal-key-8c1", "sk-sim-admin-key-2d4"
PATCHED = 'import logging\n_SECRET_SERVER_ARGS = ("api_key", "admin_api_key", "ssl_keyfile_password")\n'
PRISTINE = 'import logging\nlogger = logging.getLogger(__name__)\n# logger.info(f"{server_args=}")\n'


def fake_sglang(root, engine_py):
    pkg = root / "sglang"
    (pkg / "srt" / "entrypoints").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise SystemExit('the simulator imported sglang')\n")
    (pkg / "srt" / "entrypoints" / "engine.py").write_text(engine_py)
    return str(root)


def start_line(sim):
    sim.wait_log("server_args=ServerArgs(", 10)
    return next(line for line in sim.logs.splitlines() if "server_args=ServerArgs(" in line)


@pytest.mark.parametrize("engine_py", [None, PRISTINE], ids=["no-sglang", "unpatched-sglang"])
def test_the_key_is_logged_in_clear_like_real_sglang(start_sim, tmp_path, engine_py):
    env = dict(FAST)
    if engine_py is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(SIM_SRC), fake_sglang(tmp_path / "site", engine_py)])
    sim = start_sim(["--api-key", KEY, "--admin-api-key", ADMIN], env=env, spec=True)
    line = start_line(sim)
    assert f"api_key={KEY!r}" in line and f"admin_api_key={ADMIN!r}" in line
    sim.wait_ready(10)


def test_the_patched_sglang_beside_it_makes_the_line_redacted(start_sim, tmp_path):
    env = dict(FAST, PYTHONPATH=os.pathsep.join([str(SIM_SRC), fake_sglang(tmp_path / "site", PATCHED)]))
    sim = start_sim(["--api-key", KEY, "--admin-api-key", ADMIN], env=env, spec=True)
    line = start_line(sim)
    assert "api_key='<redacted>'" in line and "admin_api_key='<redacted>'" in line
    assert "model_path=" in line and "speculative_algorithm='DFLASH'" in line  # the rest as before
    sim.wait_ready(10)
    assert sim.generate(headers={"Authorization": f"Bearer {KEY}"})[0] == 200
    assert KEY not in sim.logs and ADMIN not in sim.logs


def test_the_key_from_the_config_file_is_treated_the_same(start_sim, tmp_path):
    config = tmp_path / "sglang.yaml"
    config.write_text(f'api-key: "{KEY}"\n')
    config.chmod(0o600)
    clear = start_line(start_sim(["--config", str(config)], env=FAST, spec=True))
    assert f"api_key={KEY!r}" in clear
    env = dict(FAST, PYTHONPATH=os.pathsep.join([str(SIM_SRC), fake_sglang(tmp_path / "site", PATCHED)]))
    redacted = start_line(start_sim(["--config", str(config)], env=env, spec=True))
    assert KEY not in redacted and "api_key='<redacted>'" in redacted


def test_unset_keys_stay_none():
    from sglang_engine_simulator import server_args_log  # noqa: PLC0415

    line = server_args_log.server_args_line({"api_key": None, "port": 1}, ("api_key",))
    assert line == "server_args=ServerArgs(api_key=None, port=1)"
    assert server_args_log.redacted_fields("x = (\n") == ()
    assert server_args_log.redacted_fields(PATCHED) == ("api_key", "admin_api_key", "ssl_keyfile_password")
