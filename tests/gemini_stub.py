"""A stub of the Gemini REST API on 127.0.0.1, for driving the real ``google-genai`` SDK in tests.

It speaks ``POST /{api_version}/models/{model}:generateContent`` and answers, per call, what the
test scripted: a model answer (the JSON text the model "wrote", wrapped in ``candidates``), an
error ``{"error": {"code", "message", "status"}}`` with that HTTP status, a raw body, each after an
optional delay. Every request is recorded (path, headers, raw body, parsed JSON) so tests can
count HTTP calls and search every prompt for forbidden content.

Which reply a request gets, first match wins:

1. a rule (:meth:`GeminiStub.when`): a substring of the raw request body (say a room name only
   one device's plan has) -> a reply or a function of the request, for every matching call or the
   next ``times`` ones;
2. the scripted queue (:meth:`GeminiStub.push`), in order;
3. :attr:`GeminiStub.default` (a ``continue`` answer unless changed).

Use the fixture: ``from tests.gemini_stub import gemini_stub`` and take ``gemini_stub`` as a test
argument (the import registers the fixture in the test module). A live worker reaches the stub
with the environment :func:`gemini_env` gives it.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

STATUS_NAMES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


@dataclass(frozen=True)
class Reply:
    """One scripted HTTP answer. ``text`` is the model's answer text; ``body`` a raw body instead."""

    status: int = 200
    text: str | None = None
    body: bytes | None = None
    delay_s: float = 0.0

    def payload(self) -> bytes:
        if self.body is not None:
            return self.body
        if self.status != 200:
            name = STATUS_NAMES.get(self.status, "UNKNOWN")
            return orjson.dumps({"error": {"code": self.status, "message": f"stub {name}", "status": name}})
        return orjson.dumps(
            {
                "candidates": [
                    {
                        "content": {"parts": [{"text": self.text or ""}], "role": "model"},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "modelVersion": "stub",
            }
        )


def answer(
    decision: str,
    reason_code: str = "stub_answer",
    rationale: str = "Stub answer.",
    *,
    replan_steps: list[dict[str, Any]] | None = None,
    keep_areas: list[str] | None = None,
    delay_s: float = 0.0,
) -> Reply:
    """A 200 whose model text is a well-formed answer (``decision`` may be anything, on purpose)."""
    obj: dict[str, Any] = {"decision": decision, "reason_code": reason_code, "rationale": rationale}
    if replan_steps is not None:
        obj["replan_steps"] = replan_steps
    if keep_areas is not None:
        obj["keep_areas"] = keep_areas
    return Reply(text=orjson.dumps(obj).decode(), delay_s=delay_s)


def error(status: int, *, delay_s: float = 0.0) -> Reply:
    """An API error with the HTTP status ``status`` and Google's error body."""
    return Reply(status=status, delay_s=delay_s)


def model_text(text: str, *, delay_s: float = 0.0) -> Reply:
    """A 200 whose model text is ``text`` verbatim (e.g. malformed JSON)."""
    return Reply(text=text, delay_s=delay_s)


@dataclass
class StubRequest:
    """One recorded request."""

    method: str
    path: str
    headers: dict[str, str]
    raw: bytes
    json: Any

    @property
    def text(self) -> str:
        return self.raw.decode("utf-8", "replace")

    @property
    def model(self) -> str | None:
        """The model of a ``/vXX/models/{model}:generateContent`` path."""
        tail = self.path.split("/models/", 1)
        return tail[1].split(":", 1)[0] if len(tail) == 2 else None


Responder = Callable[[StubRequest], Reply]


@dataclass
class _Rule:
    match: str
    reply: Reply | Responder
    times: int | None


@dataclass
class GeminiStub:
    """The stub's script and its record of requests (thread-safe)."""

    base_url: str = ""
    default: Reply | Responder = field(default_factory=lambda: answer("continue"))
    requests: list[StubRequest] = field(default_factory=list)
    #: requests being answered now, and the most there ever were at once
    in_flight: int = 0
    max_in_flight: int = 0
    _queue: deque[Reply] = field(default_factory=deque)
    _rules: list[_Rule] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: threading.Event = field(default_factory=threading.Event)

    def push(self, *replies: Reply) -> GeminiStub:
        """Queue replies for the next calls no rule matches, in order."""
        with self._lock:
            self._queue.extend(replies)
        return self

    def when(self, match: str, reply: Reply | Responder, *, times: int | None = None) -> GeminiStub:
        """Answer requests whose raw body contains ``match`` with ``reply`` (``times`` calls, or all)."""
        with self._lock:
            self._rules.append(_Rule(match, reply, times))
        return self

    def calls(self, match: str | None = None) -> int:
        """How many generateContent calls arrived (those whose body contains ``match``)."""
        with self._lock:
            return sum(1 for r in self.requests if match is None or match in r.text)

    def bodies(self) -> list[str]:
        with self._lock:
            return [r.text for r in self.requests]

    def _pick(self, req: StubRequest) -> Reply:
        with self._lock:
            self.requests.append(req)
            chosen: Reply | Responder | None = None
            for rule in self._rules:
                if rule.match in req.text and (rule.times is None or rule.times > 0):
                    if rule.times is not None:
                        rule.times -= 1
                    chosen = rule.reply
                    break
            if chosen is None and self._queue:
                chosen = self._queue.popleft()
            if chosen is None:
                chosen = self.default
        return chosen(req) if callable(chosen) else chosen

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)


def _handler(stub: GeminiStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                parsed: Any = orjson.loads(raw) if raw else None
            except orjson.JSONDecodeError:
                parsed = None
            req = StubRequest("POST", self.path, dict(self.headers.items()), raw, parsed)
            if ":generateContent" not in self.path:
                self._send(Reply(status=404))
                return
            reply = stub._pick(req)
            stub._enter()
            try:
                stub._sleep(reply.delay_s)
                if stub._stopping.is_set():
                    self.close_connection = True
                    return
                self._send(reply)
            finally:
                stub._leave()

        def _send(self, reply: Reply) -> None:
            body = reply.payload()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.send_response(reply.status, HTTPStatus(reply.status).phrase)
                self.send_header("Content-Type", "application/json; charset=UTF-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                self.wfile.flush()

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True


@contextlib.contextmanager
def running_stub() -> Iterator[GeminiStub]:
    """A stub serving on 127.0.0.1 (a free port) until the block ends."""
    stub = GeminiStub()
    server = _Server(("127.0.0.1", 0), _handler(stub))
    host, port = server.server_address[:2]
    stub.base_url = f"http://{host!s}:{port}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        stub._stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def gemini_stub() -> Iterator[GeminiStub]:
    """A fresh :class:`GeminiStub` on 127.0.0.1 for one test."""
    with running_stub() as stub:
        yield stub


def gemini_env(env: dict[str, str], stub: GeminiStub) -> dict[str, str]:
    return {
        **env,
        "GUARDIAN_SUPERVISOR": "gemini",
        "GOOGLE_GEMINI_BASE_URL": stub.base_url,
        "GEMINI_API_KEY": "test-key",
        "GUARDIAN_GEMINI_RETRIES": "1",
        "GUARDIAN_GEMINI_TIMEOUT_MS": "8000",
        "GUARDIAN_GEMINI_BACKOFF_MS": "50",
    }
