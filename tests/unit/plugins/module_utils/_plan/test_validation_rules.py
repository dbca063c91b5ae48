"""validation_rules.check_inputs: every bad input of the former playbook matrix, in seconds, no Ansible runtime.

Each case of tests/integration/test_bad_input_matrix.py (86 ansible-playbook runs until issue 33) is a call
of the pure function here, with the variables as the controller sees them in the lab: every role's
defaults, inventory/group_vars/all and lab, then the case's extra vars (``-e name=value`` arrives as a
string, ``-e '{json}'`` as JSON). The cases the deploy plan refuses (the runtime against sglang's own
requirements, the patch sets by capability) run through ``deploy_plan.build_plan`` with the plan's inputs
taken from the same variables, as roles/sglang_runtime/tasks/plan.yml passes them.
"""

import glob
import json
import os
import pathlib

import jinja2
import jinja2.nativetypes
import pytest
import yaml
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan, validation_rules
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation_rules import check_inputs

REPO = pathlib.Path(__file__).resolve().parents[5]
KNOWN = yaml.safe_load((REPO / validation_rules.KNOWN_RUNTIMES_FILE).read_text())
SPECS = {
    role: yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"][
        "options"
    ]
    for role in validation_rules.ROLES
}
MANAGED_FLAGS = tuple(
    yaml.safe_load((REPO / "roles" / "sglang_service" / "vars" / "main.yml").read_text())[
        "_sglang_service_managed_flags"
    ]
)
SECRET = "s3cret-matrix-key"


class _Loader(yaml.SafeLoader):
    """YAML as Ansible reads it: ``!unsafe`` is a plain string."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load(path: pathlib.Path):
    return yaml.load(path.read_text(), Loader=_Loader)  # a SafeLoader that knows !unsafe


def _yaml_files(*patterns) -> dict:
    found = {}
    for pattern in patterns:
        for path in sorted(REPO.glob(pattern)):
            found.update(load(path) or {})
    return found


def _lookup(name, *args):
    if name == "ansible.builtin.env":
        return {"SPECDEC_REPO": str(REPO), "MOLECULE_PROJECT_DIRECTORY": str(REPO)}.get(args[0], "")
    if name == "ansible.builtin.file":
        return pathlib.Path(args[0]).read_text()
    raise KeyError(name)


def _query(name, pattern):
    assert name == "ansible.builtin.fileglob"
    return sorted(glob.glob(pattern))


def controller_values(extra=None, *, inventory=("all", "lab"), host_vars=None) -> dict:
    """The variables as the controller sees them: the roles' defaults, the inventory, the extra vars, templated.

    A value that cannot be templated yet (a fact of a later step) is left out, as the action defers it.
    """
    raw = _yaml_files(*(f"roles/{role}/defaults/main.yml" for role in validation_rules.ROLES))
    raw.update(_yaml_files(*(f"inventory/group_vars/{group}/*.yml" for group in inventory)))
    raw.update(host_vars or {})
    raw.update(extra or {})
    context = {**raw, "inventory_dir": str(REPO / "inventory"), "inventory_hostname": "lab1"}
    context.update(lookup=_lookup, query=_query, playbook_dir=str(REPO / "playbooks"))
    environment = jinja2.nativetypes.NativeEnvironment(undefined=jinja2.StrictUndefined)
    environment.filters.update(from_json=json.loads, to_json=json.dumps)

    def render(value):
        if isinstance(value, str) and "{{" in value:
            rendered = environment.from_string(value).render(**context)
            if isinstance(rendered, jinja2.Undefined):
                raise jinja2.UndefinedError(value)
            return render(rendered)
        if isinstance(value, dict):
            return {k: render(v) for k, v in value.items()}
        if isinstance(value, list):
            return [render(v) for v in value]
        return value

    values = {}
    for _ in range(4):  # a value templated from another templated value: until nothing changes
        for name, value in raw.items():
            try:
                values[name] = render(value)
            except (jinja2.UndefinedError, OSError):
                continue
        context.update(values)
    return values


def errors_of(values, play="deploy", *, names=(), patch_sets=None, files=None) -> list:
    """check_inputs as the action calls it, the controller's files answered by ``patch_sets`` / ``files``."""
    patch_sets = patch_sets or {}

    def read_patch_set(directory):
        return patch_sets.get(directory, (pathlib.PurePath(directory).name, ""))

    return check_inputs(
        values,
        SPECS,
        play=play,
        names=[*values, *names],
        known_names=(),
        known_runtimes=KNOWN,
        managed_flags=MANAGED_FLAGS,
        read_patch_set=read_patch_set,
        # the controller's files: every one exists but under /nonexistent/ (or only those of ``files``)
        file_exists=(lambda path: "/nonexistent/" not in path) if files is None else files.__contains__,
    )


def extra_vars(extra) -> dict:
    """``-e`` values as ansible-playbook reads them: ``name=value`` a string, ``{...}`` JSON."""
    found = {}
    for item in extra:
        if item.lstrip().startswith("{"):
            found.update(json.loads(item))
        else:
            name, value = item.split("=", 1)
            found[name] = value
    return found


class Bad:
    def __init__(self, playbook, extra, variable, allowed, absent):
        self.playbook, self.extra, self.variable, self.allowed, self.absent = playbook, extra, variable, allowed, absent


def case(case_id, playbook, extra, variable, *allowed, absent=()):
    return pytest.param(Bad(playbook, extra, variable, allowed, absent), id=case_id)


DEPLOY, ROLLBACK, STOP = "deploy", "rollback", "stop"
PASS_LIST = "pass it as JSON: -e '"
# The envelope check before issue 23.5 answered every mistake with every rule of every field.
OLD_ENVELOPE_TEXT = ("allowed keys context_length (int >= 0)", "cuda_graph (bool) and environment")

# ---- the former playbook matrix, case by case (ids and expectations unchanged) ---------------------------
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
    case("ddtree-backend-unset", DEPLOY,
         ['{"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_attention_backend": ""}'],
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
FORMER_MATRIX = list(CASES)  # the 85 cases of the playbook matrix they replaced


def ddtree_knob_cases(short, name, *, with_dflash, unknown, choices, env_name, env_value):
    """A DDTree-only knob's three refusals: set with DFLASH, a value outside its choices, its environment name
    set through sglang_service_environment (the role renders it)."""
    return [
        case(f"ddtree-{short}-with-dflash", DEPLOY, [f"{name}={with_dflash}"], name, 'allowed with DFLASH: ""'),
        case(f"ddtree-{short}-unknown", DEPLOY,
             [json.dumps({"sglang_service_speculative_algorithm": "DDTREE", name: unknown})], name, choices),
        case(f"ddtree-{short}-in-the-environment", DEPLOY,
             [json.dumps({"sglang_service_environment": {env_name: env_value}})], "sglang_service_environment",
             env_name),
    ]  # fmt: skip


# Added since: the DDTree tree builder's variable (2026-12-05) and the step graph's (2026-12-06).
CASES += ddtree_knob_cases(
    "tree-builder", "sglang_service_ddtree_tree_builder", with_dflash="graph", unknown="graphs",
    choices='"", triton, graph, eager', env_name="SGLANG_DDTREE_TREE_BUILDER", env_value="eager",
)  # fmt: skip
CASES += ddtree_knob_cases(
    "step-graph", "sglang_service_ddtree_step_graph", with_dflash="0", unknown=3,
    choices='"", 0, 1, 2', env_name="SGLANG_DDTREE_STEP_GRAPH", env_value="0",
)  # fmt: skip

# The cases the deploy plan refuses (specdec.sglang.deploy_plan, after the checks above passed).
PLAN_CASE_IDS = {
    "sglang-0.5.23-over-torch-2.11",
    "kernel-for-another-torch",
    "sglang-version-unknown",
    "ddtree-no-set-for-sglang-version",
    "ddtree-on-a-runtime-no-set-serves",
    "ddtree-backend-unset",
    "ddtree-backend-ignoring-tree-masks",
    "runtime-unknown-version-without-pins",
    "runtime-core-source-unknown",
    "runtime-core-source-not-a-core-package",
}
# What only the lab's real sglang wheel says (the plan names the wheel it read): in the unit test the plan
# reads the known runtime's recorded Requires-Dist, so the wheel's file name is not in the message.
LAB_WHEEL_WORDING = ("Requires-Dist of sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl",)
RULE_CASES = [c for c in CASES if c.id not in PLAN_CASE_IDS]
PLAN_CASES = [c for c in CASES if c.id in PLAN_CASE_IDS]


@pytest.mark.parametrize("bad", RULE_CASES)
def test_a_bad_input_is_refused_naming_the_variable_and_the_allowed_values(bad):
    values = controller_values(extra_vars(bad.extra))
    errors = errors_of(values, bad.playbook)
    assert errors, f"accepted: {bad.extra}"
    message = " | ".join(errors)
    assert bad.variable in message
    for text in bad.allowed:
        assert text in message
    for text in bad.absent:
        assert text not in message


def plan_inputs(values: dict) -> dict:
    """The deploy plan's inputs from the variables, as roles/sglang_runtime/tasks/plan.yml passes them."""
    sglang = dict(values["sglang_runtime_sglang"])
    if sglang.get("source") == "wheel":  # the lab's real wheel is not part of the unit tier: its recorded metadata
        sglang.update(source="index", wheel="")
    return {
        "sglang": sglang,
        "manifest": values.get("sglang_runtime_manifest", []),
        "core_sources": values.get("sglang_runtime_core_sources", {}),
        "python_version": values["sglang_runtime_python_version"],
        "reference_venv": values["sglang_runtime_reference_venv"],
        "cuda_version": values["sglang_runtime_cuda_version"],
        "algorithm": values["sglang_service_speculative_algorithm"],
        "attention_backend": values["sglang_service_attention_backend"],
        "runtime_root": values["sglang_runtime_root"],
        "unit_name": values["sglang_service_unit_name"],
        "config_dir": values["sglang_service_config_dir"],
        "cache_dir": values["sglang_service_cache_dir"],
        "gpus_wanted": 1,
    }


def stub_wheel_metadata(path):
    """A wheelhouse wheel's METADATA from its file name; the stub kernel 0.4.10 pins torch as the real one does."""
    name, version = os.path.basename(str(path)).split("-")[:2]
    requires = "Requires-Dist: torch==2.14.1\n" if (name, version) == ("sglang_kernel", "0.4.10") else ""
    return f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}"


def real_sets():
    return [
        deploy_plan.patch_set_record(str(d), yaml.safe_load((d / "patchset.yml").read_text()))
        for d in sorted((REPO / "patchsets").iterdir())
        if (d / "patchset.yml").is_file()
    ]


def no_controller_files(manifest, sglang, extra_wheels, patch_set_dirs):
    return {"inputs": {}, "inputs_sha256": "0" * 64, "errors": []}


@pytest.mark.parametrize("bad", PLAN_CASES)
def test_a_request_the_plan_cannot_serve_passes_the_checks_and_is_refused_by_the_plan(bad):
    values = controller_values(extra_vars(bad.extra))
    assert errors_of(values) == []  # the variables are well formed: the plan decides
    built = deploy_plan.build_plan(
        plan_inputs(values), KNOWN, real_sets(), stub_wheel_metadata, check_inputs=no_controller_files
    )
    message = " | ".join(built["errors"])
    assert bad.variable in message, message
    for text in bad.allowed:
        if text not in LAB_WHEEL_WORDING:
            assert text in message, message


def test_every_case_of_the_former_matrix_is_here_and_every_playbook_has_cases():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(FORMER_MATRIX) == 85
    assert {c.values[0].playbook for c in CASES} == {DEPLOY, ROLLBACK, STOP}
    assert PLAN_CASE_IDS <= set(ids)


def test_the_repos_own_inputs_pass_the_lab_the_production_hosts_and_the_role_defaults():
    assert errors_of(controller_values()) == []
    assert errors_of(controller_values(inventory=())) == []  # the roles' defaults alone
    for host in ("ct200", "ct129"):
        host_vars = _yaml_files(f"inventory/host_vars/{host}/*.yml")
        assert errors_of(controller_values(inventory=("all",), host_vars=host_vars)) == [], host
    for play in ("rollback", "stop", "diagnose"):
        assert errors_of(controller_values(), play) == [], play


def _converge(scenario: pathlib.Path) -> tuple[dict, tuple]:
    """What a molecule scenario's converge hands the roles: its sglang_* play vars and -e of expect_extra_args,
    and the roles it runs itself (none when it runs playbooks/deploy.yml)."""
    found, roles = {}, []
    for play in load(scenario / "converge.yml") or []:
        for name, value in (play.get("vars") or {}).items():
            if name.startswith("sglang_"):
                found[name] = value
            if name == "expect_extra_args":
                found.update(extra_vars([v for v in value if v != "-e"]))
        roles += [r["role"] if isinstance(r, dict) else r for r in play.get("roles") or []]
    return found, tuple(r.split(".")[-1] for r in roles)


SCENARIOS = sorted(p.parent for p in REPO.glob("molecule/*/converge.yml"))


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_every_molecule_scenarios_inputs_pass(scenario):
    converge, roles = _converge(scenario)
    scenario_vars = _yaml_files(f"molecule/{scenario.name}/vars/*.yml")
    for host in sorted((scenario / "host_vars").glob("*.yml")):
        values = controller_values(converge, host_vars={**scenario_vars, **(load(host) or {})})
        if roles:  # the scenario runs these roles itself: each checks its own variables
            errors = check_inputs(
                values,
                SPECS,
                roles=roles,
                known_runtimes=KNOWN,
                managed_flags=MANAGED_FLAGS,
                read_patch_set=lambda d: (d, ""),
                file_exists=lambda path: True,
            )
        else:
            errors = errors_of(values, names=values)
        assert errors == [], host.name


# ---- the rules added with issues 33-35 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ('abc"def', "a quote or backslash"),
        ("abc'def", "a quote or backslash"),
        ("abc\\def", "a quote or backslash"),
        ("abc\ndef", "a line break"),
        ("abc\rdef", "a line break"),
        ("abc\tdef", "a control character"),
        ("abc\x00def", "a control character"),
        ("abc def", "a space"),
        ("clé-secrète", "a non-ASCII character"),
    ],
)
def test_an_api_key_that_cannot_go_into_an_http_header_is_refused_without_printing_it(key, kind):
    errors = errors_of(controller_values({"sglang_service_api_key": key}))
    assert len(errors) == 1
    assert errors[0].startswith('sglang_service_api_key="<hidden>" holds ' + kind)
    assert "allowed: visible ASCII characters" in errors[0] and "no space, quote or backslash" in errors[0]
    assert key not in errors[0] and key.replace("\n", "\\n") not in errors[0]
    assert "abc" not in errors[0] and "def" not in errors[0].replace("undefined", "")


@pytest.mark.parametrize("key", ["", SECRET, "sk-Abc_123.~+/=", "!#$%&()*+,-./:;<=>?@[]^_`{|}~"])
def test_an_api_key_of_visible_ascii_is_accepted(key):
    assert errors_of(controller_values({"sglang_service_api_key": key})) == []


def test_a_typo_in_a_role_prefix_is_refused_naming_the_closest_variable():
    values = controller_values()
    errors = errors_of(values, names=["sglang_servce_port", "sglang_preflght_gpus", "sglang_runtme_root"])
    assert errors == [
        "sglang_preflght_gpus: no role or playbook reads this variable (did you mean sglang_preflight_gpus?);"
        " remove it or fix its name",
        "sglang_runtme_root: no role or playbook reads this variable (did you mean sglang_runtime_root?);"
        " remove it or fix its name",
        "sglang_servce_port: no role or playbook reads this variable (did you mean sglang_service_port?);"
        " remove it or fix its name",
    ]


def test_names_that_only_share_the_word_sglang_are_not_typos():
    # AWX artifacts (sglang_deploy, set_stats), other tools' variables: not a role's prefix misspelt.
    names = ["sglang_deploy", "sglang_deploy_attempts", "sglang_lab_mode", "sglang_version", "sglang_readiness_x"]
    assert errors_of(controller_values(), names=names) == []


def test_the_typo_check_runs_for_every_entry_playbook():
    for play in ("deploy", "rollback", "stop", "diagnose"):
        errors = errors_of(controller_values(), play, names=["sglang_servce_port"])
        assert errors and "did you mean sglang_service_port?" in errors[0], play


def envelopes(**context_lengths):
    return {
        name: {"context_length": length, "mem_fraction_static": 0.88, "max_running_requests": 4}
        for name, length in context_lengths.items()
    }


def test_a_context_length_beyond_the_ceiling_is_refused_at_validation():
    values = controller_values(
        {
            "sglang_service_envelopes": envelopes(full=99999999999, small=32768),
            "sglang_service_envelope_ladder": ["full"],
        }
    )
    assert errors_of(values) == [
        "sglang_service_envelopes.full.context_length=99999999999 is above 16777216 tokens; allowed: 0 (the model's"
        " own) to 16777216, and at most the target's max_position_embeddings (checked in preflight against its"
        " config.json)"
    ]
    at_ceiling = controller_values(
        {"sglang_service_envelopes": envelopes(full=validation_rules.CONTEXT_LENGTH_CEILING)}
    )
    assert errors_of({**at_ceiling, "sglang_service_envelope_ladder": ["full"]}) == []


QWEN = json.loads((REPO / "tests/unit/fixtures/models/qwen3.6-27b/config.json").read_text())


def test_a_context_length_beyond_the_models_max_position_embeddings_is_refused_text_config_aware():
    limit = QWEN.get("text_config", QWEN)["max_position_embeddings"]
    where = "text_config.max_position_embeddings" if "text_config" in QWEN else "max_position_embeddings"
    found = validation_rules.context_length_errors(
        envelopes(full=limit + 1, small=limit, auto=0), ["full", "small", "auto"], QWEN
    )
    assert found == [
        f"sglang_service_envelopes.full.context_length={limit + 1} is above the target's {where}={limit}"
        " (config.json of sglang_service_model_path); allowed: 0 (the model's own) to " + str(limit)
    ]


def test_the_models_limit_is_read_from_text_config_when_nested_and_from_the_top_when_flat():
    nested = {"max_position_embeddings": 999999, "text_config": {"max_position_embeddings": 4096}}
    flat = {"max_position_embeddings": 4096}
    for config in (nested, flat):
        assert len(validation_rules.context_length_errors(envelopes(full=8192), ["full"], config)) == 1
        assert validation_rules.context_length_errors(envelopes(full=4096), ["full"], config) == []
    # no limit in config.json: nothing to compare with; an envelope outside the ladder is not planned
    assert validation_rules.context_length_errors(envelopes(full=8192), ["full"], {}) == []
    assert validation_rules.context_length_errors(envelopes(full=8192), [], flat) == []


def test_sglangs_own_override_of_the_models_limit_is_respected():
    allowed = envelopes(full=8192)
    allowed["full"]["environment"] = {"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"}
    assert validation_rules.context_length_errors(allowed, ["full"], {"max_position_embeddings": 4096}) == []


PRODUCTION = {"sglang_service_launch_style": "serve"}


def test_a_ddtree_deploy_on_sglang_0_5_23_is_refused_without_the_opt_in_saying_what_was_proven_where():
    request = {
        **PRODUCTION,
        "sglang_service_speculative_algorithm": "DDTREE",
        "sglang_service_attention_backend": "triton",
        "sglang_runtime_sglang_version": "0.5.23",
    }
    errors = errors_of(controller_values(request, inventory=("all",)))
    assert len(errors) == 1
    message = errors[0]
    assert message.startswith(
        "sglang_service_speculative_algorithm=DDTREE on sglang_runtime_sglang.version=0.5.23 with"
        " sglang_service_attention_backend=triton has no GPU record: the runtime sglang 0.5.23: proven nowhere;"
        " DDTREE on sglang 0.5.23 (patch set ddtree-0.5.23): proven in the lab / on a CPU only (no GPU record)"
        " [tests/device/records/2026-12-02-cpu-ddtree-0.5.23"
    )
    assert (
        "Allowed without sglang_runtime_allow_unproven=true: DDTREE on sglang 0.5.17 (attention backend triton);"
        " DFLASH on sglang 0.5.17 (attention backend unset or triton);"
    ) in message
    assert "set sglang_runtime_allow_unproven=true to deploy it anyway" in message
    opted_in = controller_values({**request, "sglang_runtime_allow_unproven": "true"}, inventory=("all",))
    assert errors_of(opted_in) == []


def test_a_backend_the_gpu_record_did_not_run_is_unproven_and_the_default_deploy_is_proven():
    errors = errors_of(controller_values({**PRODUCTION, "sglang_service_attention_backend": "fa3"}, inventory=("all",)))
    assert len(errors) == 1
    assert "attention backend fa3 with DFLASH on sglang 0.5.17 (its GPU record ran triton): proven nowhere" in errors[0]
    assert "tests/device/records/2026-11-30-h200-sglang" in errors[0]
    for backend in ("", "triton"):
        values = controller_values({**PRODUCTION, "sglang_service_attention_backend": backend}, inventory=("all",))
        assert errors_of(values) == [], backend
    ddtree = {
        **PRODUCTION,
        "sglang_service_speculative_algorithm": "DDTREE",
        "sglang_service_attention_backend": "triton",
    }
    assert errors_of(controller_values(ddtree, inventory=("all",))) == []


def test_the_roles_default_backends_pass_the_proven_rule_for_both_algorithms_without_the_opt_in():
    """triton + pytorch (the defaults, what the GPU records ran): DFLASH and DDTREE on 0.5.17 need no opt-in."""
    for algorithm in ("DFLASH", "DDTREE"):
        values = controller_values(
            {**PRODUCTION, "sglang_service_speculative_algorithm": algorithm}, inventory=("all",)
        )
        assert values["sglang_service_attention_backend"] == "triton"
        assert values["sglang_service_sampling_backend"] == "pytorch"
        assert errors_of(values) == [], algorithm


@pytest.mark.parametrize("sampling", ["", "pytorch", "flashinfer"])
def test_the_sampling_backend_choices_pass_validation_and_preflight_decides_on_the_gpu(sampling):
    values = controller_values({**PRODUCTION, "sglang_service_sampling_backend": sampling}, inventory=("all",))
    assert errors_of(values) == []


def test_a_sampling_backend_outside_the_choices_is_refused_naming_them():
    errors = errors_of(controller_values({"sglang_service_sampling_backend": "triton"}))
    assert errors == ['sglang_service_sampling_backend="triton": must be one of "", pytorch, flashinfer']


def test_the_sampling_backend_is_a_managed_flag():
    errors = errors_of(controller_values({"sglang_service_extra_flags": ["--sampling-backend=flashinfer"]}))
    assert len(errors) == 1
    assert errors[0].startswith("sglang_service_extra_flags sets --sampling-backend, which the role manages")


def test_dflash_on_the_unproven_runtime_is_refused_too_and_the_test_double_needs_no_opt_in():
    runtime = {"sglang_runtime_sglang_version": "0.5.23"}
    assert "the runtime sglang 0.5.23: proven nowhere" in " ".join(
        errors_of(controller_values({**PRODUCTION, **runtime}, inventory=("all",)))
    )
    assert errors_of(controller_values(runtime)) == []  # the lab: sglang_service_launch_style=engine_simulator


def test_the_proof_levels_of_each_dimension():
    proofs = validation_rules.proof_of(KNOWN, "0.5.99", "DFLASH", "")
    assert proofs == [{"what": "sglang 0.5.99 (not a known runtime)", "proven": "none", "record": ""}]
    proofs = validation_rules.proof_of(KNOWN, "0.5.17", "DDTREE", "flashinfer")
    assert [p["proven"] for p in proofs] == ["gpu", "gpu", "none"]
    assert [p["proven"] for p in validation_rules.proof_of(KNOWN, "0.5.17", "DDTREE", "triton")] == ["gpu", "gpu"]


def test_every_error_comes_at_once():
    bad = {
        "sglang_service_port": "80",
        "sglang_preflight_gpus": "1,2",
        "sglang_runtime_root": "opt/sglang",
        "sglang_deploy_serial": "0",
        "sglang_service_ddtree_budget": "4",
    }
    errors = errors_of(controller_values(bad))
    assert [e.split("=", 1)[0].split(":", 1)[0] for e in errors] == [
        "sglang_deploy_serial",
        "sglang_service_port",
        "sglang_service_runtime_root",  # its default is sglang_runtime_root's value
        "sglang_preflight_gpus",
        "sglang_runtime_root",
        "sglang_service_ddtree_budget",
    ]


def test_a_role_alone_checks_its_own_variables_and_reads_another_roles_only_for_its_checks_across_roles():
    values = controller_values(
        {"sglang_service_port": "80", "sglang_service_tp_size": "2", "sglang_preflight_gpus": ["0", "1", "2"]}
    )
    preflight = check_inputs(values, SPECS, roles=("sglang_preflight",))
    assert preflight == [
        "sglang_service_tp_size=2 does not divide the 3 GPU(s) of sglang_preflight_gpus / sglang_preflight_gpu_count;"
        " allowed: a divisor of 3 (1, 3)"
    ]
    service = check_inputs(values, SPECS, roles=("sglang_service",))
    assert service == ["sglang_service_port=80: must be in 1024-65535"]
    # a variable of another role that is not set reads as its argument spec's default (tp 1 divides anything)
    alone = check_inputs({"sglang_preflight_gpus": ["0", "1", "2"]}, SPECS, roles=("sglang_preflight",))
    assert alone == []


def test_the_patch_sets_are_read_on_the_controller_each_once():
    sets = {"/sets/a": ("ddtree-0.5.17", ""), "/sets/b": ("ddtree-0.5.17", ""), "/sets/c": ("", "manifest invalid")}
    values = controller_values({"sglang_patches_sets": list(sets)})
    errors = check_inputs(values, SPECS, roles=("sglang_patches",), read_patch_set=sets.__getitem__)
    assert errors == [
        "sglang_patches_sets[2]=/sets/c: manifest invalid",
        'sglang_patches_sets names patch set(s) ddtree-0.5.17 more than once (["ddtree-0.5.17", "ddtree-0.5.17"]);'
        " allowed: each patch set once",
    ]


def test_a_uv_wheel_missing_on_the_controller_is_refused():
    values = controller_values({"sglang_runtime_uv_wheel": "/nonexistent/uv.whl"})
    assert errors_of(values) == [
        "sglang_runtime_uv_wheel=/nonexistent/uv.whl not found on the controller; allowed: a wheel file on the"
        ' controller, or "" to install uv from the index'
    ]


def test_a_rule_for_a_variable_without_an_argument_spec_is_a_bug_of_the_role(monkeypatch):
    monkeypatch.setitem(validation_rules.ROLE_RULES["sglang_service"], "sglang_service_nothing", {"min": 1})
    with pytest.raises(validation_rules.SpecError, match="sglang_service_nothing"):
        check_inputs({}, SPECS, roles=("sglang_service",))


# ---- the wiring: where the checks are called -----------------------------------------------------------------


def test_every_entry_playbook_calls_the_action_for_its_own_play_and_no_jinja_check_is_left():
    for key, play in validation_rules.PLAYS.items():
        text = (REPO / play["playbook"]).read_text()
        assert f"specdec.sglang.validate_inputs:\n        play: {key}\n" in text, play["playbook"]
    for path in [*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("playbooks/*.yml")]:
        assert "sglang_deploy_validated" not in path.read_text(), path
    for role in validation_rules.ROLES:
        tasks = load(REPO / "roles" / role / "tasks" / "validate.yml")
        assert [next(k for k in t if k.startswith("specdec.")) for t in tasks] == ["specdec.sglang.validate_inputs"]
        main = load(REPO / "roles" / role / "tasks" / "main.yml")
        # a role used alone checks its variables first, and nothing skips it (no sglang_deploy_validated gate)
        assert "specdec.sglang.validate_inputs" in main[0] and "when" not in main[0], role
