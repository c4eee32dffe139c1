"""A tiny OpenAI-compatible chat-completions server for tests (standard library only)."""

from __future__ import annotations

import itertools
import json as _json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

CHAT_PATH = "/v1/chat/completions"
NOT_FOUND_HTML = (
    b"<html><head><title>404 Not Found</title></head>"
    b"<body><h1>404 Not Found</h1><p>nginx</p></body></html>"
)
EXHAUSTED = {"error": {"message": "test server: no scripted reply left"}}


class _Omit:
    """Sentinel type: a key whose value is OMIT is left out of the built JSON."""

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()
_ids = itertools.count(1)


def _strip(d: dict) -> dict:
    """Return d without the keys whose value is OMIT."""
    return {k: v for k, v in d.items() if v is not OMIT}


@dataclass
class Reply:
    """One scripted HTTP answer: JSON (`json`) or raw bytes (`body`), optionally delayed."""

    status: int = 200
    json: Any = OMIT
    body: bytes | None = None
    content_type: str | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0

    def encode(self) -> tuple[bytes, str]:
        """Return the response bytes and their content type."""
        if self.body is not None:
            return self.body, self.content_type or "application/octet-stream"
        payload = b"" if self.json is OMIT else _json.dumps(self.json).encode()
        return payload, self.content_type or "application/json"


@dataclass
class RecordedRequest:
    """One request as the server saw it; header names are lower-cased."""

    method: str
    path: str
    headers: dict
    body: Any
    raw: bytes


def completion(content=None, tool_calls=None, finish_reason="stop", **message_extra) -> dict:
    """Build a chat.completion body with one choice; pass OMIT to drop a key."""
    message = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    message.update(message_extra)
    return {
        "id": f"chatcmpl-test-{next(_ids)}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "test-model",
        "choices": [
            _strip(
                {
                    "index": 0,
                    "message": _strip(message),
                    "logprobs": None,
                    "finish_reason": finish_reason,
                }
            )
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def tool_call(id, name, arguments, type="function", **extra) -> dict:
    """Build one tool-call dict; pass OMIT (e.g. id=OMIT, function=OMIT) to drop a key."""
    call = {
        "id": id,
        "type": type,
        "function": _strip({"name": name, "arguments": arguments}),
    }
    call.update(extra)
    return _strip(call)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self._handle()

    def do_GET(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        owner = self.server.owner
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = _json.loads(raw) if raw else None
        except ValueError:
            body = None
        # SDK versions differ in header-name case (httpx vs httpx2), so normalise it.
        headers = {name.lower(): value for name, value in self.headers.items()}
        owner._record(RecordedRequest(self.command, self.path, headers, body, raw))

        if self.command != "POST" or urlsplit(self.path).path != CHAT_PATH:
            reply = Reply(status=404, body=NOT_FOUND_HTML, content_type="text/html")
        else:
            reply = owner._next_reply(body)

        # A delay that stop() interrupts lets the suite end without waiting it out.
        if reply.delay and owner._stopping.wait(reply.delay):
            return
        payload, content_type = reply.encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (e.g. its read timeout); nothing to tell it


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: ProviderServer


class ProviderServer:
    """Scripted OpenAI-compatible server on 127.0.0.1 (free port), for tests."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._replies: list = []
        self._requests: list[RecordedRequest] = []
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ProviderServer:
        """Bind a free port and serve in a daemon thread."""
        self._stopping.clear()
        self._httpd = _Server(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Wake delayed replies, stop serving and close the socket."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(timeout=5)
            self._httpd = self._thread = None

    def __enter__(self) -> ProviderServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    def script(self, *replies: Any) -> None:
        """Replace the queue of replies for POST /v1/chat/completions, used one per request."""
        with self._lock:
            self._replies = list(replies)

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(request)

    def _next_reply(self, body: Any) -> Reply:
        with self._lock:
            item = self._replies.pop(0) if self._replies else Reply(status=500, json=EXHAUSTED)
        if callable(item) and not isinstance(item, Reply):
            item = item(body)
        return item if isinstance(item, Reply) else Reply(json=item)


__all__ = ["OMIT", "ProviderServer", "RecordedRequest", "Reply", "completion", "tool_call"]
