"""Bad-input matrix: every wrong input fails before any task runs on the host, naming the variable and what is allowed.

Each case runs the real playbook (deploy.yml, playbooks/rollback.yml, playbooks/stop.yml) against one
lab host (a podman container with systemd, started once for the module and never deployed to) with
bad extra vars, and asserts:

- ansible-playbook failed as a play failure (rc 2), not a crash (rc 250);
- the play that touches hosts never started, and the tasks recap lists only validation tasks;
- the failure message names the variable and the values allowed;
- no deprecation warning was printed (deprecations are forced visible);

and, after the whole matrix, that the lab host was never contacted (no Ansible directory in it).
A control case with valid input shows the same command does reach the host.
Cases run two at a time.
"""

import concurrent.futures
import json
import pathlib
import re
import typing

import pytest
import yaml
from playbook_forks import PlaybookForks
from private_lab import PrivateLab

REPO = pathlib.Path(__file__).resolve().parents[2]
LAB = PrivateLab(
    "specdec-badin-",
    ANSIBLE_DEPRECATION_WARNINGS="1",
    ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
)
CONTAINER = LAB.container
sh = LAB.sh
SECRET = "s3cret-matrix-key"


class Bad(typing.NamedTuple):
    playbook: str
    extra: list  # -e values
    variable: str  # must appear in the message
    allowed: tuple  # each must appear in the message
    absent: tuple  # none may appear anywhere in the output


def case(case_id, playbook, extra, variable, *allowed, absent=()):
    """One bad input: ``extra`` (list of -e values); ``variable`` and ``allowed`` must appear in the message."""
    return pytest.param(Bad(playbook, extra, variable, allowed, absent), id=case_id)


DEPLOY, ROLLBACK, STOP = "deploy.yml", "playbooks/rollback.yml", "playbooks/stop.yml"
PASS_LIST = "pass it as JSON: -e '"
# The envelope check before issue 23.5 answered every mistake with every rule of every field.
OLD_ENVELOPE_TEXT = ("allowed keys context_length (int >= 0)", "cuda_graph (bool) and environment")

CASES = [
    # --- strings given for lists or dicts (never read character by character) ---------------------
    case("gpus-string", DEPLOY, ["sglang_preflight_gpus=12"], "sglang_preflight_gpus",
         "must be a list of str, not a string", """-e '{"sglang_preflight_gpus": ["12"]}'"""),
    case("gpus-comma-string", DEPLOY, ["sglang_preflight_gpus=1,2"], "sglang_preflight_gpus",
         """-e '{"sglang_preflight_gpus": ["1", "2"]}'"""),
    case("excluded-gpus-string", DEPLOY, ["sglang_preflight_excluded_gpus=1"], "sglang_preflight_excluded_gpus",
         "must be a list of str", PASS_LIST),
    case("ladder-string", DEPLOY, ["sglang_service_envelope_ladder=small"], "sglang_service_envelope_ladder",
         "must be a list of str", """-e '{"sglang_service_envelope_ladder": ["small"]}'"""),
    case("extra-flags-string", DEPLOY, ["sglang_service_extra_flags=--port=1"], "sglang_service_extra_flags",
         "must be a list of str", PASS_LIST),
    case("read-write-paths-string", DEPLOY, ["sglang_service_read_write_paths=/data"],
         "sglang_service_read_write_paths", "must be a list of path", PASS_LIST),
    case("gpu-uuids-string", DEPLOY, ["sglang_service_gpu_uuids=GPU-1234"], "sglang_service_gpu_uuids",
         "must be a list of str", PASS_LIST),
    case("patch-sets-string", DEPLOY, ["sglang_deploy_patch_sets=/tmp/ddtree"], "sglang_deploy_patch_sets",
         "must be a list of str", PASS_LIST),
    case("environment-string", DEPLOY, ["sglang_service_environment=A=1"], "sglang_service_environment",
         "must be a dict", PASS_LIST),
    case("limits-list", DEPLOY, ['{"sglang_service_limits": ["NOFILE"]}'], "sglang_service_limits",
         "must be a dict"),
    # --- play-level integers and percentages (templated into serial / max_fail_percentage) ---------
    case("serial-banana", DEPLOY, ["sglang_deploy_serial=banana"], "sglang_deploy_serial",
         'a host count >= 1 (such as 1), a percentage of the hosts (such as "25%")'),
    case("serial-zero", DEPLOY, ["sglang_deploy_serial=0"], "sglang_deploy_serial", "a host count >= 1"),
    case("serial-over-100-percent", DEPLOY, ["sglang_deploy_serial=150%"], "sglang_deploy_serial",
         "a percentage of the hosts"),
    case("serial-empty-list", DEPLOY, ['{"sglang_deploy_serial": []}'], "sglang_deploy_serial", "or a list of those"),
    case("max-fail-text", DEPLOY, ["sglang_deploy_max_fail_percentage=lots"], "sglang_deploy_max_fail_percentage",
         "must be a number"),
    case("max-fail-over-100", DEPLOY, ["sglang_deploy_max_fail_percentage=101"],
         "sglang_deploy_max_fail_percentage", "must be in 0-100"),
    # --- ranges -------------------------------------------------------------------------------------
    case("port-privileged", DEPLOY, ["sglang_service_port=80"], "sglang_service_port", "must be in 1024-65535"),
    case("port-too-high", DEPLOY, ["sglang_service_port=70000"], "sglang_service_port", "must be in 1024-65535"),
    case("port-text", DEPLOY, ["sglang_service_port=http"], "sglang_service_port", "must be an integer"),
    case("tp-zero", DEPLOY, ["sglang_service_tp_size=0"], "sglang_service_tp_size", "must be in 1-64"),
    case("gpu-count-negative", DEPLOY, ["sglang_preflight_gpu_count=-1"], "sglang_preflight_gpu_count",
         "must be in 0-64"),
    case("nvidia-smi-timeout-zero", DEPLOY, ["sglang_preflight_nvidia_smi_timeout_s=0"],
         "sglang_preflight_nvidia_smi_timeout_s", "must be in 1-3600"),
    case("keep-releases-zero", DEPLOY, ["sglang_service_keep_releases=0"], "sglang_service_keep_releases",
         "must be in 1-100"),
    # --- unknown choices and malformed values -------------------------------------------------------
    case("algorithm-unknown", DEPLOY, ["sglang_service_speculative_algorithm=EAGLE"],
         "sglang_service_speculative_algorithm", "must be one of DFLASH, DDTREE"),
    case("launch-style-unknown", DEPLOY, ["sglang_service_launch_style=docker"], "sglang_service_launch_style",
         "must be one of serve, launch_server, engine_simulator"),
    case("bool-unknown", DEPLOY, ["sglang_service_trust_remote_code=maybe"], "sglang_service_trust_remote_code",
         "must be a boolean, one of true, false"),
    case("gpu-id-malformed", DEPLOY, ['{"sglang_preflight_gpus": ["gpu1"]}'], "sglang_preflight_gpus[0]",
         'a GPU index ("1"), UUID ("GPU-...") or PCI bus id'),
    case("cuda-version-format", DEPLOY, ["sglang_preflight_required_cuda_version=13"],
         "sglang_preflight_required_cuda_version", 'a CUDA version such as "13.0"'),
    case("python-unsupported", DEPLOY, ["sglang_runtime_python_version=3.9"], "sglang_runtime_python_version",
         "allowed: 3.11, 3.12"),
    case("unit-name-empty", DEPLOY, ["sglang_service_unit_name="], "sglang_service_unit_name",
         "a systemd unit name of [A-Za-z0-9_.@-]"),
    case("unit-name-suffix", DEPLOY, ["sglang_service_unit_name=sglang.service"], "sglang_service_unit_name",
         'without ".service"'),
    case("limits-unknown-key", DEPLOY, ['{"sglang_service_limits": {"FOO": 1}}'], "sglang_service_limits",
         "allowed keys: NOFILE, MEMLOCK, NPROC, CORE, STACK"),
    case("probe-unknown-key", DEPLOY, ['{"sglang_service_probe": {"prompt": "hi", "timeot": 5}}'],
         "sglang_service_probe", "allowed keys: prompt, max_new_tokens"),
    case("environment-reserved", DEPLOY, ['{"sglang_service_environment": {"CUDA_VISIBLE_DEVICES": "0"}}'],
         "sglang_service_environment", "reserved: CUDA_VISIBLE_DEVICES, SGLANG_API_KEY"),
    case("secret-of-wrong-type-is-hidden", DEPLOY, ['{"sglang_service_api_key": ["%s"]}' % SECRET],
         "sglang_service_api_key", "must be a string", absent=(SECRET,)),
    # --- empty values -------------------------------------------------------------------------------
    case("ladder-empty", DEPLOY, ['{"sglang_service_envelope_ladder": []}'], "sglang_service_envelope_ladder",
         "must list at least one item"),
    case("gpus-null", DEPLOY, ['{"sglang_preflight_gpus": null}'], "sglang_preflight_gpus", "must be set"),
    # --- paths --------------------------------------------------------------------------------------
    case("model-path-relative", DEPLOY, ["sglang_service_model_path=models/qwen"], "sglang_service_model_path",
         "must be an absolute path"),
    case("model-path-whitespace", DEPLOY, ['{"sglang_service_model_path": "/models/my model"}'],
         "sglang_service_model_path", "without whitespace"),
    case("runtime-root-relative", DEPLOY, ["sglang_runtime_root=opt/sglang"], "sglang_runtime_root",
         "must be an absolute path"),
    case("disk-path-relative", DEPLOY, ["sglang_preflight_disk_path=sglang"], "sglang_preflight_disk_path",
         "must be an absolute path"),
    case("read-write-path-relative", DEPLOY, ['{"sglang_service_read_write_paths": ["data"]}'],
         "sglang_service_read_write_paths[0]", "must be an absolute path"),
    # --- combinations (checks across variables) -----------------------------------------------------
    case("gpu-selected-and-excluded", DEPLOY,
         ['{"sglang_preflight_gpus": ["1"], "sglang_preflight_excluded_gpus": ["1"]}'],
         "sglang_preflight_excluded_gpus", "in both sglang_preflight_gpus and"),
    case("gpu-index-beyond-count", DEPLOY,
         ['{"sglang_preflight_gpus": ["9"], "sglang_preflight_expected_gpu_count": 8}'],
         "sglang_preflight_gpus", "allowed indices 0-7"),
    case("ddtree-with-tensor-parallel", DEPLOY,
         ['{"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_tp_size": 2}'],
         "sglang_service_speculative_algorithm=DDTREE", "allowed with tp > 1: DFLASH"),
    case("tp-does-not-divide-gpus", DEPLOY, ['{"sglang_preflight_gpus": ["0", "1", "2"], "sglang_service_tp_size": 2}'],
         "sglang_service_tp_size", "allowed: a divisor of 3 (1, 3)"),
    case("ladder-unknown-envelope", DEPLOY, ['{"sglang_service_envelope_ladder": ["huge"]}'],
         "sglang_service_envelope_ladder", "allowed: names of sglang_service_envelopes (full, small, small-nograph)"),
    case("envelope-fraction-above-1", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 1.5}}}'],
         "sglang_service_envelopes.full.mem_fraction_static=1.5", "is outside (0, 1)",
         "a number strictly between 0 and 1"),
    case("managed-flag-in-extra-flags", DEPLOY, ['{"sglang_service_extra_flags": ["--port=1"]}'],
         "sglang_service_extra_flags", "which the role manages"),
    case("draft-tokens-not-block-size", DEPLOY, ["sglang_service_speculative_num_draft_tokens=8"],
         "sglang_service_speculative_num_draft_tokens", "must equal sglang_service_dflash_block_size=16"),
    # --- the deploy plan: the runtime against sglang's own requirements, patch sets by capability ----
    # The lab installs the real sglang wheel: its Requires-Dist decides, as on a real host.
    case("sglang-0.5.23-over-torch-2.11", DEPLOY, ["sglang_runtime_sglang_version=0.5.23"],
         "sglang_runtime_manifest[0] (torch)", "sglang 0.5.23 requires torch==2.14.1",
         "Requires-Dist of sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", "the manifest has torch 2.11.0+cu130"),
    # The stub kernel carries the real sglang-kernel 0.4.10's Requires-Dist.
    case("kernel-for-another-torch", DEPLOY, [json.dumps({"sglang_runtime_manifest": [
        {"name": "torch", "version": "2.11.0", "local": "cu130", "import": "torch", "source": "wheelhouse",
         "wheel": str(REPO / ".cache/stub-wheels/torch-2.11.0+cu130-py3-none-any.whl"),
         "sha256": "f8725a0d2b47ab7d72c2a194f217d9820c4d348de67462446e523a5d8fe5fc07"},
        {"name": "sglang-kernel", "version": "0.4.10", "local": "", "import": "sgl_kernel", "source": "wheelhouse",
         "wheel": str(REPO / ".cache/stub-wheels/torch-2.14/sglang_kernel-0.4.10-py3-none-any.whl"),
         "sha256": "00e3fd018178bd92f99af4d8ce12fc3fa400c2a0c0eaeb7268014254dd89ac6b"}]})],
         "sglang_runtime_manifest[0] (torch)", "sglang-kernel 0.4.10 requires torch==2.14.1",
         "Requires-Dist of sglang_kernel-0.4.10-py3-none-any.whl"),
    case("sglang-version-unknown", DEPLOY,
         ['{"sglang_runtime_sglang": {"version": "0.5.99", "source": "index", "wheel": "", "sha256": "", "git_url": "",'
          ' "git_ref": "", "no_deps": false}}'],
         "sglang_runtime_sglang.version=0.5.99", "not a known runtime", "knows 0.5.17, 0.5.23"),
    case("sglang-version-malformed", DEPLOY, ["sglang_runtime_sglang_version=latest"], "sglang_runtime_sglang_version",
         'an sglang version such as "1.2.3"'),
    case("ddtree-no-set-for-sglang-version", DEPLOY,
         ['{"sglang_service_speculative_algorithm": "DDTREE", "sglang_runtime_sglang": {"version": "0.5.99",'
          ' "source": "index", "wheel": "", "sha256": "", "git_url": "", "git_ref": "", "no_deps": false}}'],
         "sglang_service_speculative_algorithm=DDTREE", "needs a patch set for sglang 0.5.99",
         "ddtree-0.5.17 (sglang 0.5.17", "ddtree-0.5.23 (sglang 0.5.23"),
    case("ddtree-on-a-runtime-no-set-serves", DEPLOY,
         ['{"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_attention_backend": "fa3",'
          ' "sglang_runtime_sglang_version": "0.5.23"}'],
         "sglang_service_speculative_algorithm=DDTREE on sglang 0.5.23",
         "ddtree-0.5.23 does not serve sglang_service_attention_backend=fa3 (it serves triton, flashinfer)",
         "ddtree-0.5.17 (sglang 0.5.17; serves algorithms: DDTREE; architectures: dense, hybrid_gdn;"
         " attention_backends: triton, flashinfer)"),
    case("ddtree-backend-unset", DEPLOY, ["sglang_service_speculative_algorithm=DDTREE"],
         "sglang_service_speculative_algorithm=DDTREE",
         "ddtree-0.5.17 does not serve sglang_service_attention_backend=(unset) (it serves triton, flashinfer)"),
    case("ddtree-backend-ignoring-tree-masks", DEPLOY,
         ['{"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_attention_backend": "fa3"}'],
         "sglang_service_speculative_algorithm=DDTREE",
         "sglang_service_attention_backend=fa3 (it serves triton, flashinfer)"),
    case("patch-set-without-manifest", DEPLOY, ['{"sglang_deploy_patch_sets": ["/nonexistent/ddtree"]}'],
         "sglang_deploy_patch_sets[0]", "has no patchset.yml"),
    case("ddtree-budget-with-dflash", DEPLOY, ["sglang_service_ddtree_budget=4"], "sglang_service_ddtree_budget",
         "allowed with DFLASH: 0"),
    case("probe-timeout-beyond-startup", DEPLOY, ['{"sglang_service_probe": {"prompt": "hi", "timeout": 300}}'],
         "sglang_service_probe.timeout", "must be below sglang_service_startup_timeout_s=120"),
    case("test-double-not-allowed", DEPLOY, ["sglang_service_allow_test_double=false"],
         "sglang_service_allow_test_double", "allowed in production: serve, launch_server"),
    # --- role-prefixed variables no role reads (issue 23: a typo deployed the default silently) ------
    case("typo-in-a-role-variable", DEPLOY, ["sglang_service_speculative_algo=DDTREE"],
         "sglang_service_speculative_algo", "did you mean sglang_service_speculative_algorithm?"),
    case("rollback-typo", ROLLBACK, ["sglang_runtime_rooot=/srv/sglang"], "sglang_runtime_rooot",
         "did you mean sglang_runtime_root?"),
    case("stop-typo", STOP, ["sglang_service_unit=sglang"], "sglang_service_unit",
         "did you mean sglang_service_unit_name?"),
    # --- rollback and stop --------------------------------------------------------------------------
    case("rollback-release-traversal", ROLLBACK, ["sglang_rollback_release=../../etc"], "sglang_rollback_release",
         "a release id of [A-Za-z0-9._-]"),
    case("rollback-release-list", ROLLBACK, ['{"sglang_rollback_release": ["a"]}'], "sglang_rollback_release",
         "must be a string"),
    case("rollback-serial-banana", ROLLBACK, ["sglang_deploy_serial=banana"], "sglang_deploy_serial",
         "a host count >= 1"),
    case("rollback-port-privileged", ROLLBACK, ["sglang_service_port=22"], "sglang_service_port",
         "must be in 1024-65535"),
    case("stop-disable-maybe", STOP, ["sglang_stop_disable=maybe"], "sglang_stop_disable",
         "must be a boolean, one of true, false"),
    case("stop-unit-name-path", STOP, ["sglang_service_unit_name=../sglang"], "sglang_service_unit_name",
         "a systemd unit name of [A-Za-z0-9_.@-]"),
    # ===== envelopes: each error names the envelope, the field and the rule that failed (issue 23.5) =====
    # (block kept together to ease merging; the old single assert listed every rule: OLD_ENVELOPE_TEXT)
    case("envelope-fraction-1.2-names-field-and-rule", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 1.2}}}'],
         "sglang_service_envelopes.full.mem_fraction_static=1.2 is outside (0, 1)",
         "use a number strictly between 0 and 1, such as 0.88", absent=OLD_ENVELOPE_TEXT),
    case("envelope-fraction-missing", DEPLOY, ['{"sglang_service_envelopes": {"full": {"context_length": 4096}}}'],
         "sglang_service_envelopes.full.mem_fraction_static is missing (required)", absent=OLD_ENVELOPE_TEXT),
    case("envelope-fraction-text", DEPLOY, ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": "most"}}}'],
         'sglang_service_envelopes.full.mem_fraction_static="most" is a string, not a number',
         absent=OLD_ENVELOPE_TEXT),
    case("envelope-field-typo", DEPLOY, ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9,'
                                         ' "max_running_request": 4}}}'],
         "sglang_service_envelopes.full.max_running_request is not an envelope field",
         "did you mean max_running_requests?", absent=OLD_ENVELOPE_TEXT),
    case("envelope-context-negative", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9, "context_length": -1}}}'],
         "sglang_service_envelopes.full.context_length=-1 is below 0", "use a whole number >= 0",
         absent=OLD_ENVELOPE_TEXT),
    case("envelope-running-requests-zero", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9, "max_running_requests": 0}}}'],
         "sglang_service_envelopes.full.max_running_requests=0 is below 1", "use a whole number >= 1",
         absent=OLD_ENVELOPE_TEXT),
    case("envelope-cuda-graph-string", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9, "cuda_graph": "false"}}}'],
         'sglang_service_envelopes.full.cuda_graph="false" is a string, not a boolean', "use true or false",
         absent=OLD_ENVELOPE_TEXT),
    case("envelope-environment-reserved", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9,'
          ' "environment": {"SGLANG_API_KEY": "x"}}}}'],
         "sglang_service_envelopes.full.environment.SGLANG_API_KEY: the name is set by the role",
         "reserved: CUDA_VISIBLE_DEVICES, SGLANG_API_KEY, SGLANG_DDTREE_BUDGET", absent=OLD_ENVELOPE_TEXT),
    case("envelope-environment-two-lines", DEPLOY,
         ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0.9,'
          ' "environment": {"A": "1\\nSGLANG_API_KEY=x"}}}}'],
         "sglang_service_envelopes.full.environment.A=", "is not a one-line string, number or boolean",
         absent=OLD_ENVELOPE_TEXT),
    case("envelope-not-a-dict", DEPLOY, ['{"sglang_service_envelopes": {"full": 0.9}}'],
         "sglang_service_envelopes.full=0.9 is a number, not a dict", absent=OLD_ENVELOPE_TEXT),
    case("rollback-envelope-fraction", ROLLBACK, ['{"sglang_service_envelopes": {"full": {"mem_fraction_static": 0}}}'],
         "sglang_service_envelopes.full.mem_fraction_static=0 is outside (0, 1)", absent=OLD_ENVELOPE_TEXT),
    # ===== end of the envelope block =====
]  # fmt: skip

# ==== runtime (issue 18): the manifest derived from the sglang version, the reference venv ==============
# One block, kept apart from the cases above (other work adds cases there): the deploy plan's refusals of
# a derived manifest (before any host, like every case above), and a reference venv contradiction, which
# only the host knows: refused in preflight, before anything is built (the test at the end of this block).
RUNTIME_CASES = [
    case("runtime-unknown-version-without-pins", DEPLOY,
         ['{"sglang_runtime_manifest": [], "sglang_runtime_sglang": {"version": "0.5.99", "source": "index",'
          ' "wheel": "", "sha256": "", "git_url": "", "git_ref": "", "no_deps": false}}'],
         "sglang_runtime_sglang.version=0.5.99", "no known runtime to derive the manifest from",
         "knows 0.5.17, 0.5.23", "sglang_runtime_manifest is empty"),
    case("runtime-core-source-unknown", DEPLOY, ['{"sglang_runtime_core_sources": {"torch": "pypi"}}'],
         "sglang_runtime_core_sources.torch=pypi", "allowed: index, reference_venv"),
    case("runtime-core-source-not-a-core-package", DEPLOY, ['{"sglang_runtime_core_sources": {"numpy": "index"}}'],
         "sglang_runtime_core_sources.numpy", "allowed: flashinfer-python, sglang-kernel, torch, triton"),
]  # fmt: skip
CASES += RUNTIME_CASES
RUNTIME_REFERENCE = "/opt/specdec-badin-reference-venv"  # a copy of the lab's, with an sglang wanting torch 2.14.1
RUNTIME_ROOT = "/opt/sglang-badin-refcheck"  # the release root of that run: must never be created
RUNTIME_MODELS = "/opt/specdec-badin-models"


def test_runtime_a_reference_venv_whose_sglang_wants_another_torch_is_refused_in_preflight(matrix):
    """Only the host knows its reference venv: preflight reads it and refuses it before any release is built."""
    defaults = yaml.safe_load((REPO / "roles" / "sglang_runtime" / "defaults" / "main.yml").read_text())
    version = defaults["sglang_runtime_sglang_version"]
    site = f"{RUNTIME_REFERENCE}/lib/python3.11/site-packages"
    metadata = f"Metadata-Version: 2.1\\nName: sglang\\nVersion: {version}\\nRequires-Dist: torch==2.14.1\\n"
    # The lab's reference venv as the runtime scenario makes it (the stub triton unpacked), plus that sglang.
    sh(["podman", "cp", str(REPO / ".cache/stub-wheels/triton-3.6.0-py3-none-any.whl"), f"{CONTAINER}:/tmp/"])
    sh(["podman", "exec", CONTAINER, "sh", "-c",
        f"set -e; rm -rf {RUNTIME_REFERENCE} {RUNTIME_ROOT};"
        f" /usr/bin/python3 -m venv --without-pip {RUNTIME_REFERENCE};"
        f" /usr/bin/python3 -m zipfile -e /tmp/triton-3.6.0-py3-none-any.whl {site};"
        f" mkdir -p {site}/sglang-{version}.dist-info;"
        f" printf '{metadata}' > {site}/sglang-{version}.dist-info/METADATA;"
        f" for d in target draft; do mkdir -p {RUNTIME_MODELS}/$d;"
        f" echo '{{}}' > {RUNTIME_MODELS}/$d/config.json; done"])  # fmt: skip
    result = play(
        DEPLOY,
        [
            json.dumps(
                {
                    "sglang_runtime_reference_venv": RUNTIME_REFERENCE,
                    "sglang_runtime_root": RUNTIME_ROOT,
                    # the bare lab host has no models: directories with a config.json pass the path check
                    "sglang_service_model_path": f"{RUNTIME_MODELS}/target",
                    "sglang_service_draft_model_path": f"{RUNTIME_MODELS}/draft",
                    "sglang_preflight_model_integrity_checks": False,
                }
            )
        ],
    )
    out = result["out"]
    assert result["rc"] == 2, out[-3000:]
    assert "PLAY [Deploy]" in out  # passed validation: only the host can tell
    messages = failure_messages(out)
    assert len(messages) == 1, out[-3000:]
    assert messages[0].startswith(f"The reference venv {RUNTIME_REFERENCE} contradicts the plan"), messages[0]
    assert (
        f"sglang_runtime_manifest[0] (torch): sglang {version} requires torch==2.14.1 (Requires-Dist of"
        f" {site}/sglang-{version}.dist-info/METADATA on the host); the manifest has torch 2.11.0+cu130"
    ) in messages[0]
    recap = tasks_recap(out)
    assert recap and not [n for n in recap if n.startswith(("Install", "Create the venv", "Compute the release"))]
    # Nothing was built: no release directory (the host lock, <root>/state/host.lock, is taken before preflight).
    releases = f"{RUNTIME_ROOT}/releases"
    root = sh(["podman", "exec", CONTAINER, "sh", "-c", f"test -e {releases} && echo exists || echo absent"])
    assert root.stdout.strip() == "absent"


# ==== end of the runtime block =========================================================================

CASE_IDS = [c.id for c in CASES]
CONTROL = ("control-valid-input", DEPLOY, ["sglang_deploy_serial=1", "sglang_service_port=30001"])
HOST_PLAYS = {
    DEPLOY: "Deploy",
    ROLLBACK: "Roll back to the previous or a named release",
    STOP: "Stop the SGLang service",
}


def play(playbook, extra, forks=None):
    """``ansible-playbook PLAYBOOK -l lab1 -e ...``: the command itself, or forked by ``forks`` (PlaybookForks)."""
    args = [playbook, "-l", "lab1"]
    for value in extra:
        args += ["-e", value]
    proc = forks.run(args, timeout=300) if forks else sh(["ansible-playbook", *args], timeout=300, check=False)
    return {"rc": proc.returncode, "out": proc.stdout + proc.stderr}


@pytest.fixture(scope="module")
def matrix():
    """Run every case (two at a time) against one fresh lab host, then the control case.

    The cases run forked from one Python that has imported ansible-core (playbook_forks: the real
    ansible-playbook, 1.1 CPU-s a case instead of 1.5); the control case and the runs that reach the host run
    the command itself.
    """
    LAB.up()
    forks = PlaybookForks(LAB.env(), REPO)
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {c.id: pool.submit(play, c.values[0].playbook, c.values[0].extra, forks) for c in CASES}
            results = {case_id: future.result() for case_id, future in futures.items()}
        contacted = sh(
            ["podman", "exec", CONTAINER, "sh", "-c", "ls -d /root/.ansible /tmp/.ansible* 2>/dev/null || true"]
        )
        results["_host_ansible_dirs"] = contacted.stdout.split()
        results[CONTROL[0]] = play(CONTROL[1], CONTROL[2])
        results["_stop_without_unit"] = play(STOP, ["sglang_service_unit_name=sglang-never-installed"])
        yield results
    finally:
        forks.close()
        LAB.down()


def validation_task_names(playbook):
    """Names of the tasks that run before a host is contacted: the first play's and the roles' validate entry points."""
    names = set()
    first = yaml.safe_load((REPO / playbook).read_text())
    imported = first[0].get("ansible.builtin.import_playbook")
    if imported:
        first = yaml.safe_load((REPO / playbook).parent.joinpath(imported).read_text())
    names.update(t["name"] for t in first[0]["tasks"])
    entry_points = ("validate", "plan", "defaults")  # controller-only entry points of the roles
    for validate in [path for name in entry_points for path in REPO.glob(f"roles/*/tasks/{name}.yml")]:
        names.update(t["name"] for t in yaml.safe_load(validate.read_text()))
    return names


def tasks_recap(out):
    """Task names listed by the profile_tasks recap at the end of the run."""
    if "TASKS RECAP" not in out:
        return []
    names = []
    for line in out.split("TASKS RECAP", 1)[1].splitlines():
        match = re.match(r"^(?:[\w.]+ : )?(.+?) -+ [0-9.]+s$", line.strip())
        if match:
            names.append(match.group(1))
    return names


def failure_messages(out):
    messages = []
    for line in out.splitlines():
        if re.match(r"^(fatal|failed): \[lab1\]( \(item=[^)]*\))?(: FAILED!)? => ", line):
            data = json.loads(line.split("=> ", 1)[1])
            messages.append(data.get("msg", ""))
    return messages


@pytest.mark.parametrize("bad", CASES)
def test_bad_input_fails_before_the_host_naming_variable_and_allowed_values(matrix, request, bad):
    result = matrix[request.node.callspec.id]
    out = result["out"]
    assert result["rc"] == 2, f"expected a play failure (rc 2), got rc {result['rc']}:\n{out[-3000:]}"
    assert f"PLAY [{HOST_PLAYS[bad.playbook]}]" not in out, "the play that touches hosts started"
    recap = tasks_recap(out)
    assert recap, f"no tasks recap in the output:\n{out[-2000:]}"
    allowed_names = validation_task_names(bad.playbook)
    host_tasks = [n for n in recap if n not in allowed_names and not n.startswith("Validating arguments against")]
    assert host_tasks == []
    messages = failure_messages(out)
    assert len(messages) == 1, out[-3000:]
    assert bad.variable in messages[0]
    for text in bad.allowed:
        assert text in messages[0]
    for text in bad.absent:
        assert text not in out
    assert "[DEPRECATION WARNING]" not in out


def test_the_matrix_lists_at_least_thirty_cases_over_all_three_playbooks():
    assert len(CASE_IDS) == len(set(CASE_IDS)) >= 30
    assert {c.values[0].playbook for c in CASES} == {DEPLOY, ROLLBACK, STOP}


def test_no_case_contacted_the_lab_host(matrix):
    assert matrix["_host_ansible_dirs"] == []


def test_valid_input_reaches_the_host_without_deprecation_warnings(matrix):
    """Control: the same command with valid input passes validation and runs tasks on the host."""
    out = matrix[CONTROL[0]]["out"]
    assert "PLAY [Deploy]" in out, out[-3000:]
    assert "specdec.sglang.sglang_preflight : Check model paths" in out or "Look for config.json" in out
    assert "[DEPRECATION WARNING]" not in out


def test_stop_on_a_host_without_the_unit_says_nothing_to_stop(matrix):
    result = matrix["_stop_without_unit"]
    assert result["rc"] == 0, result["out"][-3000:]
    assert "sglang-never-installed.service is not installed on lab1: nothing to stop" in result["out"]
