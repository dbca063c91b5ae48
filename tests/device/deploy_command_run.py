#!/usr/bin/env python3
# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The command a deploy renders for ct200, run as is on the device, judged as the deploy judges it.

    deploy_command_run.py --site SITE --target T --draft D --out DIR [--case dflash] [--case ddtree16]

For each case: the patch sets the deploy plan chooses for it are applied to the scratch site (the
collection's own ``patchset.apply``); ``render_command.render`` gives the unit's ExecStart and
EnvironmentFile for host ct200 with only what a host's inventory would set overridden (the model
paths, the GPU's UUID, the envelope's context length capped at the model's own maximum as the
envelope plan caps it); the program runs as is in pid mode (the device has no systemd) with the
environment systemd would give it; ``sglang_readiness``'s own code (pid + log file) decides ready;
the speculative server's greedy outputs are then compared with the target alone's (the same
rendered argv without its speculative flags) by ``lossless_check.compare``.

What differs from a host, written into the record as ``deviations``: the release venv is the
scratch site (``SITE/bin/sglang`` with ``PYTHONPATH=SITE``, the machine's torch), CUDA_HOME /
LIBRARY_PATH / LD_LIBRARY_PATH point at the machine's CUDA runtime, the service user is root.

Writes DIR/deploy-command.json (with the provenance: commit, GPU, compute capability, driver) and
DIR/server-<case>.log; exit 0 when every case was ready and lossless.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

import yaml

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "collections"))
sys.path.insert(0, str(HERE))

import ddtree_check  # noqa: E402  (Server: a process group started and stopped as the unit would)
import lossless_check  # noqa: E402
import render_command  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._patchset import patchset as ps  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._plan import deploy_plan  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.http_probe import Prober, ProbeSettings  # noqa: E402
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.process_state import (  # noqa: E402
    ExitWaiter,
    ProcessWatcher,
)
from ansible_collections.specdec.sglang.plugins.module_utils._readiness.readiness import Params, Readiness  # noqa: E402
from readiness_real import open_url  # noqa: E402  (urllib in the module's open_url shape)

SGLANG_VERSION = "0.5.17"
# systemd's default PATH for a service (systemd.exec(5), "Environment variables in spawned processes")
TORCH_BIN = "/opt/torch/.venv/bin"
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"
CASES = {
    "dflash": {},
    "ddtree16": {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 16},
    "ddtree8": {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 8},
    "ddtree32": {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 32},
    # the tiny pair's verify is host-bound, so a wider tree costs it little: N=64 asks what more breadth buys
    "ddtree64": {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 64},
    "ddtree128": {"sglang_service_speculative_algorithm": "DDTREE", "sglang_service_ddtree_budget": 128},
}
SPECULATIVE_FLAGS = (
    "--speculative-algorithm",
    "--speculative-draft-model-path",
    "--speculative-num-draft-tokens",
    "--speculative-dflash-block-size",
)


def log(msg):
    print("[deploy-command] %s" % msg, flush=True)


def without_speculation(argv):
    """The rendered argv without the speculative flags and their values: the target alone."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in SPECULATIVE_FLAGS:
            skip = True
            continue
        out.append(arg)
    return out


def chosen_sets(algorithm, attention_backend):
    """The patch set directories the deploy plan picks for this algorithm on sglang 0.5.17."""
    available = []
    for directory in sorted((REPO / "patchsets").iterdir()):
        if (directory / "patchset.yml").is_file():
            available.append(deploy_plan.patch_set_record(str(directory), ps.load_manifest(str(directory))))
    chosen = deploy_plan.choose_patch_sets(algorithm, SGLANG_VERSION, attention_backend, available)
    if chosen["errors"]:
        raise SystemExit("; ".join(chosen["errors"]))
    every = deploy_plan.every_request_sets(algorithm, SGLANG_VERSION, available, chosen["chosen"])
    return [r["dir"] for r in chosen["chosen"] + every]


def apply_sets(python, site, sets, out):
    applied = []
    for directory in sets:
        manifest = ps.load_manifest(directory)
        result = ps.apply(directory, site, str(out / "patch-backups"), manifest, python)
        applied.append({"set": manifest["name"], "changed": result["changed"]})
        log("patch set %s: changed=%s" % (manifest["name"], result["changed"]))
    return applied


def max_positions(model_dir):
    config = json.loads((pathlib.Path(model_dir) / "config.json").read_text())
    text = config.get("text_config") or config
    return int(text.get("max_position_embeddings") or config.get("max_position_embeddings") or 0)


def block_size(model_dir):
    return int(json.loads((pathlib.Path(model_dir) / "config.json").read_text()).get("block_size") or 16)


def service_env(rendered, site):
    env = {"PATH": SYSTEMD_PATH, "LANG": "C.UTF-8"}
    env.update(rendered["env"])  # the unit's PATH: the venv's bin (here the scratch site's) + systemd's
    for name in ("HOME", "XDG_CACHE_HOME", "HF_HOME", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        if env.get(name):
            pathlib.Path(env[name]).mkdir(parents=True, exist_ok=True)
    deviations = {
        "PYTHONPATH": str(site),
        "CUDA_HOME": os.environ.get("CUDA_HOME", "/usr/local/cuda"),
        "LIBRARY_PATH": os.environ.get("LIBRARY_PATH", ""),
        "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""),
    }
    # the manifest's ninja lives in the release venv's bin; the scratch site has none: the machine's
    # torch venv's ninja stands in for it, after the unit's own PATH
    deviations["PATH_APPENDED"] = TORCH_BIN
    env.update({k: v for k, v in deviations.items() if v and k != "PATH_APPENDED"})
    env["PATH"] = env["PATH"] + ":" + deviations["PATH_APPENDED"]
    return env, deviations


def readiness(service, url, expect, startup_timeout):
    t0 = time.monotonic()
    waiter = ExitWaiter()
    watcher = ProcessWatcher(pid=service.proc.pid, log_file=str(service.log_path), waiter=waiter)
    prober = Prober(url, open_url, probe=ProbeSettings(max_new_tokens=16, timeout=120))
    params = Params(startup_timeout=startup_timeout, poll_interval=0.5, expect_speculative_algorithm=expect)
    result = Readiness(watcher, prober, params, sleep=waiter).run()
    keep = ("ready", "phase", "failure_class", "cause_class", "failed_in_phase", "reason", "time_to_ready_s",
            "exception_line", "probe", "server")  # fmt: skip
    out = {k: result.get(k) for k in keep}
    out["wall_s"] = round(time.monotonic() - t0, 1)
    log("%s readiness: ready=%s class=%s in %.1fs" % (service.name, out["ready"], out["failure_class"], out["wall_s"]))
    return out


def outputs(url, prompts, tokens, logprobs):
    rows = []
    for prompt in prompts:
        rows.append(lossless_check.generate(url, prompt, tokens, logprobs=logprobs, timeout=300))
    return rows


def run_service(name, argv, env, cwd, out, *, url, expect, startup_timeout, prompts, tokens, logprobs):
    service = ddtree_check.Server(name, None, [], env=env, port=0, out=out, command=argv, cwd=cwd)
    try:
        res = {"readiness": readiness(service, url, expect, startup_timeout)}
        if res["readiness"]["ready"]:
            res["outputs"] = outputs(url, prompts, tokens, logprobs)
            try:
                res["server_info"] = json.loads(urllib.request.urlopen(url + "/get_server_info", timeout=30).read())
            except (OSError, ValueError) as exc:
                res["server_info"] = {"error": repr(exc)}
        return res
    finally:
        service.stop()
        res_rc = service.proc.returncode
        log("%s stopped (rc %s)" % (name, res_rc))


def server_args_of_interest(info):
    keys = ("attention_backend", "sampling_backend", "grammar_backend", "disable_radix_cache",
            "mamba_radix_cache_strategy", "mamba_scheduler_strategy", "disable_cuda_graph", "cuda_graph_bs",
            "cuda_graph_max_bs", "disable_overlap_schedule", "speculative_algorithm", "speculative_num_draft_tokens",
            "max_running_requests", "context_length", "mem_fraction_static", "max_mamba_cache_size")  # fmt: skip
    info = info or {}
    return {k: info.get(k) for k in keys if k in info}


def render_case(case, args, out, *, uuid):
    """The case's rendered command: ``{argv, env (as the service gets it), rendered_env, deviations,
    patch_sets (applied), overrides, envelope, algorithm}``."""
    overrides = {
        "sglang_service_model_path": args.target,
        "sglang_service_draft_model_path": args.draft,
        "sglang_service_gpu_uuids": [uuid] if uuid else [],
        "sglang_service_home": str(args.home),
        "sglang_service_cache_dir": str(args.home / "cache"),
        # a host serving this draft sets its block size in its inventory, as ct200's sets 16 for the 27B's
        "sglang_service_dflash_block_size": block_size(args.draft),
        **CASES[case],
        **(ddtree_vars(args) if case.startswith("ddtree") else {}),
    }
    ceiling = max_positions(args.target)
    envelopes = yaml.safe_load((REPO / "roles" / "sglang_service" / "defaults" / "main.yml").read_text())[
        "sglang_service_envelopes"
    ]
    name = render_command.render("ct200", overrides=overrides, venv=str(args.site))["envelope"]
    envelope = envelopes[name]
    if ceiling and int(envelope.get("context_length") or 0) > ceiling:
        envelope["context_length"] = ceiling  # what the envelope plan does with max_position_embeddings
        overrides["sglang_service_envelopes"] = envelopes
    rendered = render_command.render("ct200", overrides=overrides, venv=str(args.site))
    algorithm = CASES[case].get("sglang_service_speculative_algorithm", "DFLASH")
    applied = apply_sets(args.python, str(args.site), chosen_sets(algorithm, "triton"), out)
    env, deviations = service_env(rendered, args.site)
    return {
        "argv": rendered["argv"],
        "env": env,
        "rendered_env": rendered["env"],
        "deviations": deviations,
        "patch_sets": applied,
        "overrides": {k: v for k, v in overrides.items() if k != "sglang_service_envelopes"},
        "envelope": {name: envelope},
        "algorithm": algorithm,
    }


# --render-only: the names ddtree_e2e.py gives its servers
E2E_NAMES = {"dflash": "dflash", **{c: "ddtree-n%s" % c[len("ddtree") :] for c in CASES if c.startswith("ddtree")}}


def ddtree_vars(args) -> dict:
    """--ddtree-var NAME=VALUE: sglang_service role variables (YAML values) for the DDTREE cases, rendered as a
    host's inventory would set them (e.g. sglang_service_ddtree_tree_builder=graph)."""
    out = {}
    for pair in args.ddtree_var:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("sglang_service_"):
            raise ValueError("--ddtree-var takes sglang_service_NAME=VALUE, got %r" % pair)
        out[name] = yaml.safe_load(value)
    return out


def render_only(args, cases, uuid):
    """``{e2e name: {argv, env, deviations, patch_sets}}`` of each case and of the target alone."""
    out = {}
    for case in cases:
        done = render_case(case, args, args.out, uuid=uuid)
        out[E2E_NAMES[case]] = {k: done[k] for k in ("argv", "env", "deviations", "patch_sets")}
        if case == "dflash":
            out["target"] = dict(out["dflash"], argv=without_speculation(done["argv"]))
    return out


def run_case(case, args, out, *, uuid, base_rows):
    done = render_case(case, args, out, uuid=uuid)
    argv, env, deviations, algorithm = done["argv"], done["env"], done["deviations"], done["algorithm"]
    port = int(argv[argv.index("--port") + 1])
    url = "http://127.0.0.1:%d" % port
    record = {"case": case, "argv": argv, "env": done["rendered_env"], "deviations": deviations}
    record.update({k: done[k] for k in ("patch_sets", "overrides", "envelope")})
    log("%s: %s" % (case, " ".join(argv)))
    common = {"url": url, "startup_timeout": args.startup_timeout, "prompts": args.prompts, "tokens": args.tokens}
    spec = run_service(case, argv, env, str(args.home), out, expect=algorithm, logprobs=False, **common)
    record.update(readiness=spec["readiness"], server_args=server_args_of_interest(spec.get("server_info")))
    if not spec["readiness"]["ready"]:
        record["passed"] = False
        return record
    if base_rows is None:
        base_argv = without_speculation(argv)
        record["target_alone_argv"] = base_argv
        base = run_service("target", base_argv, env, str(args.home), out, expect=None, logprobs=True, **common)
        record["target_alone_readiness"] = base["readiness"]
        base_rows = base.get("outputs")
    if not base_rows:
        record["passed"] = False
        return record
    rows = []
    for prompt, s, b in zip(args.prompts, spec["outputs"], base_rows, strict=True):
        meta = b.get("meta_info", {})
        row = lossless_check.compare(
            s.get("output_ids", []), b.get("output_ids", []), meta.get("output_top_logprobs"), args.tie_gap
        )
        row.update(prompt=prompt, spec_accept_length=s.get("meta_info", {}).get("spec_accept_length"),
                   spec_verify_ct=s.get("meta_info", {}).get("spec_verify_ct"),
                   completion_tokens=s.get("meta_info", {}).get("completion_tokens"))  # fmt: skip
        rows.append(row)
    counts = {v: sum(1 for r in rows if r["verdict"] == v) for v in ("identical", "near_tie", "bug")}
    accepts = [r["spec_accept_length"] for r in rows if r["spec_accept_length"] is not None]
    record.update(lossless={"counts": counts, "rows": rows, "tokens": args.tokens},
                  accept_length_mean=round(sum(accepts) / len(accepts), 4) if accepts else None,
                  passed=counts["bug"] == 0 and all(r["completion_tokens"] == args.tokens for r in rows))  # fmt: skip
    record["_base_rows"] = base_rows
    log("%s: lossless %s, accept %s" % (case, counts, record["accept_length_mean"]))
    return record


def provenance():
    smi = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,compute_cap,driver_version,memory.total,uuid", "--format=csv,noheader"],
        capture_output=True, text=True, check=False,
    ).stdout.strip().splitlines()  # fmt: skip
    fields = [f.strip() for f in (smi[0] if smi else "").split(",")]
    names = ("gpu", "compute_capability", "driver", "memory_total", "uuid")
    return {**dict(zip(names, fields)), "commit": os.environ.get("SPECDEC_COMMIT") or "not recorded",
            "command": " ".join(["tests/device/deploy_command_run.py", *sys.argv[1:]]),
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}  # fmt: skip


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", required=True, help="the interpreter of the scratch site (patch compile checks)")
    parser.add_argument("--site", required=True, type=pathlib.Path, help="the scratch site (bin/sglang in it)")
    parser.add_argument("--target", required=True)
    parser.add_argument("--draft", required=True)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--home", type=pathlib.Path, default=pathlib.Path("/tmp/specdec-deploy-command/home"))
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: dflash")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--prompt-count", type=int, default=8)
    parser.add_argument("--tie-gap", type=float, default=0.05)
    parser.add_argument("--startup-timeout", type=float, default=400)
    parser.add_argument(
        "--ddtree-var", action="append", default=[], metavar="NAME=VALUE",
        help="an sglang_service role variable for the DDTREE cases (e.g. sglang_service_ddtree_tree_builder=graph)",
    )  # fmt: skip
    parser.add_argument(
        "--render-only", type=pathlib.Path, metavar="FILE",
        help="apply the cases' patch sets and write their rendered commands (ddtree_e2e.py --rendered); run nothing",
    )  # fmt: skip
    args = parser.parse_args(argv)
    args.prompts = list(lossless_check.PROMPTS[: args.prompt_count])
    args.out.mkdir(parents=True, exist_ok=True)
    args.home.mkdir(parents=True, exist_ok=True)
    report = {"provenance": provenance(), "cases": []}
    if args.render_only:
        cases = args.case or ["dflash"]
        rendered = render_only(args, cases, report["provenance"].get("uuid"))
        args.render_only.write_text(json.dumps(dict(rendered, provenance=report["provenance"]), indent=1))
        log("rendered %s into %s" % (", ".join(sorted(rendered)), args.render_only))
        return 0
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    base_rows = None
    try:
        for case in args.case or ["dflash"]:
            record = run_case(case, args, args.out, uuid=report["provenance"].get("uuid"), base_rows=base_rows)
            base_rows = record.pop("_base_rows", base_rows)
            report["cases"].append(record)
            (args.out / "deploy-command.json").write_text(json.dumps(report, indent=1))
    except KeyboardInterrupt:
        report["interrupted"] = True
    report["passed"] = bool(report["cases"]) and all(c.get("passed") for c in report["cases"])
    (args.out / "deploy-command.json").write_text(json.dumps(report, indent=1))
    log("passed=%s" % report["passed"])
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
