# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Every input check of the collection, as data and one pure function: ``check_inputs``.

The action ``specdec.sglang.validate_inputs`` hands ``check_inputs`` the play's variables as the
controller sees them (templated), the argument specs of every role (``meta/argument_specs.yml``:
the types, choices and defaults) and the data files (known runtimes, the service's managed flags);
``check_inputs`` returns every error at once. Nothing here reads a file or contacts a host:
the controller's side effects (does a file exist, is a patch set valid) are injected.

- ``ROLE_RULES``: per role, each variable's rule on top of its argument spec (range, pattern, path,
  dict keys; ``validation.check`` applies them).
- ``CROSS_RULES``: checks across variables and across roles, each a function of the converted values;
  one is skipped when a variable it reads is itself invalid (that variable's error says why).
- ``PLAYS``: each entry playbook's own variables and the roles whose variables it checks.
- Unknown names: a role-prefixed variable that no role reads, and a ``sglang_*`` variable whose prefix is
  a typo of one of the roles' or playbooks' prefixes, are refused naming the closest variable.

Every message names the variable, the value found (a secret's value never) and what is allowed.
"""

from __future__ import annotations

import difflib
import json
import re

from ansible_collections.specdec.sglang.plugins.module_utils._plan.model_config import text_config
from ansible_collections.specdec.sglang.plugins.module_utils._plan.replica_plan import (
    PORT_MAX,
    PORT_MIN,
    plan_replicas,
    replica_list,
)
from ansible_collections.specdec.sglang.plugins.module_utils._plan.validation import (
    ENVELOPE_RESERVED_ENVIRONMENT,
    SpecError,
    check,
    convert,
    hide_secret,
    show,
    unknown_variables,
)
from ansible_collections.specdec.sglang.plugins.module_utils._release.release import RELEASE_ID

ROLES = ("sglang_service", "sglang_preflight", "sglang_runtime", "sglang_patches")
# The gateway (playbooks/gateway.yml, rolling.yml) is no role of the deploy: its variables are checked where it
# runs (its validate entry point), and the play-level ones its playbooks read (sglang_gateway_worker_group,
# sglang_gateway_worker_address) stay out of the deploy's unknown-name check.
GATEWAY = "sglang_gateway"
ALL_ROLES = (*ROLES, GATEWAY)
ROLE_PREFIXES = tuple(f"{role}_" for role in ROLES)
PLAY_PREFIXES = ("sglang_deploy_", "sglang_rollback_", "sglang_stop_", "sglang_diagnose_")
KNOWN_RUNTIMES_FILE = "roles/sglang_runtime/files/known_runtimes.yml"
# A context length beyond any model's: 2**24 tokens. config.json's max_position_embeddings bounds it further
# where preflight reads the target (context_length_errors).
CONTEXT_LENGTH_CEILING = 16777216

_GPU_ID = {
    "pattern": r"^([0-9]+|(GPU|MIG)-[0-9a-fA-F-]+|[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$",
    "means": 'a GPU index ("1"), UUID ("GPU-...") or PCI bus id ("0000:41:00.0"); see nvidia-smi -L',
    "unique": True,
}
_UNIT_NAME = {
    "pattern": r"^[A-Za-z0-9][A-Za-z0-9_.@-]*(?<!\.service)$",
    "means": 'a systemd unit name of [A-Za-z0-9_.@-], without ".service"',
}
# A TCP port a service may bind without root (replica_plan owns the range: the replica ports use it too).
_PORT = {"min": PORT_MIN, "max": PORT_MAX}
_ACCOUNT = {"pattern": r"^[a-z_][a-z0-9_-]*$", "means": "a user or group name of [a-z0-9_-]"}
_RELEASE_ID = r"^(%s)?$" % RELEASE_ID  # release.py owns the id; "" is the default here
_BATCH = {"batch_size": True}
_PERCENT = {"min": 0, "max": 100}

ROLE_RULES = {
    "sglang_service": {
        "sglang_service_replica_count": {"min": 0, "max": 64},
        "sglang_service_gateways": {
            "unique": True,
            "pattern": r"^[A-Za-z0-9_.\[\]:-]+$",
            "means": "inventory host names of the gateways (the inventory's gateway group), each once",
        },
        "sglang_service_unit_name": _UNIT_NAME,
        "sglang_service_user": _ACCOUNT,
        "sglang_service_group": _ACCOUNT,
        "sglang_service_home": {"abs_path": True},
        "sglang_service_cache_dir": {"abs_path": True},
        "sglang_service_config_dir": {"abs_path": True},
        "sglang_service_runtime_root": {"abs_path": True},
        "sglang_service_model_path": {"abs_path": True},
        "sglang_service_draft_model_path": {"abs_path": True},
        "sglang_service_read_write_paths": {"abs_path": True, "unique": True},
        "sglang_service_report_dir": {"abs_path": True, "allow_empty": True},
        "sglang_service_release_id": {"pattern": _RELEASE_ID, "means": 'a release id of [A-Za-z0-9._-] (or "")'},
        "sglang_service_keep_releases": {"min": 1, "max": 100},
        "sglang_service_lock_timeout_s": {"min": 0, "max": 86400},
        "sglang_service_lock_max_age_s": {"min": 60},
        "sglang_service_served_model_name": {
            "pattern": r"^[A-Za-z0-9._/:-]*$",
            "means": 'a model name of [A-Za-z0-9._/:-] (or "")',
        },
        "sglang_service_host": {
            "pattern": r"^[A-Za-z0-9.:-]+$",
            "means": "an IP address or host name such as 127.0.0.1",
        },
        "sglang_service_port": _PORT,
        "sglang_service_tp_size": {"min": 1, "max": 64},
        "sglang_service_attention_backend": {
            "pattern": r"^[a-z0-9_]*$",
            "means": 'an attention backend name of [a-z0-9_] (or "")',
        },
        "sglang_service_dflash_block_size": {"min": 1, "max": 1024},
        "sglang_service_speculative_num_draft_tokens": {"min": 1, "max": 1024},
        "sglang_service_ddtree_budget": {"min": 0},
        "sglang_service_extra_flags": {
            "pattern": r"^--[a-z0-9][a-z0-9-]*(=[^\s\"'\\$%`]+)?$",
            "means": "one token '--name' or '--name=value' without whitespace, quotes, '$' or '%'",
        },
        # Every envelope, field by field (validation.check_envelope).
        "sglang_service_envelopes": {"envelopes": True},
        "sglang_service_envelope_ladder": {
            "non_empty": True,
            "unique": True,
            "means": "names of sglang_service_envelopes",
        },
        "sglang_service_ladder_failure_classes": {
            "pattern": r"^[a-z_]+$",
            "means": "failure class names such as cuda_oom",
        },
        "sglang_service_gpu_uuids": {
            "pattern": r"^(GPU|MIG)-[0-9A-Za-z/-]+$",
            "means": 'a GPU UUID ("GPU-...") or MIG UUID ("MIG-...")',
        },
        "sglang_service_environment": {
            "key_pattern": r"^[A-Z_][A-Z0-9_]*$",
            "means": "environment variable names of [A-Z0-9_]",
            "keys_not_in": list(ENVELOPE_RESERVED_ENVIRONMENT),
            "value_pattern": r"^[^\n\r]*$",
            "value_means": "a one-line string, number or boolean",
        },
        "sglang_service_limits": {
            "keys": ["NOFILE", "MEMLOCK", "NPROC", "CORE", "STACK"],
            "value_pattern": r"^([0-9]+|infinity)$",
            "value_means": 'a number or "infinity"',
        },
        "sglang_service_restart_sec_s": {"min": 1},
        "sglang_service_start_limit_burst": {"min": 1},
        "sglang_service_start_limit_interval_s": {"min": 1},
        "sglang_service_stop_timeout_s": {"min": 1},
        "sglang_service_startup_timeout_s": {"min": 1},
        "sglang_service_readiness_poll_interval_s": {"min": 0.05, "max": 60},
        "sglang_service_readiness_async_margin_s": {"min": 0},
        "sglang_service_settle_s": {"min": 0, "max": 3600},
        "sglang_service_probe": {
            "keys": ["prompt", "max_new_tokens", "temperature", "timeout", "api", "expect_regex", "require_text"],
            "required_keys": ["prompt"],
        },
        "sglang_service_min_accept_length": {"min": 0},
        "sglang_service_watch_interval_s": {"min": 5, "max": 86400},
        "sglang_service_watch_timeout_s": {"min": 2, "max": 3600},
        "sglang_service_watch_probe_timeout_s": {"min": 1, "max": 3600},
        "sglang_service_watch_min_accept_length": {"min": 0},
        "sglang_service_watch_restart_min_interval_s": {"min": 0},
        "sglang_service_watch_python": {"abs_path": True},
        "sglang_service_metrics_textfile_dir": {"abs_path": True, "allow_empty": True},
    },
    "sglang_preflight": {
        "sglang_preflight_gpus": _GPU_ID,
        "sglang_preflight_excluded_gpus": _GPU_ID,
        "sglang_preflight_gpu_count": {"min": 0, "max": 64},
        "sglang_preflight_busy_memory_mb": {"min": 0},
        "sglang_preflight_min_free_memory_mb": {"min": 0},
        "sglang_preflight_expected_gpu_count": {"min": 0, "max": 64},
        "sglang_preflight_required_cuda_version": {
            "pattern": r"^[0-9]+\.[0-9]+$",
            "means": 'a CUDA version such as "13.0"',
        },
        "sglang_preflight_nvidia_smi": {
            "non_empty": True,
            "pattern": r"^[^\s]+$",
            "means": "an executable name or path without whitespace",
        },
        "sglang_preflight_nvidia_smi_timeout_s": {"min": 1, "max": 3600},
        "sglang_preflight_disk_path": {"abs_path": True, "allow_empty": True},
        "sglang_preflight_min_free_disk_gb": {"min": 0},
        "sglang_preflight_model_integrity_manifest_dir": {"abs_path": True, "allow_empty": True},
        "sglang_preflight_assumed_gpu_memory_mb": {"min": 0},
        "sglang_preflight_cuda_context_mb": {"min": 0},
    },
    "sglang_runtime": {
        "sglang_runtime_root": {"abs_path": True},
        "sglang_runtime_python_interpreter": {"abs_path": True, "allow_empty": True},
        "sglang_runtime_reference_venv": {"abs_path": True, "allow_empty": True},
        "sglang_runtime_python_version": {"pattern": r"^3\.[0-9]+$", "means": 'a Python version such as "3.12"'},
        "sglang_runtime_supported_python_versions": {
            "pattern": r"^3\.[0-9]+$",
            "means": 'Python versions such as "3.12"',
            "non_empty": True,
        },
        "sglang_runtime_cuda_version": {"pattern": r"^[0-9]+\.[0-9]+$", "means": 'a CUDA version such as "13.0"'},
        "sglang_runtime_uv_version": {"pattern": r"^[0-9]+(\.[0-9]+)*$", "means": 'a uv version such as "0.13.9"'},
        "sglang_runtime_sglang_version": {
            "pattern": r"^[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?(\.post[0-9]+)?$",
            "means": 'an sglang version such as "1.2.3"',
        },
        "sglang_runtime_sglang": {
            "keys": ["version", "source", "wheel", "sha256", "git_url", "git_ref", "no_deps"],
            "required_keys": ["version", "source"],
        },
        "sglang_runtime_verify_timeout_s": {"min": 1},
        "sglang_runtime_cuda_check_timeout_s": {"min": 1},
    },
    "sglang_patches": {
        "sglang_patches_sets": {
            "unique": True,
            "pattern": r"^[^\s]+$",
            "means": "a patch set directory on the controller",
        },
        "sglang_patches_release_dir": {"abs_path": True},
        "sglang_patches_venv_dir": {"abs_path": True},
        "sglang_patches_source_tree": {"abs_path": True, "allow_empty": True},
    },
    GATEWAY: {
        "sglang_gateway_workers": {
            "non_empty": True,
            "unique": True,
            "pattern": r"^https?://([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):[0-9]+$",
            "means": "a worker URL http://<address>:<port> (IPv6 in brackets, no path; each once: playbooks/gateway.yml"
            " lists every replica of the worker group)",
        },
        "sglang_gateway_port": _PORT,
        "sglang_gateway_prometheus_port": _PORT,
        "sglang_gateway_root": {"abs_path": True},
        "sglang_gateway_smg_version": {"pattern": r"^[0-9]+(\.[0-9]+)*$", "means": 'an smg version such as "1.13.0"'},
        "sglang_gateway_uv_version": {"pattern": r"^[0-9]+(\.[0-9]+)*$", "means": 'a uv version such as "0.13.9"'},
        "sglang_gateway_unit_name": _UNIT_NAME,
        "sglang_gateway_user": _ACCOUNT,
        "sglang_gateway_group": _ACCOUNT,
        "sglang_gateway_home": {"abs_path": True},
        "sglang_gateway_config_dir": {"abs_path": True},
        "sglang_gateway_health_check_interval_s": {"min": 1},
        "sglang_gateway_health_check_timeout_s": {"min": 1},
        "sglang_gateway_health_failure_threshold": {"min": 1},
        "sglang_gateway_health_success_threshold": {"min": 1},
        "sglang_gateway_retry_max_retries": {"min": 0},
        "sglang_gateway_request_timeout_s": {"min": 1},
        "sglang_gateway_shutdown_grace_period_s": {"min": 0},
        "sglang_gateway_worker_startup_timeout_s": {"min": 1},
        "sglang_gateway_ready_timeout_s": {"min": 1},
        "sglang_gateway_drain_timeout_s": {"min": 1},
    },
}

# Each entry playbook: its own variables (spec and rule; docs/variables.md lists them) and the roles it checks.
_DEPLOY_SPECS = {
    "sglang_deploy_serial": ({"type": "raw"}, _BATCH),
    "sglang_deploy_max_fail_percentage": ({"type": "float"}, _PERCENT),
    # playbooks/rolling.yml: replicas that stay healthy in the gateway while one is restarted
    # (replica_plan.rolling_order checks it against the number of replicas).
    "sglang_deploy_min_serving": ({"type": "int"}, {"min": 1}),
}
PLAYS = {
    "deploy": {
        "playbook": "playbooks/deploy.yml",
        "roles": ROLES,
        "variables": {
            **_DEPLOY_SPECS,
            "sglang_deploy_patch_sets": ({"type": "list", "elements": "str"}, {"unique": True}),
        },
    },
    "rollback": {
        "playbook": "playbooks/rollback.yml",
        "roles": ("sglang_service",),
        "variables": {
            "sglang_rollback_release": (
                {"type": "str"},
                {
                    "pattern": _RELEASE_ID,
                    "means": 'a release id of [A-Za-z0-9._-] (a directory under <root>/releases), or "" for the'
                    " previous good release",
                },
            ),
            **_DEPLOY_SPECS,
        },
    },
    "stop": {
        "playbook": "playbooks/stop.yml",
        "roles": ("sglang_service",),
        "variables": {"sglang_stop_disable": ({"type": "bool"}, {})},
    },
    "diagnose": {
        "playbook": "playbooks/diagnose.yml",
        "roles": ("sglang_service",),
        "variables": {
            "sglang_diagnose_dir": ({"type": "path"}, {}),
            "sglang_diagnose_starts": ({"type": "int"}, {"min": 1, "max": 100}),
        },
    },
}


# --- checks across variables ------------------------------------------------------------------------------
# Each: (the role that owns it, the variables it reads, the function of their converted values -> messages).
# A variable a check reads that is not set anywhere reads as its argument spec's default.


def _divisors(number: int) -> str:
    return ", ".join(str(d) for d in range(1, number + 1) if number % d == 0)


def gpus_wanted(gpus: list, gpu_count: int, tp_size: int, replicas: int = 1) -> int:
    """The number of GPUs a host gives the service: the GPUs listed, else the count asked, else the TP size of
    each of its replicas."""
    return len(gpus) or gpu_count or tp_size * replicas


def _preflight_gpus(v: dict) -> list[str]:
    errors = []
    gpus = [str(g) for g in v["sglang_preflight_gpus"]]
    excluded = [str(g) for g in v["sglang_preflight_excluded_gpus"]]
    expected = v["sglang_preflight_expected_gpu_count"]
    beyond = [g for g in gpus if g.isdigit() and expected > 0 and int(g) >= expected]
    if beyond:
        errors.append(
            f"sglang_preflight_gpus={show(gpus)}: GPU index(es) {', '.join(beyond)} do not exist on a host with"
            f" sglang_preflight_expected_gpu_count={expected} GPUs; allowed indices 0-{expected - 1}"
        )
    both = [g for g in gpus if g in excluded]
    if both:
        errors.append(
            f"sglang_preflight_excluded_gpus={show(excluded)}: GPU(s) {', '.join(both)} are in both"
            " sglang_preflight_gpus and sglang_preflight_excluded_gpus; allowed: each GPU in one of them"
        )
    return errors


def _preflight_tp_divides(v: dict) -> list[str]:
    tp = v["sglang_service_tp_size"]
    wanted = gpus_wanted(v["sglang_preflight_gpus"], v["sglang_preflight_gpu_count"], tp)
    if tp < 1 or wanted % tp == 0:
        return []
    return [
        f"sglang_service_tp_size={tp} does not divide the {wanted} GPU(s) of sglang_preflight_gpus /"
        f" sglang_preflight_gpu_count; allowed: a divisor of {wanted} ({_divisors(wanted)})"
    ]


def _runtime_python(v: dict) -> list[str]:
    version = v["sglang_runtime_python_version"]
    supported = [str(s) for s in v["sglang_runtime_supported_python_versions"]]
    if version in supported:
        return []
    sglang = v["sglang_runtime_sglang"].get("version", "")
    return [
        f"sglang_runtime_python_version={show(version)} is not supported by sglang {sglang}; allowed:"
        f" {', '.join(supported)} (sglang_runtime_supported_python_versions)"
    ]


def _runtime_source(v: dict) -> list[str]:
    sglang = v["sglang_runtime_sglang"]
    source = sglang.get("source")
    if source == "index" or (source == "wheel" and sglang.get("wheel")):
        return []
    if source == "git" and sglang.get("git_url") and sglang.get("git_ref"):
        return []
    return [
        f"sglang_runtime_sglang.source={show(source)}: allowed: index, wheel (with wheel: a controller path)"
        " or git (with git_url and git_ref)"
    ]


def _service_test_double(v: dict) -> list[str]:
    if v["sglang_service_launch_style"] != "engine_simulator" or v["sglang_service_allow_test_double"]:
        return []
    return [
        "sglang_service_launch_style=engine_simulator is the lab's test double and needs"
        " sglang_service_allow_test_double=true (only the lab inventory sets it); allowed in production:"
        " serve, launch_server"
    ]


def _service_draft_tokens(v: dict) -> list[str]:
    tokens, block = v["sglang_service_speculative_num_draft_tokens"], v["sglang_service_dflash_block_size"]
    if tokens == block:
        return []
    return [
        f"sglang_service_speculative_num_draft_tokens={tokens} must equal sglang_service_dflash_block_size={block}"
        " (the draft's block size, 16 for z-lab drafts)"
    ]


# The DDTree set's knobs, each with the value that leaves the set's default (the only one DFLASH allows).
_DDTREE_ONLY = {
    "sglang_service_ddtree_budget": 0,
    "sglang_service_ddtree_tree_builder": "",
    "sglang_service_ddtree_step_graph": "",
}


def _service_ddtree(v: dict) -> list[str]:
    errors = []
    algorithm, tp = v["sglang_service_speculative_algorithm"], v["sglang_service_tp_size"]
    for name, unset in _DDTREE_ONLY.items():
        if algorithm != "DDTREE" and v[name] != unset:
            errors.append(
                f"{name}={v[name]} is for sglang_service_speculative_algorithm=DDTREE only"
                f" (found {algorithm}); allowed with {algorithm}: {json.dumps(unset)}"
            )
    if algorithm == "DDTREE" and tp != 1:
        errors.append(
            f"sglang_service_speculative_algorithm=DDTREE needs sglang_service_tp_size=1 (found {tp}; the DDTree set"
            " verifies on one rank); allowed with tp > 1: DFLASH"
        )
    return errors


def _service_ladder(v: dict) -> list[str]:
    envelopes = v["sglang_service_envelopes"]
    unknown = [n for n in v["sglang_service_envelope_ladder"] if n not in envelopes]
    if not unknown:
        return []
    return [
        f"sglang_service_envelope_ladder={show(v['sglang_service_envelope_ladder'])} names unknown envelope(s)"
        f" {', '.join(map(str, unknown))}; allowed: names of sglang_service_envelopes ({', '.join(envelopes)})"
    ]


def _service_timeouts(v: dict) -> list[str]:
    errors = []
    timeout = v["sglang_service_probe"].get("timeout")
    startup = v["sglang_service_startup_timeout_s"]
    number, bad = convert("sglang_service_probe.timeout", timeout, "float") if timeout is not None else (None, [])
    if bad:
        errors.extend(bad)
    elif number is not None and number >= startup:
        errors.append(
            f"sglang_service_probe.timeout={show(timeout)} must be below sglang_service_startup_timeout_s={startup}"
        )
    watch_probe, watch = v["sglang_service_watch_probe_timeout_s"], v["sglang_service_watch_timeout_s"]
    if watch_probe >= watch:
        errors.append(
            f"sglang_service_watch_probe_timeout_s={watch_probe} must be below sglang_service_watch_timeout_s={watch}"
            " (a hung generation is judged wedged within the watch timeout)"
        )
    return errors


# What an HTTP header value (Authorization: Bearer <key>) carries without quoting: visible ASCII, no quote or
# backslash (the key is also written into the env file and the --config YAML).
API_KEY_ALLOWED = (
    "visible ASCII characters (letters, digits and !#$%&()*+,-./:;<=>?@[]^_`{|}~), no space, quote or backslash"
)
_API_KEY_CHAR = re.compile(r"[!#-&(-\[\]-~]")


def _api_key_problem(key: str) -> str:
    """What makes ``key`` unfit for an HTTP header ("" when it fits), without any character of the key."""
    kinds = []
    for char in key:
        if _API_KEY_CHAR.fullmatch(char):
            continue
        if char in "\r\n":
            kind = "a line break"
        elif ord(char) > 126:
            kind = "a non-ASCII character"
        elif ord(char) < 32 or ord(char) == 127:
            kind = "a control character"
        elif char == " ":
            kind = "a space"
        else:
            kind = "a quote or backslash"
        if kind not in kinds:
            kinds.append(kind)
    return " and ".join(kinds)


def _service_api_key(v: dict) -> list[str]:
    problem = _api_key_problem(v["sglang_service_api_key"])
    if not problem:
        return []
    return [
        f'sglang_service_api_key="<hidden>" holds {problem}, which an HTTP header (Authorization: Bearer) cannot'
        f" carry; allowed: {API_KEY_ALLOWED}"
    ]


def _service_context_ceiling(v: dict) -> list[str]:
    errors = []
    for name, envelope in v["sglang_service_envelopes"].items():
        length = envelope.get("context_length") if isinstance(envelope, dict) else None
        if isinstance(length, bool) or not isinstance(length, (int, str)) or not str(length).strip().isdigit():
            continue  # the envelope's own check names it
        if int(length) > CONTEXT_LENGTH_CEILING:
            errors.append(
                f"sglang_service_envelopes.{name}.context_length={show(length)} is above {CONTEXT_LENGTH_CEILING}"
                f" tokens; allowed: 0 (the model's own) to {CONTEXT_LENGTH_CEILING}, and at most the target's"
                " max_position_embeddings (checked in preflight against its config.json)"
            )
    return errors


def _managed_flags(v: dict, managed: tuple) -> list[str]:
    found = [f.split("=", 1)[0] for f in v["sglang_service_extra_flags"] if f.split("=", 1)[0] in managed]
    if not found:
        return []
    return [
        f"sglang_service_extra_flags sets {', '.join(found)}, which the role manages; set the matching"
        f" sglang_service_* variable instead (managed: {' '.join(managed)})"
    ]


# --- unproven combinations (issue 34.4) -------------------------------------------------------------------
PROOF_WORDS = {
    "gpu": "on a GPU",
    "lab": "in the lab / on a CPU only (no GPU record)",
    "none": "nowhere",
}


def proof_of(known: dict, version: str, algorithm: str, backend: str) -> list[dict]:
    """Where each dimension of the combination was proven: ``[{what, proven, record}]``, one per dimension.

    ``known`` is ``known_runtimes.yml``. The dimensions: the runtime (sglang ``version`` and its core), the
    ``algorithm`` on it (with the patch set its record ran), an explicitly chosen attention ``backend``
    (the backends the algorithm's GPU record named). The combination is proven when every dimension is
    ``gpu``. An unset backend (sglang chooses per GPU) is not a dimension here: preflight checks the GPUs'
    compiled code.
    """
    runtime = (known.get("runtimes") or {}).get(version)
    if runtime is None:
        return [{"what": f"sglang {version} (not a known runtime)", "proven": "none", "record": ""}]
    found = [
        {
            "what": f"the runtime sglang {version}",
            "proven": str(runtime.get("proven") or "none"),
            "record": str(runtime.get("record") or ""),
        }
    ]
    combination = (runtime.get("algorithms") or {}).get(algorithm) or {}
    patch_set = combination.get("patch_set")
    found.append(
        {
            "what": f"{algorithm} on sglang {version}" + (f" (patch set {patch_set})" if patch_set else ""),
            "proven": str(combination.get("proven") or "none"),
            "record": str(combination.get("record") or ""),
        }
    )
    backends = [str(b) for b in combination.get("attention_backends") or []]
    if backend and backend not in backends and found[-1]["proven"] == "gpu":
        found.append(
            {
                "what": f"attention backend {backend} with {algorithm} on sglang {version} (its GPU record ran"
                f" {', '.join(backends) or 'none'})",
                "proven": "none",
                "record": "",
            }
        )
    return found


def proven_summary(known: dict) -> str:
    """The combinations with a GPU record, as one phrase."""
    found = []
    for number, runtime in sorted((known.get("runtimes") or {}).items()):
        if runtime.get("proven") != "gpu":
            continue
        for algorithm, combination in sorted((runtime.get("algorithms") or {}).items()):
            if combination.get("proven") == "gpu":
                backends = ", ".join(combination.get("attention_backends") or [])
                # an algorithm served by a patch set needs a backend the set serves; sglang's choice otherwise
                unset = "" if combination.get("patch_set") else "unset or "
                found.append(f"{algorithm} on sglang {number} (attention backend {unset}{backends})")
    return "; ".join(found) or "none"


def _unproven(v: dict, known: dict) -> list[str]:
    if v["sglang_runtime_allow_unproven"] or v["sglang_service_launch_style"] == "engine_simulator":
        return []  # the lab's test double runs nothing of the runtime on a GPU
    version = str(v["sglang_runtime_sglang"].get("version") or "")
    algorithm = v["sglang_service_speculative_algorithm"]
    backend = v["sglang_service_attention_backend"]
    proofs = proof_of(known, version, algorithm, backend)
    if all(p["proven"] == "gpu" for p in proofs):
        return []
    where = "; ".join(
        f"{p['what']}: proven {PROOF_WORDS.get(p['proven'], p['proven'])}"
        + (f" [{p['record']}]" if p["record"] else "")
        for p in proofs
    )
    return [
        f"sglang_service_speculative_algorithm={algorithm} on sglang_runtime_sglang.version={version}"
        + (f" with sglang_service_attention_backend={backend}" if backend else "")
        + f" has no GPU record: {where}. Allowed without sglang_runtime_allow_unproven=true: {proven_summary(known)};"
        " set sglang_runtime_allow_unproven=true to deploy it anyway"
    ]


def _service_replicas(v: dict) -> list[str]:
    """The replica list against the GPUs, tp size and port (replica_plan.plan_replicas), before any host."""
    replicas = replica_list(v["sglang_service_replicas"], v["sglang_service_replica_count"])
    gpus = [str(g) for g in v["sglang_preflight_gpus"]]
    count = v["sglang_preflight_gpu_count"]
    if not gpus and count and not any(isinstance(r, dict) and r.get("gpus") for r in replicas):
        # the count preflight will select: replicas that derive their GPUs must fit in it
        gpus = [f"(selected GPU {i + 1} of sglang_preflight_gpu_count={count})" for i in range(count)]
    return plan_replicas(
        gpus, v["sglang_service_tp_size"], v["sglang_service_port"], replicas, unit_name=v["sglang_service_unit_name"]
    )[1]


def _gateway_ports(v: dict) -> list[str]:
    port = v["sglang_gateway_port"]
    if port != v["sglang_gateway_prometheus_port"]:
        return []
    return [
        f"sglang_gateway_port and sglang_gateway_prometheus_port are both {port}; allowed: two different ports"
        " (the gateway's and its metrics')"
    ]


def _gateway_smg_wheel(v: dict) -> list[str]:
    wheels, version = [str(w) for w in v["sglang_gateway_wheels"]], v["sglang_gateway_smg_version"]
    if not wheels or any(w.rsplit("/", 1)[-1].startswith(f"smg-{version}-") for w in wheels):
        return []
    return [
        f"sglang_gateway_wheels={show(wheels)} has no smg-{version} wheel (sglang_gateway_smg_version={version});"
        " allowed: the smg wheel of sglang_gateway_smg_version among them, or [] to install from the index"
    ]


_REPLICA_NEEDS = (
    "sglang_service_replicas",
    "sglang_service_replica_count",
    "sglang_preflight_gpus",
    "sglang_service_tp_size",
    "sglang_service_port",
    "sglang_preflight_gpu_count",
    "sglang_service_unit_name",
)
_SERVICE_TIMEOUTS = (
    "sglang_service_probe",
    "sglang_service_startup_timeout_s",
    "sglang_service_watch_probe_timeout_s",
    "sglang_service_watch_timeout_s",
)
CROSS_RULES = (
    (
        "sglang_preflight",
        ("sglang_preflight_gpus", "sglang_preflight_excluded_gpus", "sglang_preflight_expected_gpu_count"),
        _preflight_gpus,
    ),
    (
        "sglang_preflight",
        ("sglang_preflight_gpus", "sglang_preflight_gpu_count", "sglang_service_tp_size"),
        _preflight_tp_divides,
    ),
    (
        "sglang_runtime",
        ("sglang_runtime_python_version", "sglang_runtime_supported_python_versions", "sglang_runtime_sglang"),
        _runtime_python,
    ),
    ("sglang_runtime", ("sglang_runtime_sglang",), _runtime_source),
    ("sglang_service", ("sglang_service_launch_style", "sglang_service_allow_test_double"), _service_test_double),
    (
        "sglang_service",
        ("sglang_service_speculative_num_draft_tokens", "sglang_service_dflash_block_size"),
        _service_draft_tokens,
    ),
    (
        "sglang_service",
        (
            "sglang_service_speculative_algorithm",
            *_DDTREE_ONLY,
            "sglang_service_tp_size",
        ),
        _service_ddtree,
    ),
    ("sglang_service", ("sglang_service_envelope_ladder", "sglang_service_envelopes"), _service_ladder),
    ("sglang_service", _SERVICE_TIMEOUTS, _service_timeouts),
    ("sglang_service", ("sglang_service_api_key",), _service_api_key),
    ("sglang_service", ("sglang_service_envelopes",), _service_context_ceiling),
    ("sglang_service", _REPLICA_NEEDS, _service_replicas),
    (GATEWAY, ("sglang_gateway_port", "sglang_gateway_prometheus_port"), _gateway_ports),
    (GATEWAY, ("sglang_gateway_wheels", "sglang_gateway_smg_version"), _gateway_smg_wheel),
)
_UNPROVEN_NEEDS = (
    "sglang_runtime_allow_unproven",
    "sglang_runtime_sglang",
    "sglang_service_speculative_algorithm",
    "sglang_service_attention_backend",
    "sglang_service_launch_style",
)


# --- patch sets and controller files --------------------------------------------------------------------


def _patch_sets(v: dict, read_patch_set) -> list[str]:
    """Each patch set valid on the controller (``read_patch_set(dir) -> (name, error)``), no name twice."""
    errors, names = [], []
    for position, directory in enumerate(v["sglang_patches_sets"]):
        name, error = read_patch_set(directory)
        if error:
            errors.append(f"sglang_patches_sets[{position}]={directory}: {error}")
        else:
            names.append(name)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        errors.append(
            f"sglang_patches_sets names patch set(s) {', '.join(twice)} more than once ({show(names)});"
            " allowed: each patch set once"
        )
    return errors


def _deploy_patch_sets(v: dict, file_exists) -> list[str]:
    return [
        f"sglang_deploy_patch_sets[{position}]: {directory} has no patchset.yml; allowed: patch set directories on"
        " the controller (each holding a patchset.yml, such as patchsets/ddtree-0.5.17 of the collection)"
        for position, directory in enumerate(v["sglang_deploy_patch_sets"])
        if not file_exists(f"{str(directory).rstrip('/')}/patchset.yml")
    ]


def _uv_wheel(v: dict, file_exists) -> list[str]:
    wheel = v["sglang_runtime_uv_wheel"]
    if not wheel or file_exists(wheel):
        return []
    return [
        f"sglang_runtime_uv_wheel={wheel} not found on the controller; allowed: a wheel file on the controller,"
        ' or "" to install uv from the index'
    ]


# --- unknown names --------------------------------------------------------------------------------------


def misspelt_prefixes(names, known) -> list[str]:
    """A message for each ``sglang_*`` name whose prefix is a typo of a role's or playbook's prefix.

    ``sglang_servce_port`` starts like ``sglang_service_`` but matches no prefix: nobody reads it. The message
    names the closest variable among ``known``.
    """
    prefixes = ROLE_PREFIXES + PLAY_PREFIXES
    words = [p[len("sglang_") : -1] for p in prefixes]
    messages = []
    for name in sorted(set(names)):
        if not name.startswith("sglang_") or name.startswith(prefixes):
            continue
        word = name[len("sglang_") :].split("_", 1)[0]
        if word in words or not difflib.get_close_matches(word, words, n=1, cutoff=0.75):
            continue
        close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else f"the prefixes are {', '.join(prefixes)}"
        messages.append(f"{name}: no role or playbook reads this variable ({hint}); remove it or fix its name")
    return messages


# --- the function -----------------------------------------------------------------------------------------


def _spec_default(specs: dict, name: str):
    for role_specs in specs.values():
        if name in role_specs:
            return role_specs[name].get("default")
    return None


def check_inputs(
    values: dict,
    specs: dict,
    *,
    roles=ROLES,
    play: str | None = None,
    names=None,
    known_names=(),
    known_runtimes: dict | None = None,
    managed_flags=(),
    read_patch_set=None,
    file_exists=None,
) -> list[str]:
    """Every error of the inputs at once ([] when valid).

    ``values``: the variables as the controller sees them (templated), only those that are set.
    ``specs``: role -> variable -> argument spec (``main`` entry point of ``meta/argument_specs.yml``).
    ``roles``: the roles whose variables and checks apply; ``play``: a key of ``PLAYS`` (adds its variables
    and the unknown-name checks over ``names``, every variable name of the play; ``known_names`` are the
    names a role reads or sets; its roles are the default of ``roles``). ``known_runtimes``:
    ``known_runtimes.yml`` parsed. ``managed_flags``: the flags the service renders itself.
    ``read_patch_set(dir) -> (name, error)`` and ``file_exists(path)`` are the controller's file checks.
    """
    roles = tuple(PLAYS[play]["roles"]) if play and roles is ROLES else tuple(roles)
    errors: list[str] = []
    if play:
        every = set(known_names) | {n for role in specs.values() for n in role} | set(PLAYS[play]["variables"])
        errors += unknown_variables(names or (), every, ROLE_PREFIXES)
        errors += misspelt_prefixes(names or (), every)
    variables = dict(PLAYS[play]["variables"]) if play else {}
    for role in roles:
        rules = ROLE_RULES.get(role, {})
        stray = sorted(set(rules) - set(specs.get(role, {})))
        if stray:
            raise SpecError(f"rules for variables without an argument spec of {role}: {', '.join(stray)}")
        variables.update((name, (specs[role][name] or {}, rules.get(name))) for name in sorted(specs.get(role, {})))
    checked, invalid = _check_each(values, variables, errors)
    effective = _effective(values, specs, checked, invalid)
    cross = [(needs, rule, ()) for role, needs, rule in CROSS_RULES if role in roles]
    cross += _data_rules(
        roles,
        play,
        known_runtimes=known_runtimes,
        managed_flags=managed_flags,
        read_patch_set=read_patch_set,
        file_exists=file_exists,
    )
    for needs, rule, extra in cross:
        if all(n in effective for n in needs):
            errors.extend(rule({n: effective[n] for n in needs}, *extra))
    return errors


def _data_rules(roles, play, *, known_runtimes, managed_flags, read_patch_set, file_exists) -> list:
    """The checks across variables that read data files or the controller's files: (needs, rule, extra args)."""
    rules = []
    if "sglang_service" in roles:
        rules.append((("sglang_service_extra_flags",), _managed_flags, (tuple(managed_flags),)))
    if "sglang_runtime" in roles:
        rules.append((_UNPROVEN_NEEDS, _unproven, (known_runtimes or {},)))
        if file_exists is not None:
            rules.append((("sglang_runtime_uv_wheel",), _uv_wheel, (file_exists,)))
    if play == "deploy" and file_exists is not None:
        rules.append((("sglang_deploy_patch_sets",), _deploy_patch_sets, (file_exists,)))
    if "sglang_patches" in roles and read_patch_set is not None:
        rules.append((("sglang_patches_sets",), _patch_sets, (read_patch_set,)))
    return rules


def _check_each(values: dict, variables: dict, errors: list) -> tuple[dict, set]:
    """Each variable against its spec and rule (errors appended); its converted value when valid."""
    checked, invalid = {}, set()
    for name, (spec, rule) in variables.items():
        if name not in values:
            if spec.get("required"):
                errors.append(f"{name}: is required and not set; see docs/variables.md")
                invalid.add(name)
            continue
        found = check(name, values[name], spec, rule)
        if spec.get("no_log"):
            found = [hide_secret(m, values[name]) for m in found]
        if found:
            errors.extend(found)
            invalid.add(name)
            continue
        type_ = spec.get("type", "str")
        checked[name] = values[name] if type_ == "raw" else convert(name, values[name], type_, spec.get("elements"))[0]
    return checked, invalid


def _effective(values: dict, specs: dict, checked: dict, invalid: set) -> dict:
    """Converted values for the checks across variables: checked ones, else converted ones, else spec defaults."""
    effective = dict(checked)
    types = {n: s or {} for role in specs.values() for n, s in role.items()}
    for name, spec in types.items():
        if name in invalid:
            continue
        if name in checked:
            effective[name] = checked[name]
            continue
        raw = values[name] if name in values else _spec_default(specs, name)
        if raw is None or (isinstance(raw, str) and "{{" in raw):
            continue
        type_ = spec.get("type", "str")
        converted, bad = (raw, []) if type_ == "raw" else convert(name, raw, type_, spec.get("elements"))
        if not bad:
            effective[name] = converted
    return effective


def context_length_errors(envelopes: dict, ladder, config: dict) -> list[str]:
    """Each envelope of ``ladder`` whose context_length exceeds the target's ``max_position_embeddings``.

    ``config`` is the target's config.json (``text_config`` read when the checkpoint nests it). sglang
    refuses such a length at start (unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN is set in the
    envelope's environment); refused here before the unit starts. 0 (the model's own) always fits.
    """
    text = text_config(config)
    limit = text.get("max_position_embeddings")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        return []
    where = "text_config.max_position_embeddings" if text is not config else "max_position_embeddings"
    errors = []
    for name in ladder or []:
        envelope = (envelopes or {}).get(name)
        if not isinstance(envelope, dict):
            continue
        length = envelope.get("context_length")
        if isinstance(length, bool) or not str(length or 0).strip().isdigit():
            continue
        environment = envelope.get("environment") or {}
        if str(environment.get("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "")).lower() in ("1", "true"):
            continue
        if int(length) > limit:
            errors.append(
                f"sglang_service_envelopes.{name}.context_length={int(length)} is above the target's {where}={limit}"
                f" (config.json of sglang_service_model_path); allowed: 0 (the model's own) to {limit}"
            )
    return errors
