"""sglang's HTTP surface, served by a threaded stdlib server so one hung request blocks nothing else."""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus

from sglang_engine_simulator import SIMULATED_SGLANG_VERSION, ddtree, hybrid, tracebacks
from sglang_engine_simulator.cli import die_with_sigkill, scheduler_exception
from sglang_engine_simulator.log import access, log, raw

EOS_TOKEN_ID = 151645
STOP_AFTER_TOKENS = 64  # a generation asking for more "meets EOS" here (finish_reason stop)
_WORDS = (
    "Hello from the sglang engine simulator . This text is deterministic for a prompt and carries no meaning ; "
    "draft tokens verify target blocks while speculative decoding accepts several tokens per step , the "
    "scheduler batches requests and the radix cache reuses prefixes"
).split()
_LEAD = 6  # every text starts "Hello from the sglang engine simulator"


class Hang(Exception):
    """The engine will never answer this request (wedged or dead scheduler)."""


class SchedulerGone(Exception):
    """The scheduler process died under a running generation: the connection drops, no answer."""


# The scheduler child: sglang's scheduler is a separate process that dies on SIGTERM (default action)
# and with its parent. It does no work here; only its life matters (see Engine.decode).
# The parent's pid comes as an argument: read with getppid() at start, it is already 1 when the parent died
# first (a simulator ended right after its ready line), and the child then outlived it for good.
_SCHEDULER_PROGRAM = (
    "import os, sys, time\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    time.sleep(0.2)\n"
)


class Engine:
    """What the tokenizer manager and scheduler would know: status, config, fault behaviour."""

    def __init__(self, args, settings, model_config: dict, draft_config: dict | None = None):
        self.args = args
        self.settings = settings
        self.fault = settings.fault
        self.architecture = (model_config.get("architectures") or ["Qwen3NextForCausalLM"])[0]
        self.model_type = model_config.get("model_type", "qwen3_next")
        self.context_len = args.context_length or int(model_config.get("max_position_embeddings") or 32768)
        self.max_running_requests = args.max_running_requests or 48
        self.max_total_tokens = args.max_total_tokens or 1_048_576
        # hybrid (Gated-DeltaNet) target: sglang's pools and refusals for it (hybrid.py)
        self.hybrid = (
            hybrid.Pools(model_config, draft_config, args, settings.gpu_memory_mb)
            if hybrid.is_hybrid(model_config)
            else None
        )
        self.served_model_name = args.served_model_name or args.model_path
        self.spec_algorithm = args.speculative_algorithm.upper() if args.speculative_algorithm else None
        self.num_draft_tokens = (
            args.speculative_num_draft_tokens
            or args.speculative_dflash_block_size
            or (16 if self.spec_algorithm in ("DFLASH", "DDTREE") else 4)
        )
        self.status = "starting"  # starting -> up; scheduler_dead after scheduler_death fires
        self.health_failed = False
        self.startup_time = time.time()
        self._lock = threading.Lock()
        self._generations = 0
        self.hung_requests = 0
        self.in_flight = 0
        # /metrics (--enable-metrics): what sglang's metrics collector would have counted
        self.generation_tokens_total = {"false": 0, "true": 0}
        self.spec_verify_calls_total = 0
        self.last_accept_length = 0.0
        self.draining = False
        self.scheduler = None  # the scheduler child process (serve() starts it)
        self._never = threading.Event()

    # ----- engine side -----
    def hang(self) -> None:
        with self._lock:
            self.hung_requests += 1
        self._never.wait()
        raise Hang()

    def scheduler_alive(self) -> bool:
        return self.status != "scheduler_dead" and not (self.fault == "wedged" and self.status == "up")

    def scheduler_gone(self) -> bool:
        """The scheduler child exited (KillMode=control-group SIGTERMs it with the main process)."""
        return self.scheduler is not None and self.scheduler.poll() is not None

    def decode(self, n: int, on_tokens=None) -> None:
        """Spend the decode time of n tokens, step by step; the scheduler's death ends it (Hang -> dropped)."""
        step = 4
        done = 0
        while done < n:
            k = min(step, n - done)
            time.sleep(k / self.settings.tokens_per_s)
            if self.scheduler_gone():
                raise SchedulerGone()
            done += k
            if on_tokens is not None:
                on_tokens(done)

    def before_generation(self, internal: bool = False) -> None:
        """Fault behaviour that happens when the scheduler gets a batch."""
        if not self.scheduler_alive():
            self.hang()
        if not internal and self.fault == "dies_after_first_answer":
            with self._lock:
                arm, self._death_armed = not getattr(self, "_death_armed", False), True
            if arm:  # this first answer is served; the scheduler dies FAULT_AFTER_S later
                threading.Thread(target=_scheduler_death, args=(self,), daemon=True).start()
        if self.fault == "gdn_kernel_fault" and self.hybrid is not None:
            with self._lock:  # the first prefill compiles and runs the GDN kernels: warm-up or not
                self._generations += 1
                first = self._generations == 1
            if first:
                time.sleep(0.05)
                scheduler_exception(tracebacks.gdn_kernel_fault())
        if internal or self.fault != "crash_on_first_generation":
            return
        with self._lock:
            self._generations += 1
            first = self._generations == 1
        if first:
            time.sleep(0.05)
            scheduler_exception(tracebacks.generation_crash())

    def generate(self, prompt: str | None, input_ids: list | None, params: dict, on_tokens=None) -> dict:
        tic = time.monotonic()
        max_new = params.get("max_new_tokens", 128)
        if not isinstance(max_new, int) or isinstance(max_new, bool) or max_new < 0:
            raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
        seed_text = prompt if prompt is not None else json.dumps(input_ids)
        prompt_tokens = len(input_ids) if input_ids is not None else max(1, len(re.findall(r"\w+|[^\w\s]", prompt)))
        if prompt_tokens + max_new > self.context_len:
            raise ValueError(
                f"Requested token count exceeds the model's maximum context length of {self.context_len} tokens. "
                f"You requested a total of {prompt_tokens + max_new} tokens: {prompt_tokens} tokens from the input "
                f"messages and {max_new} tokens for the completion. Please reduce the number of tokens in the input "
                "messages or the completion to fit within the limit."
            )
        n = min(max_new, STOP_AFTER_TOKENS)
        finish: dict = {"type": "length", "length": n} if n == max_new else {"type": "stop", "matched": EOS_TOKEN_ID}
        if self.fault == "abort":
            n = 0
            finish = {"type": "abort", "message": "Abort in waiting queue", "status_code": None, "err_type": None}
        elif self.fault == "empty_output":
            n = 0
            finish = {"type": "stop", "matched": EOS_TOKEN_ID}
        rng = random.Random(int.from_bytes(hashlib.sha256(seed_text.encode()).digest()[:8], "big"))
        picks = [i if i < _LEAD else rng.randrange(_LEAD, len(_WORDS)) for i in range(n)]
        output_ids = [1000 + p * 37 for p in picks]
        text = "" if self.fault == "empty_text" else " ".join(_WORDS[p] for p in picks)
        self.decode(n, on_tokens and (lambda done: on_tokens(done, output_ids[:done], picks[:done])))
        meta: dict = {
            "id": uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": n,
            "cached_tokens": 0,
        }
        if self.spec_algorithm and n > 0:
            target = 1.05 if self.fault == "low_acceptance" else 3.2
            verify_ct = max(1, round(n / target))
            proposed = verify_ct * (self.num_draft_tokens - 1)
            correct = max(0, n - verify_ct)
            meta.update(
                spec_accept_rate=correct / proposed if proposed else 0.0,
                spec_accept_length=n / verify_ct,
                spec_num_correct_drafts=correct,
                spec_num_proposed_drafts=proposed,
                spec_verify_ct=verify_ct,
            )
        with self._lock:
            self.generation_tokens_total["true" if on_tokens else "false"] += n
            if "spec_verify_ct" in meta:
                self.spec_verify_calls_total += meta["spec_verify_ct"]
                self.last_accept_length = meta["spec_accept_length"]
        meta["e2e_latency"] = round(time.monotonic() - tic, 6)
        return {"text": text, "output_ids": output_ids, "meta_info": meta}

    # ----- server info -----
    def server_info(self) -> dict:
        info = {k: v for k, v in vars(self.args).items()}
        if info.get("api_key"):
            info["api_key"] = "<redacted>"
        if info.get("admin_api_key"):
            info["admin_api_key"] = "<redacted>"
        reported = self.spec_algorithm
        if self.fault == "spec_mismatch":
            reported = "DFLASH" if self.spec_algorithm == "EAGLE" else "EAGLE"
        info.update(
            speculative_algorithm=reported,
            speculative_num_draft_tokens=self.num_draft_tokens if self.spec_algorithm else None,
            served_model_name=self.served_model_name,
            context_length=self.context_len,
            max_total_num_tokens=self.max_total_tokens,
            max_running_requests=self.max_running_requests,
            launch_command=" ".join(sys.argv[1:]).replace(self.args.api_key or "\0", "<redacted>"),
            startup_time=self.startup_time,
            internal_states=[{"avg_spec_accept_length": 1.05 if self.fault == "low_acceptance" else 3.2}],
            version=SIMULATED_SGLANG_VERSION,
            frontend="python",
            simulator=True,
        )
        return info

    def model_info(self) -> dict:
        return {
            "model_path": self.args.model_path,
            "served_model_name": self.served_model_name,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": self.args.load_format,
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": self.model_type,
            "architectures": [self.architecture],
        }

    def model_card(self) -> dict:
        return {
            "id": self.served_model_name,
            "object": "model",
            "created": int(self.startup_time),
            "owned_by": "sglang",
            "root": self.served_model_name,
            "parent": None,
            "max_model_len": self.context_len,
        }


def _chat_prompt(messages) -> str:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list")
    parts = []
    for message in messages:
        if not isinstance(message, dict) or "role" not in message:
            raise ValueError("each message needs a role")
        content = message.get("content") or ""
        if isinstance(content, list):
            content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
        parts.append(f"<|im_start|>{message['role']}\n{content}<|im_end|>")
    return "\n".join(parts) + "\n<|im_start|>assistant\n"


def _openai_error(message: str) -> dict:
    return {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}


class _InFlight:
    """Counts a generation as in flight (what the main process drains on SIGTERM)."""

    def __init__(self, engine: Engine):
        self.engine = engine

    def __enter__(self):
        with self.engine._lock:
            self.engine.in_flight += 1

    def __exit__(self, *exc):
        with self.engine._lock:
            self.engine.in_flight -= 1
        return False


class Handler(http.server.BaseHTTPRequestHandler):
    engine: Engine  # set on the subclass made in serve()
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format, *args):
        pass  # access lines are written by _send, uvicorn style

    # ----- plumbing -----
    def _send(self, status: int, body=None, content_type: str = "application/json") -> None:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        try:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away (its timeout)
        path = self.path.split("?", 1)[0]
        access(
            f"{self.client_address[0]}:{self.client_address[1]}", self.command, path, status, HTTPStatus(status).phrase
        )

    def _body(self):
        length = int(self.headers.get("content-length") or 0)
        data = self.rfile.read(length) if length else b""
        return json.loads(data or b"null")

    def _authorized(self, path: str) -> bool:
        key = self.engine.args.api_key
        if not key or path.startswith(("/health", "/ready", "/metrics")):
            return True
        header = self.headers.get("Authorization") or ""
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and token == key

    def _route(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        routes = GET_ROUTES if method == "GET" else POST_ROUTES
        handler = routes.get(path)
        if handler is None and method == "GET" and path.startswith("/v1/models/"):
            handler = Handler.get_model
        if handler is None:
            other = POST_ROUTES if method == "GET" else GET_ROUTES
            if path in other:
                self._send(405, {"detail": "Method Not Allowed"})
            else:
                self._send(404, {"detail": "Not Found"})
            return
        try:
            handler(self)
        except Hang:
            return
        except Exception:  # a simulator bug must not look like an engine fault: say so loudly
            raw("sglang-engine-simulator internal error:\n" + traceback.format_exc())
            self._send(500, {"error": "sglang-engine-simulator internal error"})

    def do_GET(self):
        self._route("GET")

    def do_POST(self):
        self._route("POST")

    def do_PUT(self):
        self._route("POST" if self.path.split("?", 1)[0] == "/generate" else "PUT")

    # ----- endpoints -----
    def health(self):
        engine = self.engine
        if engine.draining:
            log("Health check request received during shutdown. Returning 503.")
            self._send(503)
            return
        if engine.status == "starting":
            self._send(503)
            return
        if not engine.scheduler_alive():
            tic = time.time()
            time.sleep(engine.settings.health_timeout_s)
            log(
                "Health check failed. Server couldn't get a response from detokenizer for last "
                f"{engine.settings.health_timeout_s:g} seconds. "
                f"tic start time: {time.strftime('%H:%M:%S', time.localtime(tic))}. "
                f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(engine.startup_time))}"
            )
            engine.health_failed = True
            self._send(503)
            return
        self._send(200)

    def metrics(self):
        """sglang's Prometheus endpoint: mounted only with --enable-metrics (404 otherwise, like sglang)."""
        engine = self.engine
        if not engine.args.enable_metrics:
            self._send(404, {"detail": "Not Found"})
            return
        label = 'model_name="%s"' % engine.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
        lines = [
            "# HELP sglang:num_running_reqs The number of running requests.",
            "# TYPE sglang:num_running_reqs gauge",
            "sglang:num_running_reqs{%s} %d" % (label, engine.in_flight),
            "# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.",
            "# TYPE sglang:spec_accept_length gauge",
            "sglang:spec_accept_length{%s} %s" % (label, float(engine.last_accept_length)),
            "# HELP sglang:generation_tokens_total Number of generation tokens processed.",
            "# TYPE sglang:generation_tokens_total counter",
        ]
        for streaming, total in sorted(engine.generation_tokens_total.items()):
            lines.append('sglang:generation_tokens_total{%s,is_streaming="%s"} %d' % (label, streaming, total))
        lines += [
            "# HELP sglang:spec_verify_calls_total Number of speculative verify calls.",
            "# TYPE sglang:spec_verify_calls_total counter",
            "sglang:spec_verify_calls_total{%s} %d" % (label, engine.spec_verify_calls_total),
        ]
        self._send(200, ("\n".join(lines) + "\n").encode(), content_type="text/plain; version=0.0.4; charset=utf-8")

    def ready(self):
        self._send(200 if self.engine.status != "starting" else 503)

    def models(self):
        self._send(200, {"object": "list", "data": [self.engine.model_card()]})

    def get_model(self):
        name = self.path.split("?", 1)[0][len("/v1/models/") :]
        if name != self.engine.served_model_name:
            self._send(
                404,
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
            return
        self._send(200, self.engine.model_card())

    def get_model_info(self):
        log(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
            "Please use '/model_info' instead."
        )
        self.model_info()

    def model_info(self):
        self._send(200, self.engine.model_info())

    def get_server_info(self):
        log(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        self.server_info()

    def server_info(self):
        if not self.engine.scheduler_alive():  # it asks the scheduler for its internal state
            self.engine.hang()
        self._send(200, self.engine.server_info())

    def generate(self):
        try:
            body = self._body()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            params = body.get("sampling_params") or {}
            if not isinstance(params, dict):
                raise ValueError("sampling_params must be an object")
            stream = bool(body.get("stream"))
            text, ids = body.get("text"), body.get("input_ids")
            if stream and isinstance(text, list):
                raise ValueError("sglang-engine-simulator streams one prompt at a time; send one text")
            if text is None and ids is None:
                raise ValueError("Either text or input_ids should be provided.")
        except ValueError as exc:
            self._send(400, {"error": {"message": str(exc)}})
            return
        self.engine.before_generation()
        with _InFlight(self.engine):
            if stream:
                self._stream(text if isinstance(text, str) else None, ids, params)
                return
            try:
                if isinstance(text, list):
                    result = [self.engine.generate(t, None, params) for t in text]
                else:
                    result = self.engine.generate(text if isinstance(text, str) else None, ids, params)
            except ValueError as exc:
                self._send(400, {"error": {"message": str(exc)}})
                return
            except SchedulerGone:
                self.close_connection = True
                return
        self._send(200, result)

    def _stream(self, text, ids, params) -> None:
        """sglang's streamed /generate: server-sent events, each the whole output so far, then [DONE]."""
        started = []

        def chunk(payload) -> None:
            self._sse(started, payload)

        def on_tokens(done, output_ids, picks) -> None:
            partial = "" if self.engine.fault == "empty_text" else " ".join(_WORDS[p] for p in picks)
            chunk(
                {
                    "text": partial,
                    "output_ids": output_ids,
                    "meta_info": {"finish_reason": None, "completion_tokens": done},
                }
            )

        self.close_connection = True
        try:
            result = self.engine.generate(text, ids, params, on_tokens=on_tokens)
            chunk(result)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except ValueError as exc:
            if not started:
                self._send(400, {"error": {"message": str(exc)}})
            return
        except (SchedulerGone, OSError):
            return  # the scheduler died (or the client left): the stream just ends, no [DONE]
        access(f"{self.client_address[0]}:{self.client_address[1]}", "POST", "/generate", 200, "OK")

    def _sse(self, started: list, payload) -> None:
        """One server-sent event; the first one sends the 200 and the event-stream header."""
        if not started:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            started.append(True)
        self.wfile.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        self.wfile.flush()

    def _chat_stream(self, body, prompt, max_tokens) -> None:
        """sglang's streamed chat completion: the role chunk, content deltas, the finish, usage on request, [DONE]."""
        engine, sent, started = self.engine, [""], []
        head = {"id": uuid.uuid4().hex, "object": "chat.completion.chunk", "created": int(time.time())}
        head["model"] = body.get("model") or engine.served_model_name

        def chunk(delta, finish=None, usage=None) -> None:
            self._sse(started, _chat_chunk(head, delta, finish, usage))

        def on_text(text) -> None:
            if not started:
                chunk({"role": "assistant", "content": ""})
            if text != sent[0] and text.startswith(sent[0]):
                chunk({"content": text[len(sent[0]) :]})
                sent[0] = text

        def on_tokens(done, output_ids, picks) -> None:
            on_text("" if engine.fault == "empty_text" else " ".join(_WORDS[p] for p in picks))

        self.close_connection = True
        try:
            out = engine.generate(prompt, None, {"max_new_tokens": max_tokens}, on_tokens=on_tokens)
            on_text(out["text"])
            meta = out["meta_info"]
            chunk({}, finish=meta["finish_reason"]["type"])
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk(None, usage=_usage(meta))
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except ValueError as exc:
            if not started:
                self._send(400, _openai_error(str(exc)))
            return
        except (SchedulerGone, OSError):
            return  # the scheduler died (or the client left): the stream just ends, no [DONE]
        access(f"{self.client_address[0]}:{self.client_address[1]}", "POST", "/v1/chat/completions", 200, "OK")

    def loads(self):
        """sglang's GET /v1/loads (what smg's load monitor polls): per DP rank, the scheduler's load."""
        engine = self.engine
        if engine.status == "starting":
            self._send(503)
            return
        load = {
            "timestamp": time.time(),
            "dp_rank": 0,
            "num_running_reqs": engine.in_flight,
            "num_waiting_reqs": 0,
            "num_used_tokens": 0,
            "max_running_requests": engine.max_running_requests,
            "token_usage": 0.0,
            "gen_throughput": 0.0,
            "utilization": engine.in_flight / engine.max_running_requests,
        }
        self._send(
            200,
            {
                "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                "version": SIMULATED_SGLANG_VERSION,
                "accelerator": None,
                "num_accelerators": engine.args.tp_size,
                "loads": [load],
            },
        )

    def chat_completions(self):
        if (self.headers.get("content-type") or "").split(";")[0].strip().lower() != "application/json":
            self._send(
                400,
                {
                    "object": "error",
                    "message": "Unsupported Media Type: Only 'application/json' is allowed",
                    "type": "BadRequestError",
                    "param": None,
                    "code": 400,
                },
            )
            return
        try:
            body = self._body()
            if not isinstance(body, dict):
                raise ValueError("the request body must be a JSON object")
            prompt = _chat_prompt(body.get("messages"))
            max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 128
        except ValueError as exc:
            self._send(400, _openai_error(str(exc)))
            return
        self.engine.before_generation()
        if body.get("stream"):
            with _InFlight(self.engine):
                self._chat_stream(body, prompt, max_tokens)
            return
        try:
            with _InFlight(self.engine):
                out = self.engine.generate(prompt, None, {"max_new_tokens": max_tokens})
        except ValueError as exc:
            self._send(400, _openai_error(str(exc)))
            return
        except SchedulerGone:
            self.close_connection = True
            return
        meta = out["meta_info"]
        finish = meta["finish_reason"]
        usage = {
            "prompt_tokens": meta["prompt_tokens"],
            "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
            "completion_tokens": meta["completion_tokens"],
            "prompt_tokens_details": None,
            "reasoning_tokens": 0,
        }
        self._send(
            200,
            {
                "id": meta["id"],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or self.engine.served_model_name,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": out["text"],
                            "reasoning_content": None,
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": finish["type"],
                        "matched_stop": finish.get("matched"),
                    }
                ],
                "usage": usage,
                "metadata": {"weight_version": "default"},
            },
        )


def _usage(meta: dict) -> dict:
    return {
        "prompt_tokens": meta["prompt_tokens"],
        "total_tokens": meta["prompt_tokens"] + meta["completion_tokens"],
        "completion_tokens": meta["completion_tokens"],
    }


def _chat_chunk(head: dict, delta, finish, usage) -> dict:
    """One chunk of a streamed chat completion; the usage chunk (``delta`` None) has no choices, as sglang's."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish, "matched_stop": None}
    return dict(head, usage=usage, choices=[] if delta is None else [choice])


GET_ROUTES = {
    "/health": Handler.health,
    "/health_generate": Handler.health,
    "/ready": Handler.ready,
    "/v1/models": Handler.models,
    "/get_model_info": Handler.get_model_info,
    "/model_info": Handler.model_info,
    "/get_server_info": Handler.get_server_info,
    "/server_info": Handler.server_info,
    "/metrics": Handler.metrics,
    "/v1/loads": Handler.loads,
}
POST_ROUTES = {"/generate": Handler.generate, "/v1/chat/completions": Handler.chat_completions}


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True  # like uvicorn: SO_REUSEADDR, which still refuses a port someone listens on
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # a client that hung up mid-request is not news


def _bind(engine: Engine) -> Server:
    host, port = engine.args.host, engine.args.port
    Server.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
    handler = type("BoundHandler", (Handler,), {"engine": engine})
    return Server((host, port), handler)


def serve(engine: Engine, start: float) -> int:
    """Bind (a port in use fails for real), warm up, print the ready line, serve until a signal."""
    args, settings = engine.args, engine.settings
    raw(f"INFO:     Started server process [{os.getpid()}]")
    raw("INFO:     Waiting for application startup.")
    try:
        server = _bind(engine)
    except OSError as exc:
        raw(
            f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
            f"('{args.host}', {args.port}): {(exc.strerror or str(exc)).lower()}"
        )
        raw("Traceback (most recent call last):\n" + "".join(traceback.format_exception_only(type(exc), exc)))
        raw("INFO:     Waiting for application shutdown.")
        raw("INFO:     Application shutdown complete.")
        return 1
    # sglang 0.5.17 without the optional openai-harmony package logs this at every start, then serves.
    log(
        "OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses init failed "
        "(ModuleNotFoundError: No module named 'openai_harmony')"
    )
    raw("INFO:     Application startup complete.")
    raw(f"INFO:     Uvicorn running on http://{args.host}:{server.server_address[1]} (Press CTRL+C to quit)")

    # The scheduler runs in a child process, as in sglang: KillMode=mixed sends SIGTERM to this main
    # process only (it drains); control-group would SIGTERM the child too and drop every generation.
    engine.scheduler = subprocess.Popen(
        ["sglang::scheduler_TP0", "-c", _SCHEDULER_PROGRAM, str(os.getpid())], executable=sys.executable, close_fds=True
    )
    stop = threading.Event()

    def on_sigterm(signum, frame):
        log(f"SIGTERM received. signum={signum!r} frame={frame!r}. Draining requests and shutting down...")
        threading.Thread(target=_drain_then_stop, args=(engine, server, stop), daemon=True).start()

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGINT, on_sigterm)
    # Test hooks (real sglang has none; it dies of SIGUSR1/2): a fault injected AFTER a good start, for the
    # generation watchdog's tests. Local only: a signal needs root or the service user on the host.
    signal.signal(signal.SIGUSR1, lambda signum, frame: _inject(engine, "wedged"))
    signal.signal(signal.SIGUSR2, lambda signum, frame: _inject(engine, "low_acceptance"))
    # The CUDA-graph replay fault at once (hours after the start in the field, sglang #24361): the
    # scheduler logs the traceback and the tree dies by SIGKILL, as illegal_address_replay does.
    signal.signal(signal.SIGWINCH, lambda signum, frame: _replay_fault_now(engine))
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()

    if not args.skip_server_warmup:
        stop.wait(settings.warmup_s)
        access("127.0.0.1:" + str(40000 + os.getpid() % 20000), "POST", "/generate", 200, "OK")
    if stop.is_set():  # SIGTERM during warmup
        return 0
    engine.status = "up"
    if engine.spec_algorithm == "DDTREE":  # the budget it was given, as the ddtree patch set logs it
        log(ddtree.startup_line(ddtree.resolve(engine.num_draft_tokens)))
    log("The server is fired up and ready to roll!")
    log(f"sglang-engine-simulator: ready {time.monotonic() - start:.2f} s after launch")

    if engine.fault == "scheduler_death":
        threading.Thread(target=_scheduler_death, args=(engine,), daemon=True).start()
    if engine.fault == "illegal_address_replay":
        threading.Thread(target=_replay_fault, args=(engine,), daemon=True).start()

    stop.wait()
    return 0


def _inject(engine: Engine, fault: str) -> None:
    engine.fault = fault
    raw(f"sglang-engine-simulator: TEST HOOK: fault {fault} injected by signal (the engine was serving)")


def _drain_then_stop(engine: Engine, server: Server, stop: threading.Event) -> None:
    """sglang drains requests on SIGTERM: every generation in flight finishes (streams too), /health
    answers 503 meanwhile; a request a wedged engine holds never drains. The simulator re-checks every
    0.2 s (sglang every 5 s) and logs like sglang every 5 s."""
    engine.draining = True
    last_log = 0.0
    while (engine.hung_requests or engine.in_flight) and not engine.health_failed and not engine.scheduler_gone():
        if time.monotonic() - last_log >= 5:
            last_log = time.monotonic()
            log(
                f"Gracefully exiting... Remaining number of requests {engine.hung_requests + engine.in_flight}. "
                "Remaining requests remaining_rids=[...]."
            )
        time.sleep(0.2)
    if engine.health_failed:
        log("Signal SIGTERM received while health check failed. Force exiting.")
    if engine.scheduler is not None and engine.scheduler.poll() is None:
        engine.scheduler.terminate()  # sglang's kill_process_tree of its children after the drain
        engine.scheduler.wait()
    raw("INFO:     Shutting down")
    raw("INFO:     Waiting for application shutdown.")
    raw("INFO:     Application shutdown complete.")
    raw(f"INFO:     Finished server process [{os.getpid()}]")
    server.server_close()
    stop.set()


def _scheduler_death(engine: Engine) -> None:
    time.sleep(engine.settings.fault_after_s)
    engine.status = "scheduler_dead"
    log(f"Subprocess scheduler_0 (pid={os.getpid() + 3}) crashed with exit code -9. Triggering SIGQUIT for cleanup...")
    log("SIGQUIT received. signum=<Signals.SIGQUIT: 3>, frame=None. It usually means one child failed.")
    time.sleep(engine.settings.death_grace_s)
    die_with_sigkill()


def _replay_fault_now(engine: Engine) -> None:
    raw("sglang-engine-simulator: TEST HOOK: fault illegal_address_replay injected by signal (the engine was serving)")
    engine.status = "scheduler_dead"
    scheduler_exception(tracebacks.illegal_address_replay())


def _replay_fault(engine: Engine) -> None:
    """FAULT_AFTER_S after the ready line (2-5 hours in the field, sglang #24361): a CUDA-graph replay of
    the speculative verify hits an illegal address; the scheduler logs it and the launcher kills the tree."""
    time.sleep(engine.settings.fault_after_s)
    engine.status = "scheduler_dead"
    scheduler_exception(tracebacks.illegal_address_replay())
