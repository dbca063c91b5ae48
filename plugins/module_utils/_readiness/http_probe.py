# Copyright: specdec maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""HTTP side of readiness: /health, /v1/models, server info and the real generation probe.

Every call has its own timeout (a wedged sglang never answers ``/generate`` or
``/server_info`` while ``/v1/models`` answers in milliseconds). HTTP goes through an
injected ``open_url`` (``ansible.module_utils.urls.open_url`` on the target, a fake
in unit tests). ``start(name)`` runs a call on a daemon thread so the state machine
keeps watching the process while a request hangs.

The probe succeeds only with output tokens (``completion_tokens > 0`` or output ids)
and a finish reason other than ``abort``; text is checked only when asked
(``expect_regex`` / ``require_text``): real sglang can return empty text for valid tokens.

Stdlib only (plus the injected open_url): this runs on the target host.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time

BODY_EXCERPT_BYTES = 500
HEALTH_TIMEOUT_S = 5.0
MODELS_TIMEOUT_S = 5.0
SERVER_INFO_TIMEOUT_S = 10.0


class HttpResult:
    """Outcome of one HTTP call. ``error`` is None, 'refused', 'timeout' or 'connection'."""

    def __init__(self, url, *, status=None, body="", error=None, detail="", latency_s=0.0):
        self.url = url
        self.status = status
        self.body = body
        self.error = error
        self.detail = detail
        self.latency_s = latency_s

    @property
    def ok(self):
        return self.error is None and self.status is not None and 200 <= self.status < 300

    def json(self):
        try:
            return json.loads(self.body)
        except (TypeError, ValueError):
            return None

    def excerpt(self, secret=None):
        return redact((self.body or "")[:BODY_EXCERPT_BYTES], secret)

    def describe(self):
        if self.error:
            return "%s: %s%s" % (self.url, self.error, " (%s)" % self.detail if self.detail else "")
        return "%s: HTTP %s" % (self.url, self.status)


def redact(text, secret):
    if secret and text:
        return text.replace(secret, "********")
    return text


def _error_kind(exc):
    """Map an exception from open_url to 'refused' / 'timeout' / 'connection'."""
    reason = getattr(exc, "reason", None)
    for candidate in (exc, reason):
        if isinstance(candidate, ConnectionRefusedError):
            return "refused"
        if isinstance(candidate, (socket.timeout, TimeoutError)):
            return "timeout"
    text = str(reason if reason is not None else exc).lower()
    if "refused" in text:
        return "refused"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    return "connection"


class BackgroundCall:
    """A call running on a daemon thread (never blocks interpreter exit)."""

    def __init__(self, func, clock=time.monotonic):
        self.started = clock()
        self._result = None
        self._error = None
        self._done = threading.Event()
        thread = threading.Thread(target=self._run, args=(func,), name="readiness-http")
        thread.daemon = True
        thread.start()

    def _run(self, func):
        try:
            self._result = func()
        except Exception as exc:  # reported through result()
            self._error = exc
        finally:
            self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self, timeout):
        """Block until the call finishes or ``timeout`` seconds pass; whether it finished."""
        return self._done.wait(timeout)

    def result(self):
        if self._error is not None:
            raise self._error
        return self._result


class ProbeSettings:
    """The ``probe`` option, normalised."""

    def __init__(
        self,
        *,
        prompt="Say hi.",
        max_new_tokens=16,
        temperature=0.0,
        timeout=60.0,
        api="native",
        expect_regex=None,
        require_text=False,
    ):
        if api not in ("native", "openai"):
            raise ValueError("probe.api must be native or openai, got %r" % (api,))
        self.prompt = prompt
        self.max_new_tokens = int(max_new_tokens)
        self.temperature = float(temperature)
        self.timeout = float(timeout)
        self.api = api
        self.expect_regex = expect_regex
        self.require_text = bool(require_text)

    @classmethod
    def from_dict(cls, data):
        data = {k: v for k, v in (data or {}).items() if v is not None}
        return cls(**data)


class Prober:
    """HTTP calls against one sglang server."""

    def __init__(
        self,
        base_url,
        open_url,
        *,
        probe=None,
        api_key=None,
        served_model_name=None,
        validate_certs=True,
        use_proxy=False,
        clock=time.monotonic,
    ):
        self.base_url = base_url.rstrip("/")
        self._open_url = open_url
        self.probe = probe or ProbeSettings()
        self.api_key = api_key
        self.served_model_name = served_model_name
        self.validate_certs = validate_certs
        self.use_proxy = use_proxy
        self._clock = clock

    # -- transport -------------------------------------------------------------------------
    def request(self, method, path, timeout, payload=None):
        url = self.base_url + path
        headers = {"Accept": "application/json"}
        data = None
        if payload is not None:
            data = json.dumps(payload).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        start = self._clock()
        try:
            response = self._open_url(
                url,
                data=data,
                headers=headers,
                method=method,
                timeout=timeout,
                validate_certs=self.validate_certs,
                use_proxy=self.use_proxy,
                follow_redirects="safe",
            )
            status = getattr(response, "status", None) or response.getcode()
            body = response.read().decode("utf-8", "replace")
            return HttpResult(url, status=status, body=body, latency_s=self._clock() - start)
        except Exception as exc:
            latency = self._clock() - start
            code = getattr(exc, "code", None)
            if isinstance(code, int):  # urllib HTTPError: the server answered
                body = ""
                try:
                    body = exc.read().decode("utf-8", "replace")
                except Exception:  # a body we cannot read is simply absent
                    body = ""
                return HttpResult(url, status=code, body=body, latency_s=latency)
            return HttpResult(
                url, error=_error_kind(exc), detail=redact(str(exc), self.api_key)[:200], latency_s=latency
            )

    # -- endpoints -------------------------------------------------------------------------
    def health(self, timeout=HEALTH_TIMEOUT_S):
        return self.request("GET", "/health", timeout)

    def models(self, timeout=MODELS_TIMEOUT_S):
        return self.request("GET", "/v1/models", timeout)

    def server_info(self, timeout=SERVER_INFO_TIMEOUT_S):
        """GET /server_info; the deprecated /get_server_info only where the new path is missing.

        sglang 0.5.23 logs a deprecation warning on every /get_server_info call; releases before
        /server_info existed answer the new path 404 (or 405), and only then is the old one asked.
        """
        result = self.request("GET", "/server_info", timeout)
        if result.status in (404, 405):
            result = self.request("GET", "/get_server_info", timeout)
        return result

    def first_model_id(self, timeout=MODELS_TIMEOUT_S):
        result = self.models(timeout)
        data = result.json() if result.ok else None
        if isinstance(data, dict):
            for item in data.get("data") or []:
                if isinstance(item, dict) and item.get("id"):
                    return item["id"]
        return None

    def generate(self, timeout=None):
        """The real probe: one generation, judged. Returns a ProbeOutcome."""
        timeout = self.probe.timeout if timeout is None else timeout
        if self.probe.api == "openai":
            return self._chat(timeout)
        return self._native(timeout)

    def native_generate(self, timeout=None):
        """One native ``POST /generate`` whatever ``probe.api`` says (its meta_info carries the speculative
        counters an OpenAI answer lacks)."""
        return self._native(self.probe.timeout if timeout is None else timeout)

    def _native(self, timeout):
        payload = {
            "text": self.probe.prompt,
            "sampling_params": {
                "max_new_tokens": self.probe.max_new_tokens,
                "temperature": self.probe.temperature,
            },
        }
        result = self.request("POST", "/generate", timeout, payload)
        outcome = ProbeOutcome("native", result, timeout)
        data = result.json() if result.ok else None
        if isinstance(data, list) and data:
            data = data[0]
        if result.ok and not isinstance(data, dict):
            return outcome.fail("bad_response", "expected a JSON object from /generate, got %r" % result.excerpt()[:80])
        if isinstance(data, dict):
            meta = data.get("meta_info") or {}
            finish = meta.get("finish_reason")
            outcome.text = data.get("text") or ""
            tokens = meta.get("completion_tokens")
            if tokens is None and isinstance(data.get("output_ids"), list):
                tokens = len(data["output_ids"])
            outcome.completion_tokens = int(tokens or 0)
            outcome.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
            outcome.finish_message = finish.get("message") if isinstance(finish, dict) else None
            outcome.spec_accept_length = meta.get("spec_accept_length")
            outcome.spec_verify_ct = meta.get("spec_verify_ct")
            outcome.server_latency_s = meta.get("e2e_latency")
        return self._judge(outcome)

    def _chat(self, timeout):
        model = self.served_model_name or self.first_model_id(min(MODELS_TIMEOUT_S, timeout)) or "default"
        payload = {
            "model": model,
            "messages": [{"role": "user", "content": self.probe.prompt}],
            "max_tokens": self.probe.max_new_tokens,
            "temperature": self.probe.temperature,
            "stream": False,
        }
        result = self.request("POST", "/v1/chat/completions", timeout, payload)
        outcome = ProbeOutcome("openai", result, timeout)
        outcome.model = model
        data = result.json() if result.ok else None
        if result.ok and not isinstance(data, dict):
            return outcome.fail(
                "bad_response", "expected a JSON object from /v1/chat/completions, got %r" % result.excerpt()[:80]
            )
        if isinstance(data, dict):
            choices = data.get("choices") or [{}]
            choice = choices[0] if isinstance(choices[0], dict) else {}
            message = choice.get("message") or {}
            outcome.text = message.get("content") or ""
            usage = data.get("usage") or {}
            outcome.completion_tokens = int(usage.get("completion_tokens") or 0)
            finish = choice.get("finish_reason")
            outcome.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
            spec = (data.get("sglext") or {}).get("spec_tokens_details") or {}
            if isinstance(spec, list):
                spec = spec[0] if spec and isinstance(spec[0], dict) else {}
            outcome.spec_accept_length = spec.get("spec_accept_length")
            outcome.spec_verify_ct = spec.get("spec_verify_ct")
        return self._judge(outcome)

    def _judge(self, outcome):
        problem = self._call_problem(outcome) or self._generation_problem(outcome)
        if problem:
            return outcome.fail(*problem)
        outcome.ok = True
        return outcome

    def _call_problem(self, outcome):
        """(error, reason) when the HTTP call itself failed, else None."""
        result = outcome.http
        if result.error:
            what = {"timeout": "no answer within %gs" % outcome.timeout}.get(
                result.error, "%s (%s)" % (result.error, result.detail)
            )
            return result.error, "%s: %s" % (result.url, what)
        if not result.ok:
            return (
                "http_status",
                "%s answered HTTP %s: %s" % (result.url, result.status, result.excerpt(self.api_key)[:200]),
            )
        return None

    def _generation_problem(self, outcome):
        """(error, reason) when the answered generation does not pass the probe, else None."""
        if outcome.finish_reason == "abort":
            return (
                "abort",
                "generation finished with reason abort%s"
                % (": %s" % outcome.finish_message if outcome.finish_message else ""),
            )
        if outcome.completion_tokens <= 0:
            return (
                "no_tokens",
                "generation returned completion_tokens=%d (no output tokens)" % outcome.completion_tokens,
            )
        if self.probe.require_text and not outcome.text.strip():
            return "no_text", "generation returned %d tokens but empty text (require_text)" % outcome.completion_tokens
        if self.probe.expect_regex and not re.search(self.probe.expect_regex, outcome.text or ""):
            return (
                "regex",
                "generated text %r does not match expect_regex %r" % (outcome.text[:120], self.probe.expect_regex),
            )
        return None

    # -- background ------------------------------------------------------------------------
    def start(self, name, **kwargs):
        """Run ``health`` / ``models`` / ``server_info`` / ``generate`` on a daemon thread."""
        func = getattr(self, name)
        return BackgroundCall(lambda: func(**kwargs), clock=self._clock)


class ProbeOutcome:
    """A judged generation."""

    def __init__(self, api, http, timeout):
        self.api = api
        self.http = http
        self.timeout = timeout
        self.ok = False
        self.error = None
        self.reason = ""
        self.text = ""
        self.completion_tokens = 0
        self.finish_reason = None
        self.finish_message = None
        self.spec_accept_length = None
        self.spec_verify_ct = None
        self.server_latency_s = None
        self.model = None

    def fail(self, error, reason):
        self.ok = False
        self.error = error
        self.reason = reason
        return self

    @property
    def latency_s(self):
        return self.http.latency_s

    def as_dict(self, secret=None):
        latency = round(self.latency_s, 3)
        tokens_per_s = round(self.completion_tokens / self.latency_s, 2) if self.ok and self.latency_s > 0 else None
        data = {
            "api": self.api,
            "url": self.http.url,
            "ok": self.ok,
            "error": self.error,
            "status": self.http.status,
            "text": self.text,
            "completion_tokens": self.completion_tokens,
            "finish_reason": self.finish_reason,
            "latency_s": latency,
            "tokens_per_s": tokens_per_s,
            "spec_accept_length": self.spec_accept_length,
            "spec_verify_ct": self.spec_verify_ct,
        }
        if self.model is not None:
            data["model"] = self.model
        if not self.ok:
            data["reason"] = redact(self.reason, secret)
            data["body"] = self.http.excerpt(secret)
        return data
