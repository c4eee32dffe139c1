"""A tiny OpenAI-compatible chat-completions server for tests (standard library only)."""

from __future__ import annotations

import contextlib
import itertools
import json as _json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CHAT_PATH = "/v1/chat/completions"
NOT_FOUND_HTML = (
    b"<html><head><title>404 Not Found</title></head>"
    b"<body><h1>404 Not Found</h1><p>nginx</p></body></html>"
)
EXHAUSTED = {"error": {"message": "test server: no scripted reply left"}}
RECORDINGS = Path(__file__).resolve().parent / "recordings"


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
    """One scripted HTTP answer: JSON (`json`) or raw bytes (`body`), optionally delayed.

    `drip` > 0 sends the body one byte at a time, `drip` seconds apart (and the status line
    and headers too with `drip_headers`). `raw` replaces the whole response, head included,
    with these bytes as they are, then closes the connection; with `drip` its head (up to the
    first blank line) goes at once unless `drip_headers`.
    """

    status: int = 200
    json: Any = OMIT
    body: bytes | None = None
    content_type: str | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    drip: float = 0.0
    drip_headers: bool = False
    raw: bytes | None = None

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


def _raw_200(headers: dict, body: bytes) -> bytes:
    """Return a hand-written HTTP/1.1 200 response: these headers, then body as it is."""
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return f"HTTP/1.1 200 OK\r\n{head}\r\n".encode("latin-1") + body


def broken_off(body: bytes, claimed: int | None = None) -> Reply:
    """A 200 JSON reply whose Content-Length claims `claimed` bytes (default: 100 more than
    body has) but which sends only body, then closes the connection."""
    claimed = len(body) + 100 if claimed is None else claimed
    headers = {"Content-Type": "application/json", "Content-Length": claimed}
    return Reply(raw=_raw_200(headers, body))


def bad_chunked() -> Reply:
    """A 200 JSON reply with Transfer-Encoding: chunked whose chunk-size line is not hex."""
    headers = {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    return Reply(raw=_raw_200(headers, b"zz\r\n{}\r\n0\r\n\r\n"))


def bad_gzip(body: bytes) -> Reply:
    """A 200 JSON reply labelled Content-Encoding: gzip whose body (sent as is) is not gzip."""
    if body.startswith(b"\x1f\x8b"):
        raise ValueError("bad_gzip: body starts with the gzip magic number")
    return Reply(body=body, content_type="application/json", headers={"Content-Encoding": "gzip"})


# The article's turn as a provider sends it, and the lines the script prints for it.
ARTICLE_TOOL_TURN = completion(
    tool_calls=[tool_call("call_1", "multiply", '{"a":248,"b":15}')], finish_reason="tool_calls"
)
ARTICLE_FINAL = completion(content="248 乘以 15 等于 3720。")
ARTICLE_LINES = [
    "step 1: finish_reason=tool_calls",
    'step 1: multiply call_id=call_1 result={"status":"completed","result":3720}',
    "step 2: finish_reason=stop",
    "Agent> 248 乘以 15 等于 3720。",
]


def recording(name: str) -> tuple[dict, Reply]:
    """Load tests/recordings/<name>(.json); return its request body and a Reply replaying
    its response (status, content type, body) as the real server sent it."""
    path = RECORDINGS / (name if name.endswith(".json") else name + ".json")
    recorded = _json.loads(path.read_text(encoding="utf-8"))
    response = recorded["response"]
    body = _json.dumps(response["body"], ensure_ascii=False).encode("utf-8")
    reply = Reply(status=response["status"], content_type=response["content_type"], body=body)
    return recorded["request"]["body"], reply


def gemini_error(message: str, status: int = 400) -> Reply:
    """An error as Gemini's OpenAI-compatible endpoint sends it: a JSON list of one error."""
    error = {"code": status, "message": message, "status": "INVALID_ARGUMENT"}
    return Reply(status=status, json=[{"error": error}])


def openrouter_error(raw: str, status: int = 400, provider_name: str = "Google AI Studio") -> Reply:
    """An OpenRouter 4xx: error.message says only "Provider returned error"; the upstream
    provider's own words are in error.metadata.raw."""
    metadata = {"raw": raw, "provider_name": provider_name}
    error = {"message": "Provider returned error", "code": status, "metadata": metadata}
    return Reply(status=status, json={"error": error})


def refuse_unless(problem_of, then: Any):
    """A scripted reply that behaves like a provider validating the request it receives:
    problem_of(request body) returns a Reply (the provider's refusal) or None; None sends
    `then` (a Reply or a JSON body)."""

    def reply(body: Any) -> Any:
        refusal = problem_of(body)
        return then if refusal is None else refusal

    return reply


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
        try:
            if reply.raw is not None:
                self._send_raw(reply)
            else:
                payload, content_type = reply.encode()
                head = [("Content-Type", content_type), ("Content-Length", len(payload))]
                head += reply.headers.items()  # after, as before: duplicates are sent too
                self._send(self._head(reply.status, head), payload, reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its read timeout)

    def _head(self, status: int, headers: list) -> bytes:
        """Return the status line and (name, value) headers, as send_response() writes them."""
        reason = self.responses.get(status, ("",))[0]
        lines = [
            f"{self.protocol_version} {status} {reason}",
            f"Server: {self.version_string()}",
            f"Date: {self.date_time_string()}",
            *(f"{name}: {value}" for name, value in headers),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_raw(self, reply: Reply) -> None:
        """Write reply.raw as the whole response, then end the connection for writing."""
        self.close_connection = True
        end = reply.raw.find(b"\r\n\r\n")
        split = end + 4 if end >= 0 else 0  # no blank line: it is all "body" to drip
        self._send(reply.raw[:split], reply.raw[split:], reply)
        with contextlib.suppress(OSError):  # the client may already be gone
            self.connection.shutdown(socket.SHUT_WR)

    def _send(self, head: bytes, body: bytes, reply: Reply) -> None:
        """Write head and body, dripping as the reply asks, until stop() or max_seconds."""
        if reply.drip <= 0:
            self.wfile.write(head + body)
            return
        owner = self.server.owner
        deadline = time.monotonic() + owner.max_seconds
        if not reply.drip_headers:
            self.wfile.write(head)
            self.wfile.flush()
        dripped = head + body if reply.drip_headers else body
        for byte in dripped:
            if owner._stopping.wait(reply.drip) or time.monotonic() > deadline:
                self.close_connection = True
                return
            self.wfile.write(bytes((byte,)))
            self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    owner: ProviderServer


class ProviderServer:
    """Scripted OpenAI-compatible server on 127.0.0.1 (free port), for tests.

    A dripping reply stops, cut short, `max_seconds` after it starts being written.
    """

    def __init__(self, max_seconds: float = 30.0) -> None:
        self.max_seconds = max_seconds
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
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.005}, daemon=True
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


__all__ = [
    "ARTICLE_FINAL",
    "ARTICLE_LINES",
    "ARTICLE_TOOL_TURN",
    "OMIT",
    "RECORDINGS",
    "ProviderServer",
    "RecordedRequest",
    "Reply",
    "bad_chunked",
    "bad_gzip",
    "broken_off",
    "completion",
    "gemini_error",
    "openrouter_error",
    "recording",
    "refuse_unless",
    "tool_call",
]
