"""render_command: the service's command line and environment as the role renders them for a host."""

import argparse
import json
import subprocess
import sys

import deploy_command_run as dcr
import pytest
import render_command as rc
import yaml

CT200 = yaml.safe_load((rc.REPO / "inventory" / "host_vars" / "ct200" / "main.yml").read_text())


def test_ct200_renders_its_port_models_the_first_envelope_and_the_backends_the_records_ran():
    out = rc.render("ct200")
    argv = out["argv"]
    assert argv[:2] == ["/opt/sglang/current/venv/bin/sglang", "serve"]
    pairs = dict(zip(argv[2::1], argv[3::1]))
    assert pairs["--port"] == str(CT200["sglang_service_port"])
    assert pairs["--model-path"] == CT200["sglang_service_model_path"]
    assert pairs["--speculative-algorithm"] == "DFLASH"
    assert out["envelope"] == "full" and pairs["--context-length"] == "131072"
    # the deploy's defaults: the attention and sampling backends every GPU record ran; sglang picks the grammar one
    assert (pairs["--attention-backend"], pairs["--sampling-backend"]) == ("triton", "pytorch")
    assert argv.count("--attention-backend") == 1 and argv.count("--sampling-backend") == 1
    assert not any(a.startswith("--grammar-backend") for a in argv)
    assert out["env"]["TRITON_CACHE_DIR"] == "/var/cache/sglang/triton"
    assert "CUDA_VISIBLE_DEVICES" not in out["env"]  # no preflight ran: no GPU chosen


def test_overrides_win_and_the_gpu_choice_reaches_the_environment():
    out = rc.render(
        "ct200",
        overrides={
            "sglang_service_attention_backend": "flashinfer",
            "sglang_service_sampling_backend": "",
            "sglang_service_gpu_uuids": ["GPU-a", "GPU-b"],
        },
    )
    i = out["argv"].index("--attention-backend")
    assert out["argv"][i + 1] == "flashinfer"
    assert "--sampling-backend" not in out["argv"]  # "": sglang's own choice
    assert out["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-a,GPU-b"
    assert out["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_the_api_key_goes_to_the_config_file_never_to_argv():
    out = rc.render(None, overrides={"sglang_service_api_key": 'k"ey'})
    assert 'k"ey' not in " ".join(out["argv"])
    i = out["argv"].index("--config")
    assert out["files"] == {out["argv"][i + 1]: out["files"][out["argv"][i + 1]]}
    assert 'api-key: "k\\"ey"' in out["files"][out["argv"][i + 1]]


def test_a_device_venv_replaces_the_release_venv_and_an_envelope_can_be_chosen():
    out = rc.render("ct200", envelope="small-nograph", venv="/opt/torch/.venv")
    assert out["argv"][0] == "/opt/torch/.venv/bin/sglang"
    assert "--disable-cuda-graph" in out["argv"]
    assert out["argv"][out["argv"].index("--context-length") + 1] == "32768"


def test_systemd_escapes_are_undone_so_argv_is_what_the_process_gets():
    out = rc.render(
        None, overrides={"sglang_service_model_path": '/m/a "b" $x 50%', "sglang_service_environment": {"A": 'q"1'}}
    )
    assert out["argv"][out["argv"].index("--model-path") + 1] == '/m/a "b" $x 50%'
    assert out["env"]["A"] == 'q"1'


def test_an_unknown_host_is_refused_with_its_name():
    with pytest.raises(SystemExit, match="no host_vars for 'ct999'"):
        rc.render("ct999")


def test_the_cli_prints_json_and_a_shell_line():
    script = str(rc.REPO / "tests" / "device" / "render_command.py")
    done = subprocess.run(
        [sys.executable, script, "--host", "ct129", "--json"], capture_output=True, text=True, check=True
    )
    data = json.loads(done.stdout)
    assert data["host"] == "ct129" and "--tp-size" in data["argv"]
    shell = subprocess.run(
        [sys.executable, script, "--host", "ct200", "--shell", "--set", "sglang_service_gpu_uuids=[GPU-x]"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert shell.startswith("env ") and "CUDA_VISIBLE_DEVICES=GPU-x" in shell and " --port 30001" in shell


def test_the_ddtree_variables_reach_the_services_environment():
    ddtree = {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 16}
    env = rc.render("ct200", overrides=ddtree)["env"]
    assert "SGLANG_DDTREE_TREE_BUILDER" not in env and "SGLANG_DDTREE_STEP_GRAPH" not in env  # the set's defaults
    out = rc.render("ct200", overrides=dict(ddtree, sglang_service_ddtree_tree_builder="graph"))
    assert out["env"]["SGLANG_DDTREE_TREE_BUILDER"] == "graph" and out["env"]["SGLANG_DDTREE_BUDGET"] == "16"
    out = rc.render("ct200", overrides=dict(ddtree, sglang_service_ddtree_step_graph="0"))
    assert out["env"]["SGLANG_DDTREE_STEP_GRAPH"] == "0"


def test_deploy_command_runs_ddtree_vars_are_role_variables_with_yaml_values():
    args = argparse.Namespace(
        ddtree_var=["sglang_service_ddtree_tree_builder=graph", "sglang_service_ddtree_budget=32"]
    )
    assert dcr.ddtree_vars(args) == {"sglang_service_ddtree_tree_builder": "graph", "sglang_service_ddtree_budget": 32}
    with pytest.raises(ValueError, match="sglang_service_NAME=VALUE"):
        dcr.ddtree_vars(argparse.Namespace(ddtree_var=["SGLANG_DDTREE_TREE_BUILDER=graph"]))
    assert dcr.E2E_NAMES.keys() == dcr.CASES.keys()


@pytest.mark.parametrize("case", sorted(c for c in dcr.CASES if c.startswith("ddtree")))
def test_every_ddtree_case_renders_for_ct200_with_its_budget(case):
    out = rc.render("ct200", overrides=dcr.CASES[case])
    argv = out["argv"]
    assert argv[argv.index("--speculative-algorithm") + 1] == "DDTREE"
    assert out["env"]["SGLANG_DDTREE_BUDGET"] == case[len("ddtree") :] == dcr.E2E_NAMES[case][len("ddtree-n") :]
