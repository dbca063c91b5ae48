#!/usr/bin/python
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_readiness
short_description: Prove an SGLang server generates tokens, or say why it cannot
version_added: 0.1.0
author: specdec maintainers (@specdec)
description:
  - Watches a started SGLang service until it has really generated output tokens, and fails with a
    classified reason (failure class, exception, last traceback, hint) as soon as it cannot.
  - Every O(poll_interval) the systemd unit (O(unit)) or the process (O(pid) / O(pidfile)) is checked
    first. A unit that is failed, inactive or exited, or that systemd restarted (C(NRestarts) grew, the
    main PID or the invocation changed), ends the wait within one poll, never at the deadline. Where
    the host has pidfds (Linux 5.3+), the wait between checks ends as soon as the main process exits,
    so a death is judged within milliseconds rather than at the next poll.
  - After a death the unit's journal is synced (C(journalctl --sync)) and read; it is read again (at
    most 2 s) until systemd's end-of-start lines are in it and the last traceback has its exception
    line, or, without the sync (not root), until it also stops growing. systemd's own lines about the
    unit are put after the process's output.
  - Port closed means the model is still loading; C(/health) 503 means warming up. Neither is a failure;
    only O(startup_timeout) ends a slow start, and the last load-progress line of the log is reported.
  - Once C(/health) answers 200 (or does not answer within 1 s, so the engine is past start-up), a real
    generation is sent (C(POST /generate) or C(POST /v1/chat/completions)). It must finish within
    O(probe.timeout) with C(completion_tokens > 0) and a finish reason other than C(abort). A
    generation that hangs while C(/v1/models) answers is C(wedged), never ready.
  - The log of this start (the unit's C(InvocationID) in the journal, or O(log_file)) is returned bounded
    by O(journal_max_bytes) from the end, but never cutting the last traceback.
  - For loads that take minutes, run the task with C(async) and C(poll) so the SSH session does not time
    out (see EXAMPLES).
options:
  unit:
    description:
      - systemd unit to watch, for example C(sglang.service).
      - Mutually exclusive with O(pid) and O(pidfile); one of the three is required.
    type: str
  pid:
    description:
      - On hosts without systemd, the PID of the sglang server process to watch.
    type: int
  pidfile:
    description:
      - On hosts without systemd, a file holding the PID of the sglang server process. Re-read every
        poll; a new live PID there counts as a restart. It must exist when the module starts.
    type: path
  log_file:
    description:
      - With O(pid) or O(pidfile), the file the server logs to (read from the end). Use a fresh file per
        start, or older starts' lines may be reported. Ignored with O(unit) (the journal is read).
    type: path
  base_url:
    description:
      - Base URL of the SGLang HTTP server (the service role passes its host and port).
    type: str
    required: true
  startup_timeout:
    description:
      - The whole budget in seconds, loading and probing included. Only a slow start ends here
        (class C(timeout)); a dead or restarting process ends the wait at once.
    type: float
    default: 900
  poll_interval:
    description:
      - Seconds between checks of the process and the HTTP server.
    type: float
    default: 0.5
  probe:
    description:
      - The test generation.
    type: dict
    default: {}
    suboptions:
      prompt:
        description: Prompt sent to the model.
        type: str
        default: Say hi.
      max_new_tokens:
        description: Tokens to generate.
        type: int
        default: 16
      temperature:
        description: Sampling temperature.
        type: float
        default: 0
      timeout:
        description:
          - Seconds the generation may take. A generation still unanswered after this while the server
            answers C(/v1/models) is C(wedged).
        type: float
        default: 60
      api:
        description:
          - C(native) sends C(POST /generate); C(openai) sends C(POST /v1/chat/completions).
        type: str
        choices: [native, openai]
        default: native
      expect_regex:
        description:
          - When set, the generated text must match this regular expression (C(re.search)).
        type: str
      require_text:
        description:
          - Require non-empty generated text. Off by default because real sglang can return empty text
            for valid output tokens (tokenizer-dependent); success is judged on output tokens.
        type: bool
        default: false
  api_key:
    description:
      - API key of the server (C(--api-key)), sent as a bearer token. Never returned or logged.
    type: str
  api_key_from:
    description:
      - The server's C(--config) file on the host; its C(api-key) (as the service role renders it) is the key sent,
        instead of O(api_key) - none when the file has none or does not exist. The rollback uses it to verify the
        restored release with its own key. The key is never returned or logged.
    type: path
  served_model_name:
    description:
      - Model name for the C(openai) probe's C(model) field. Default is the first id of C(/v1/models).
    type: str
  expect_speculative_algorithm:
    description:
      - Speculative algorithm the server must run (for example C(DFLASH) or C(DDTREE)), checked
        case-insensitively against C(/server_info) (the deprecated C(/get_server_info) only where
        the new path is missing).
      - That is only the launch flag echoed back, so the probe's own answer must also prove that
        speculation ran (C(spec_verify_ct) > 0 or a C(spec_accept_length)); otherwise C(spec_mismatch).
        sglang's OpenAI answers carry no speculative counters - with O(probe.api=openai) one native
        C(POST /generate) is sent after the chat completion and its counters are the evidence.
        RV(speculation_evidence) names what proved it.
    type: str
  min_accept_length:
    description:
      - Minimum speculative accept length. Checked against the probe's C(spec_accept_length) (or the
        server's average) when the server reports one; otherwise a warning is returned.
    type: float
  check_port_owner:
    description:
      - When O(base_url) is this host's (loopback), the listener on its port must belong to the watched unit's
        main process or its descendants (O(pid) with a process), found through C(/proc/net/tcp{,6}) socket inodes
        and C(/proc/<pid>/fd). Another process holding the port fails at once with C(port_in_use), naming its
        PID and command; its answers are never judged as the release's. Needs root to see other users' fds.
    type: bool
    default: true
  settle_s:
    description:
      - Stability window in seconds after the first successful generation. C(0) ends at the first success.
      - When above C(0), the server counts as ready only if, for that long after the first success, the unit
        stays up with the same C(InvocationID) and main PID and no restart, and a second generation sent at
        the end of the window succeeds. Otherwise the run fails (class from the log of the death, or
        C(probe_failed)) with RV(failed_in_phase) C(settling). RV(settle) reports the window.
      - Add it to the task's C(async) budget.
    type: float
    default: 0
  job_file:
    description:
      - While it runs, the module writes its pid, that process's start, its async job (the async_wrapper's job id,
        process group and temporary directory) into this file (0600), and removes it when it ends. A play
        interrupted while it waits (Ctrl-C, an AWX cancel) leaves the file; the next run's C(reap) step of
        M(specdec.sglang.sglang_release_reap) ends that job and removes its leftovers.
    type: path
  journal_max_bytes:
    description:
      - Bound, in bytes from the end, of the returned log. The last traceback is never cut, so the
        returned log can be longer when the traceback starts before the bound.
    type: int
    default: 65536
  validate_certs:
    description:
      - Verify TLS certificates when O(base_url) is https.
    type: bool
    default: true
  use_proxy:
    description:
      - Use proxy environment variables for the HTTP calls. Off by default, the server is usually local.
    type: bool
    default: false
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Reports the current state (process, C(/health), progress) once, without waiting or generating.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Failure classes and hints come from one table, C(plugins/module_utils/_readiness/failure_classifier.py).
  - The module changes nothing on the host; C(changed) is always false.
seealso:
  - name: SGLang server arguments
    description: The launch flags the failure hints refer to.
    link: https://docs.sglang.ai/advanced_features/server_arguments.html
"""

EXAMPLES = r"""
- name: Wait until sglang really generates (DFlash), for up to 15 minutes
  specdec.sglang.sglang_readiness:
    unit: sglang.service
    base_url: http://127.0.0.1:30000
    startup_timeout: 900
    expect_speculative_algorithm: DFLASH
    min_accept_length: 1.5
  # Model loads take minutes: run in the background and poll, so SSH sessions never time out.
  async: 960
  poll: 5
  register: sglang_ready

- name: Show time to ready and throughput
  ansible.builtin.debug:
    msg: "{{ sglang_ready.time_to_ready_s }} s, {{ sglang_ready.probe.tokens_per_s }} tokens/s"

- name: OpenAI chat probe with an API key, requiring visible text
  specdec.sglang.sglang_readiness:
    unit: sglang.service
    api_key: "{{ sglang_api_key }}"
    probe:
      api: openai
      prompt: Say hi.
      max_new_tokens: 8
      require_text: true
      timeout: 30

- name: Keep going on failure to read the class (the service role's envelope ladder does this)
  specdec.sglang.sglang_readiness:
    unit: sglang.service
  register: sglang_ready
  ignore_errors: true

- name: Next envelope only on a memory-class failure
  ansible.builtin.debug:
    msg: "memory failure: {{ sglang_ready.hint }}"
  when: sglang_ready.cause_class | default('') in ['oom_mem_fraction', 'cuda_oom', 'cuda_graph_capture']

- name: A host without systemd (container, started by hand)
  specdec.sglang.sglang_readiness:
    pidfile: /run/sglang.pid
    log_file: /var/log/sglang/current.log
    startup_timeout: 600

- name: Report the current state only (no waiting, no generation)
  specdec.sglang.sglang_readiness:
    unit: sglang.service
  check_mode: true
"""

RETURN = r"""
ready:
  description: True when a generation succeeded and every requested check passed.
  returned: always
  type: bool
  sample: true
phase:
  description:
    - C(ready) or C(failed); in check mode the current phase (C(loading), C(warming), C(probing), C(up), C(failed)).
  returned: always
  type: str
  sample: ready
failed_in_phase:
  description:
    - Phase the run was in when it failed (C(loading), C(warming), C(probing), C(confirming), C(verifying)), or
      C(serving) for a process that died after its log said it was ready.
  returned: always
  type: str
  sample: loading
failure_class:
  description:
    - Class of the failure, null when ready. One of C(crashed_on_start), C(not_started), C(oom_mem_fraction),
      C(cuda_oom), C(cuda_graph_capture), C(cuda_error), C(abi_mismatch), C(import_error), C(bad_arguments),
      C(missing_model), C(port_in_use), C(scheduler_died), C(died_while_serving), C(warmup_failed), C(restart_loop),
      C(wedged), C(probe_failed), C(spec_mismatch), C(low_acceptance), C(timeout).
  returned: always
  type: str
  sample: oom_mem_fraction
cause_class:
  description:
    - The class the log points at. Equals RV(failure_class) except for C(restart_loop), where it is the class of
      the failed start (for example C(oom_mem_fraction)); key memory decisions on this.
  returned: always
  type: str
  sample: oom_mem_fraction
reason:
  description: One line saying what was seen (state, timing, exception).
  returned: always
  type: str
  sample: >-
    unit sglang.service is failed/failed (main process killed, status 9, result signal) after 3.1s
    (phase loading): RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
hint:
  description: One line saying what to do about this class.
  returned: always
  type: str
  sample: >-
    the KV cache does not fit: raise --mem-fraction-static, or lower --context-length /
    --max-running-requests (the next smaller envelope)
elapsed_s:
  description: Seconds from the module's start to its verdict.
  returned: always
  type: float
  sample: 41.7
time_to_ready_s:
  description:
    - Seconds from the start of the unit or process (see RV(time_to_ready_from)) to a successful probe; null
      when not ready. RV(elapsed_s) is the module's own time.
  returned: always
  type: float
  sample: 41.7
unit:
  description: Last systemd state seen (empty without O(unit)).
  returned: always
  type: dict
  sample: {"name": "sglang.service", "load_state": "loaded", "active_state": "failed", "sub_state": "failed",
           "result": "exit-code", "n_restarts": 0, "main_pid": 0, "exec_main_status": 1, "exec_main_code": "exited",
           "invocation_id": "5f0c1e..."}
process:
  description: Last process state seen (empty with O(unit)).
  returned: always
  type: dict
  sample: {"pid": 4242, "pidfile": "/run/sglang.pid", "state": "S", "alive": true, "log_file": "/var/log/sglang.log"}
probe:
  description: The test generation (empty when none was sent).
  returned: always
  type: dict
  contains:
    api:
      description: C(native) or C(openai).
      type: str
    ok:
      description: Whether the generation passed every check.
      type: bool
    error:
      description: >-
        Null, or C(timeout), C(refused), C(connection), C(http_status), C(abort), C(no_tokens), C(no_text),
        C(regex), C(bad_response).
      type: str
    status:
      description: HTTP status.
      type: int
    text:
      description: Generated text (may be empty for valid tokens).
      type: str
    completion_tokens:
      description: Output tokens.
      type: int
    finish_reason:
      description: C(length), C(stop) or C(abort).
      type: str
    latency_s:
      description: Request latency.
      type: float
    tokens_per_s:
      description: Output tokens per second of the probe.
      type: float
    spec_accept_length:
      description: Speculative accept length of the probe, when the server reports it.
      type: float
    spec_verify_ct:
      description: Speculative verify steps of the probe, when reported.
      type: int
  sample: {"api": "native", "ok": true, "error": null, "status": 200, "text": " Hi!", "completion_tokens": 16,
           "finish_reason": "length", "latency_s": 0.41, "tokens_per_s": 39.0, "spec_accept_length": 3.2,
           "spec_verify_ct": 5}
server:
  description: Selected keys of C(/server_info) (never the full server args), after a successful probe.
  returned: always
  type: dict
  sample: {"version": "0.5.23", "speculative_algorithm": "DFLASH", "speculative_num_draft_tokens": 16,
           "tp_size": 1, "avg_spec_accept_length": 3.1}
traceback:
  description: The last traceback of this start's log, whole (with chained causes); null when none.
  returned: always
  type: str
  sample: |-
    Traceback (most recent call last):
      File "<string>", line 12, in __init__
    RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
exception_line:
  description:
    - The exception line of the last traceback (or the matched error line); null when none.
    - Named so because Ansible reserves C(exception) in failed results for its own tracebacks.
  returned: always
  type: str
  sample: "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
journal:
  description: >-
    The log of this start (journal of the unit's invocation, or the end of O(log_file)), bounded by
    O(journal_max_bytes) from the end but never cutting the last traceback. Empty when ready.
  returned: always
  type: str
  sample: "Load weight begin...\nTraceback (most recent call last):\n..."
journal_truncated:
  description: Whether older lines were left out of RV(journal).
  returned: always
  type: bool
  sample: false
progress:
  description: The last load-progress line seen in the log (loading weights, KV cache, CUDA graphs, ready).
  returned: always
  type: str
  sample: "Load weight end. type=Qwen3ForCausalLM, dtype=torch.bfloat16, avail mem=120.3 GB"
verdict_epoch:
  description: Host wall-clock time (epoch seconds) of the verdict, to time a start from the controller.
  returned: always
  type: float
  sample: 1796063747.815
settle:
  description:
    - The stability window (O(settle_s) above C(0) and a first generation succeeded); empty otherwise.
  returned: always
  type: dict
  contains:
    settle_s:
      description: The window asked for.
      type: float
    stayed_up_s:
      description: Seconds the unit was watched after the first success.
      type: float
    alive:
      description: Whether the unit was still up at the last check.
      type: bool
    invocation_id:
      description: C(InvocationID) at the first success.
      type: str
    last_invocation_id:
      description: C(InvocationID) at the last check.
      type: str
    n_restarts:
      description: Restarts systemd made during the window.
      type: int
    second_probe:
      description: The generation sent at the end of the window (same keys as RV(probe)); null if none.
      type: dict
    ok:
      description: Whether the window passed.
      type: bool
    reason:
      description: One line saying why it passed or failed.
      type: str
  sample: {"settle_s": 30, "stayed_up_s": 30.4, "alive": true, "invocation_id": "5f0c1e...",
           "last_invocation_id": "5f0c1e...", "n_restarts": 0, "second_probe": {"ok": true, "completion_tokens": 16},
           "ok": true, "reason": "stayed up 30.4s after ready with the same invocation"}
notes:
  description:
    - Checks that could not be made (for example no accept length reported). Each is also emitted as an
      Ansible warning.
  returned: always
  type: list
  elements: str
  sample: []
speculation_evidence:
  description:
    - With O(expect_speculative_algorithm), what proved that speculative decoding ran - the probe's own counters, or
      the one native C(POST /generate) an O(probe.api=openai) run sends; null otherwise.
  returned: always
  type: str
  sample: "the probe's answer: spec_verify_ct=5, spec_accept_length=3.2"
port_owner:
  description:
    - Who held the port when the server first answered (O(check_port_owner)) - C(state) C(own) (C(pids)),
      C(foreign) (C(pid), C(command), C(reason)), C(unknown) or C(free); empty when not checked.
  returned: always
  type: dict
  sample: {"state": "own", "port": 30000, "pids": [4242]}
time_to_ready_from:
  description:
    - What RV(time_to_ready_s) counts from - C(unit) (systemd's start of the unit), C(process) (the start
      time of the watched process in C(/proc)), or C(module) when neither is known.
  returned: always
  type: str
  sample: process
"""

import copy  # noqa: E402  (Ansible modules keep their docs first)
import json  # noqa: E402
import os  # noqa: E402
import time  # noqa: E402
from urllib.parse import urlparse  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible.module_utils.urls import open_url  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host import host_lock  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.files import write_atomically  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._host.port_owner import port_check  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import (  # noqa: E402
    ExitWaiter,
    ProcessWatcher,
)
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.settle import extend as settle_window  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.unit_state import UnitWatcher  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._release import release  # noqa: E402

PROBE_SPEC = dict(
    prompt=dict(type="str", default="Say hi."),
    max_new_tokens=dict(type="int", default=16, no_log=False),
    temperature=dict(type="float", default=0),
    timeout=dict(type="float", default=60),
    api=dict(type="str", choices=["native", "openai"], default="native"),
    expect_regex=dict(type="str"),
    require_text=dict(type="bool", default=False),
)

ARGUMENT_SPEC = dict(
    unit=dict(type="str"),
    pid=dict(type="int"),
    pidfile=dict(type="path"),
    log_file=dict(type="path"),
    base_url=dict(type="str", required=True),
    startup_timeout=dict(type="float", default=900),
    poll_interval=dict(type="float", default=0.5),
    probe=dict(type="dict", default={}, options=PROBE_SPEC),
    api_key=dict(type="str", no_log=True),
    api_key_from=dict(type="path"),
    served_model_name=dict(type="str"),
    expect_speculative_algorithm=dict(type="str"),
    min_accept_length=dict(type="float"),
    settle_s=dict(type="float", default=0),
    journal_max_bytes=dict(type="int", default=65536),
    validate_certs=dict(type="bool", default=True),
    use_proxy=dict(type="bool", default=False),
    check_port_owner=dict(type="bool", default=True),
    job_file=dict(type="path"),
)

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")


def local_port(base_url):
    """The TCP port of ``base_url`` when it is this host's (loopback), else None (nothing to check)."""
    parts = urlparse(base_url)
    if (parts.hostname or "") not in LOCAL_HOSTS:
        return None
    try:
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def build_module():
    # A copy: AnsibleModule fills the suboption defaults into the dict default of `probe` in place.
    return AnsibleModule(
        argument_spec=copy.deepcopy(ARGUMENT_SPEC),
        mutually_exclusive=[("unit", "pid", "pidfile")],
        required_one_of=[("unit", "pid", "pidfile")],
        supports_check_mode=True,
    )


def validate(params):
    """Errors for values the argument spec cannot express."""
    errors = []
    if params["startup_timeout"] <= 0:
        errors.append("startup_timeout must be > 0, got %s" % params["startup_timeout"])
    if not 0 < params["poll_interval"] <= 60:
        errors.append("poll_interval must be in (0, 60] seconds, got %s" % params["poll_interval"])
    probe = params["probe"] or {}
    if (probe.get("max_new_tokens") or 0) < 1:
        errors.append("probe.max_new_tokens must be >= 1, got %s" % probe.get("max_new_tokens"))
    if (probe.get("timeout") or 0) <= 0:
        errors.append("probe.timeout must be > 0 seconds, got %s" % probe.get("timeout"))
    if params["settle_s"] < 0:
        errors.append("settle_s must be >= 0 seconds, got %s" % params["settle_s"])
    if params["journal_max_bytes"] < 1024:
        errors.append("journal_max_bytes must be >= 1024, got %s" % params["journal_max_bytes"])
    if not params["base_url"].startswith(("http://", "https://")):
        errors.append("base_url must start with http:// or https://, got %r" % params["base_url"])
    return errors


def use_config_api_key(module):
    """O(api_key_from): the key of the server's --config file on the host replaces O(api_key), masked in output."""
    params = module.params
    try:
        params["api_key"] = release.config_api_key(_read_existing(params["api_key_from"]))
    except (OSError, ValueError) as exc:
        module.fail_json(msg="api_key_from=%s: %s" % (params["api_key_from"], exc))
    if params["api_key"]:
        module.no_log_values.add(params["api_key"])


def run_module(module, open_url_func=open_url, clock=time.monotonic, sleep=time.sleep):
    params = module.params
    errors = validate(params)
    if errors:
        module.fail_json(msg="; ".join(errors))
    if params.get("api_key_from"):
        use_config_api_key(module)

    def run_command(argv):
        return module.run_command(argv, environ_update={"LC_ALL": "C", "SYSTEMD_COLORS": "0"})

    # The loop's sleep ends when the watched main process exits (pidfd; a plain sleep where the
    # host has none), so a death is judged within milliseconds, not at the next poll.
    waiter = ExitWaiter(sleep=sleep)
    if params["unit"]:
        watcher = UnitWatcher(params["unit"], run_command, waiter=waiter)
    else:
        watcher = ProcessWatcher(
            pid=params["pid"], pidfile=params["pidfile"], log_file=params["log_file"], waiter=waiter
        )
    prober = Prober(
        params["base_url"],
        open_url_func,
        probe=ProbeSettings.from_dict(params["probe"]),
        api_key=params["api_key"],
        served_model_name=params["served_model_name"],
        validate_certs=params["validate_certs"],
        use_proxy=params["use_proxy"],
        clock=clock,
    )
    readiness = Readiness(
        watcher,
        prober,
        Params(
            startup_timeout=params["startup_timeout"],
            poll_interval=params["poll_interval"],
            expect_speculative_algorithm=params["expect_speculative_algorithm"],
            min_accept_length=params["min_accept_length"],
            journal_max_bytes=params["journal_max_bytes"],
            api_key=params["api_key"],
            port=local_port(params["base_url"]) if params["check_port_owner"] else None,
        ),
        clock=clock,
        sleep=waiter,
        port_check=port_check,
    )
    try:
        if module.check_mode:
            result = readiness.snapshot()
        else:
            result = settle_window(readiness, readiness.run(), params["settle_s"])
        result.setdefault("settle", {})
        result["verdict_epoch"] = round(time.time(), 3)
    except RuntimeError as exc:  # e.g. systemctl missing: say what to use instead
        module.fail_json(msg=str(exc), ready=False, phase="failed", failure_class=None)

    for note in result.get("notes") or []:
        module.warn(note)
    if module.check_mode or result["ready"]:
        module.exit_json(changed=False, **result)
    msg = "sglang not ready: %s [%s] %s" % (result["failure_class"], result["reason"], result["hint"])
    module.fail_json(msg=msg, changed=False, **result)


def _read_existing(path):
    """The text of ``path``, "" when it does not exist (other errors are raised)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


def _async_dir(environ):
    """The async_wrapper's results directory (one owner: release.async_results_dir)."""
    return release.async_results_dir(environ)


def write_job(path, proc_root="/proc"):
    """Record this process (and its async job) in ``path`` (0600, atomic); the record written."""
    pid = os.getpid()
    job = release.readiness_job(
        pid=pid,
        start=host_lock.process_start_token(
            _read(proc_root + "/sys/kernel/random/boot_id").strip(), _read("%s/%d/stat" % (proc_root, pid))
        ),
        pgid=os.getpgrp(),
        parent_argv=[arg for arg in _read("%s/%d/cmdline" % (proc_root, os.getppid())).split("\0") if arg],
        async_dir=_async_dir(os.environ),
    )
    try:
        write_atomically(path, json.dumps(job, sort_keys=True) + "\n", 0o600)
    except OSError:
        return None
    return job


def main():
    module = build_module()
    job_file = module.params["job_file"]
    if not job_file or module.check_mode or not os.path.isdir(os.path.dirname(job_file) or "/"):
        run_module(module)
        return
    write_job(job_file)
    try:
        run_module(module)
    finally:
        try:
            os.unlink(job_file)
        except OSError:
            pass


if __name__ == "__main__":
    main()
