"""A scripted OpenAI-compatible chat server for tests, on 127.0.0.1 and a free port.

Real HTTP, so a client is tested down to its SDK, timeouts and headers. The server runs in its
own threads: a scripted delay never blocks the test's event loop, and it works the same from
sync and async tests. Answers are queued with `script` and consumed in order, one per chat
request; when the queue is empty a `responder` (or a default empty extraction) answers.

    async with ScriptedLlm() as llm:
        llm.script(Answer(status=500), Answer(json={"summary": "x", "facets": []}))
        ...  # point the client at llm.url
        assert len(llm.requests) == 2
"""

from __future__ import annotations

import collections
import itertools
import json as jsonlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

DEFAULT_ANSWER: dict[str, Any] = {"summary": "", "facets": []}


@dataclass
class Answer:
    content: str | None = None
    """the assistant message text"""
    json: Any = None
    """shorthand: content = json.dumps(json)"""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """seconds before answering (to provoke client timeouts)"""
    usage: tuple[int, int] | None = None
    """prompt and completion tokens; default: len/4 estimates"""
    omit_usage: bool = False
    """answer without a `usage` object, as some servers do"""
    body: Any = None
    """a raw body (a str is sent as is): the error of a non-200 answer (default: an
    OpenAI-style error object), or sent instead of the completion by a 200 (a broken server)"""

    def text(self) -> str:
        if self.content is not None:
            return self.content
        return jsonlib.dumps(DEFAULT_ANSWER if self.json is None else self.json)


def _estimate(text: str) -> int:
    return math.ceil(len(text) / 4)


class ScriptedLlm:
    """The server. `requests` holds the JSON bodies received, in order (refused ones too)."""

    def __init__(self, *, supports_json_schema: bool = True,
                 responder: Callable[[dict[str, Any]], Answer] | None = None) -> None:
        self.supports_json_schema = supports_json_schema
        """False: a `response_format` json_schema request gets a 400 naming response_format"""
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self._queue: collections.deque[Answer] = collections.deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ids = itertools.count(1)
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self._queue.extend(answers)

    @property
    def pending(self) -> int:
        """Scripted answers not yet consumed."""
        with self._lock:
            return len(self._queue)

    def start(self) -> ScriptedLlm:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.llm = self
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(target=server.serve_forever, kwargs={
            "poll_interval": 0.05}, name="scripted-llm", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        self._stopping.set()  # wakes answers still waiting out their delay
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLlm:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    async def __aenter__(self) -> ScriptedLlm:
        return self.start()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.stop()

    # -- called from the server's threads --

    def _answer_chat(self, body: dict[str, Any]) -> tuple[Answer, bytes]:
        with self._lock:
            self.requests.append(body)
            fmt = body.get("response_format")
            if (not self.supports_json_schema and isinstance(fmt, dict)
                    and fmt.get("type") == "json_schema"):
                return Answer(status=400), _dumps({"error": {
                    "message": "response_format of type json_schema is not supported",
                    "type": "invalid_request_error", "param": "response_format",
                    "code": None}})
            answer = self._queue.popleft() if self._queue else None
        if answer is None:
            answer = self.responder(body) if self.responder is not None else Answer()
        if answer.body is not None and answer.status == 200:
            return answer, _raw(answer.body)
        if answer.status != 200:
            error = answer.body if answer.body is not None else {"error": {
                "message": f"scripted error {answer.status}", "type": "server_error",
                "param": None, "code": None}}
            return answer, _raw(error)
        content = answer.text()
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        tokens_in, tokens_out = answer.usage or (_estimate(prompt), _estimate(content))
        reply: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
        }
        if not answer.omit_usage:
            reply["usage"] = {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                              "total_tokens": tokens_in + tokens_out}
        return answer, _dumps(reply)


def _dumps(value: Any) -> bytes:
    return jsonlib.dumps(value).encode()


def _raw(body: Any) -> bytes:
    return body.encode() if isinstance(body, str) else _dumps(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    llm: ScriptedLlm


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    #: headers and body go out as two writes; with Nagle's algorithm on a kept-alive
    #: connection the body would wait for the client's delayed ACK (about 40 ms a call)
    disable_nagle_algorithm = True
    server: _Server

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {}, _dumps({"object": "list", "data": [
                {"id": "scripted", "object": "model", "created": 0, "owned_by": "tests"}]}))
        else:
            self._send(404, {}, _dumps({"error": {"message": "not found"}}))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {}, _dumps({"error": {"message": "not found"}}))
            return
        try:
            body = jsonlib.loads(raw)
        except ValueError:
            self._send(400, {}, _dumps({"error": {"message": "body is not JSON"}}))
            return
        answer, payload = self.server.llm._answer_chat(body)
        if answer.delay > 0 and self.server.llm._stopping.wait(answer.delay):
            return
        self._send(answer.status, answer.headers, payload)

    def _send(self, status: int, headers: dict[str, str], payload: bytes) -> None:
        try:
            self.send_response(status)
            if not any(name.lower() == "content-type" for name in headers):
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout under test)

    def log_message(self, format: str, *args: Any) -> None:
        pass
