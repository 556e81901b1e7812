"""A tiny OpenAI-compatible chat server whose answers a Python function computes: a tool for
the demo and its tests, never part of a running service.

`habitus demo` (and its tests) need the LLM-driven services (the extractor, habits' Analyze
and judge) to answer without a model: this server speaks just enough of the protocol the shared
client (`habitus.llm`, on the `openai` SDK) uses, `POST /v1/chat/completions` and
`GET /v1/models`, on 127.0.0.1 and a free port, in its own threads. A `Responder` gets the
request's JSON body and returns the assistant message's content: a string, or any JSON value
(sent as its `json.dumps`). Its answers are invented, so `habitus demo` hands its URL to the
services of its own sandbox and to no others (:mod:`habitus.demo.sandbox`): a user's own
system never gets a summary from it. It lives in the demo package, which no service and no
lower layer of the library imports (pyproject's import-linter contracts hold them to that).

It is deliberately small; the richer test double (scripted queues, errors, delays) is
`tests/support/llm_server.py`, which examples and the library must not import.

    with ScriptedLlmServer(lambda body: {"summary": "", "facets": []}) as server:
        ...  # HABITUS_LLM_BASE_URL=server.url, HABITUS_LLM_MODEL=server.model
"""

from __future__ import annotations

import itertools
import json
import math
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

Responder = Callable[[dict[str, Any]], Any]

__all__ = ["Responder", "ScriptedLlmServer", "schema_name", "system_message", "user_message"]


def schema_name(body: dict[str, Any]) -> str:
    """The `response_format` JSON schema's name a request asks for ("" in fenced mode)."""
    fmt = body.get("response_format")
    schema = fmt.get("json_schema") if isinstance(fmt, dict) else None
    return str(schema.get("name") or "") if isinstance(schema, dict) else ""


def _message(body: dict[str, Any], role: str) -> str:
    for message in body.get("messages") or []:
        if isinstance(message, dict) and message.get("role") == role:
            return str(message.get("content") or "")
    return ""


def user_message(body: dict[str, Any]) -> str:
    return _message(body, "user")


def system_message(body: dict[str, Any]) -> str:
    return _message(body, "system")


class ScriptedLlmServer:
    """The server; `calls` counts the chat requests answered."""

    def __init__(self, responder: Responder, *, model: str = "scripted") -> None:
        self.responder = responder
        self.model = model
        self.calls = 0
        self.url = ""
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ScriptedLlmServer:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="scripted-llm", daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> ScriptedLlmServer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """The chat completion answering `body` (called from the server's threads)."""
        with self._lock:
            self.calls += 1
            number = next(self._ids)
        answer = self.responder(body)
        content = answer if isinstance(answer, str) else json.dumps(answer)
        prompt = "".join(str(m.get("content", "")) for m in body.get("messages") or []
                         if isinstance(m, dict))
        tokens_in, tokens_out = math.ceil(len(prompt) / 4), math.ceil(len(content) / 4)
        return {
            "id": f"chatcmpl-{number}", "object": "chat.completion",
            "created": int(time.time()), "model": str(body.get("model") or self.model),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                      "total_tokens": tokens_in + tokens_out},
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    owner: ScriptedLlmServer


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes on a kept-alive socket
    server: _Server

    def do_GET(self) -> None:
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": self.server.owner.model, "object": "model", "created": 0,
                 "owned_by": "habitus"}]})
        else:
            self._send(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": "not found"}})
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        try:
            reply = self.server.owner.completion(body)
        except Exception as exc:  # a responder's bug is the caller's 500, not a dead server
            self._send(500, {"error": {"message": f"scripted responder failed: {exc!r}",
                                       "type": "server_error"}})
            return
        self._send(200, reply)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def log_message(self, format: str, *args: Any) -> None:
        pass
