"""Checks of the test server itself, using urllib only."""

from __future__ import annotations

import contextlib
import gzip
import http.client
import json
import socket
import time
import urllib.error
import urllib.request

import pytest

from tests.provider_server import (
    OMIT,
    RECORDINGS,
    ProviderServer,
    Reply,
    bad_chunked,
    bad_gzip,
    broken_off,
    completion,
    recording,
    tool_call,
)


def post(url: str, payload: object, timeout: float = 5) -> tuple[int, str, bytes]:
    """POST JSON; return status, content type and body, also for HTTP errors."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers["Content-Type"], err.read()


def open_request(server: ProviderServer, payload: object = None) -> socket.socket:
    """Send a chat-completions POST on a plain socket and return it, response unread."""
    body = json.dumps(payload or {}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def read_to_end(sock: socket.socket, timeout: float = 5) -> bytes:
    """Read from sock until the server closes it."""
    sock.settimeout(timeout)
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def http_response(server: ProviderServer) -> http.client.HTTPResponse:
    """POST {} with http.client and return the response, body unread."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
    conn.request("POST", "/v1/chat/completions", body=b"{}")
    return conn.getresponse()


def test_replies_are_used_in_order_and_requests_recorded(provider):
    provider.script(completion("one"), Reply(status=429, json={"error": {"message": "slow"}}))
    url = provider.base_url + "/chat/completions"

    status, ctype, raw = post(url, {"model": "m", "n": 1})
    assert (status, ctype) == (200, "application/json")
    assert json.loads(raw)["choices"][0]["message"]["content"] == "one"
    assert post(url, {"model": "m", "n": 2})[0] == 429

    recorded = provider.requests
    assert [r.body["n"] for r in recorded] == [1, 2]
    assert recorded[0].path == "/v1/chat/completions"
    assert recorded[0].headers["authorization"] == "Bearer sk-test"
    assert json.loads(recorded[0].raw) == recorded[0].body


def test_exhausted_script_answers_500(provider):
    status, _, raw = post(provider.base_url + "/chat/completions", {})
    assert status == 500
    assert "no scripted reply left" in json.loads(raw)["error"]["message"]


def test_other_paths_get_html_404_and_are_recorded(provider):
    provider.script(completion("unused"))
    url = provider.base_url.replace("/v1", "") + "/chat/completions"

    status, ctype, raw = post(url, {})
    assert (status, ctype) == (404, "text/html")
    assert b"<title>404 Not Found</title>" in raw
    assert [r.path for r in provider.requests] == ["/chat/completions"]
    assert post(provider.base_url + "/chat/completions", {})[0] == 200  # script untouched


def test_callable_reply_and_raw_body(provider):
    provider.script(
        lambda body: completion(body["messages"][-1]["content"].upper()),
        Reply(body=b"<html>oops</html>", content_type="text/html", headers={"X-Test": "1"}),
    )
    url = provider.base_url + "/chat/completions"

    _, _, raw = post(url, {"messages": [{"role": "user", "content": "hi"}]})
    assert json.loads(raw)["choices"][0]["message"]["content"] == "HI"
    assert post(url, {})[1:] == ("text/html", b"<html>oops</html>")


def test_builders_can_omit_keys():
    call = tool_call(OMIT, "f", '{"a": 1}')
    assert call == {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert "function" not in tool_call("c1", None, None, function=OMIT)
    body = completion(OMIT, tool_calls=[call], finish_reason=OMIT, reasoning_content="r")
    choice = body["choices"][0]
    assert "finish_reason" not in choice and "content" not in choice["message"]
    assert choice["message"]["reasoning_content"] == "r"


def test_stop_interrupts_a_delayed_reply():
    server = ProviderServer().start()
    server.script(Reply(delay=30, json={}))
    with pytest.raises(OSError):
        post(server.base_url + "/chat/completions", {}, timeout=0.3)
    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 2


def test_closed_port_url_refuses(closed_port_url):
    with pytest.raises(urllib.error.URLError):
        post(closed_port_url + "/chat/completions", {}, timeout=1)


def test_drip_sends_the_whole_body_one_byte_at_a_time(provider):
    provider.script(Reply(body=b"0123456789", content_type="text/plain", drip=0.05))
    started = time.monotonic()
    status, ctype, raw = post(provider.base_url + "/chat/completions", {})
    elapsed = time.monotonic() - started
    assert (status, ctype, raw) == (200, "text/plain", b"0123456789")
    assert 0.45 <= elapsed < 1.5  # about len(body) * drip


def test_stop_interrupts_a_drip():
    server = ProviderServer().start()
    server.script(Reply(body=b"x" * 1000, drip=0.05))  # 50 s if left alone
    sock = open_request(server)
    try:
        sock.settimeout(2)
        assert sock.recv(65536).startswith(b"HTTP/1.0 200 OK\r\n")  # head comes at once
        started = time.monotonic()
        server.stop()
        rest = read_to_end(sock, timeout=2)  # the server closes the connection early
        assert time.monotonic() - started < 1
        assert len(rest) < 100
    finally:
        sock.close()
        server.stop()  # a no-op if the test got that far


def test_max_seconds_bounds_a_drip():
    with ProviderServer(max_seconds=0.2) as server:
        server.script(Reply(body=b"x" * 1000, drip=0.02))  # 20 s if left alone
        started = time.monotonic()
        with pytest.raises(http.client.IncompleteRead) as caught:
            http_response(server).read()
        assert time.monotonic() - started < 1
        assert 0 < len(caught.value.partial) < 100


def test_drip_headers_delays_the_status_line(provider):
    provider.script(Reply(json={}, drip=0.05, drip_headers=True))  # about 7 s for all of it
    with open_request(provider) as sock:
        sock.settimeout(0.2)
        got = b""
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline:
            with contextlib.suppress(socket.timeout):  # TimeoutError only from Python 3.10
                got += sock.recv(65536)
        assert b"HTTP/1.0 200 OK\r\n".startswith(got)  # nothing, or part of the status line
        assert len(got) < 10


def test_drip_headers_still_sends_everything(provider):
    provider.script(Reply(json={"a": 1}, drip=0.001, drip_headers=True))
    with open_request(provider) as sock:
        raw = read_to_end(sock)
    assert raw.startswith(b"HTTP/1.0 200 OK\r\n")
    assert raw.endswith(b"\r\n\r\n" + b'{"a": 1}')


def test_client_leaving_a_drip_is_quiet(provider, capfd):
    provider.script(Reply(body=b"x" * 1000, drip=0.01))
    with open_request(provider) as sock:
        sock.settimeout(2)
        assert sock.recv(65536).startswith(b"HTTP/1.0 200")
    time.sleep(0.2)  # the server writes on into the closed connection
    assert "Traceback" not in capfd.readouterr().err


def test_raw_is_written_verbatim_and_closes(provider):
    raw = b"HTTP/1.1 299 Whatever\r\nX-Odd:no space\r\nContent-Length: 999\r\n\r\nhalf a bo"
    provider.script(Reply(raw=raw, headers={"X-Ignored": "1"}))
    with open_request(provider, {"model": "m"}) as sock:
        assert read_to_end(sock) == raw
    assert provider.requests[0].body == {"model": "m"}


def test_raw_can_drip_its_body(provider):
    raw = b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nbody"
    provider.script(Reply(raw=raw, drip=0.05))
    with open_request(provider) as sock:
        sock.settimeout(2)
        assert sock.recv(65536) == raw[:-4]  # the head at once, the body later
        assert read_to_end(sock) == b"body"


def test_broken_off_raises_incomplete_read(provider):
    provider.script(broken_off(b'{"id": "x"'), broken_off(b"{}", claimed=5))

    response = http_response(provider)
    assert (response.status, response.headers["Content-Length"]) == (200, "110")
    with pytest.raises(http.client.IncompleteRead) as caught:
        response.read()
    assert caught.value.partial == b'{"id": "x"'

    with pytest.raises(http.client.IncompleteRead) as caught:
        http_response(provider).read()
    assert (caught.value.partial, caught.value.expected) == (b"{}", 3)


def test_bad_chunked_raises_an_http_client_error(provider):
    provider.script(bad_chunked())
    response = http_response(provider)
    assert response.status == 200 and response.headers["Transfer-Encoding"] == "chunked"
    with pytest.raises(http.client.HTTPException):
        response.read()


def test_bad_gzip_says_gzip_but_is_not(provider):
    provider.script(bad_gzip(b'{"not": "gzip"}'))
    response = http_response(provider)
    body = response.read()
    assert body == b'{"not": "gzip"}'
    assert response.headers["Content-Encoding"] == "gzip"
    assert response.headers["Content-Length"] == str(len(body))
    with pytest.raises(OSError):  # gzip.BadGzipFile
        gzip.decompress(body)
    with pytest.raises(ValueError):
        bad_gzip(gzip.compress(b"{}"))


RECORDED = sorted(path.name for path in RECORDINGS.glob("*.json"))


def test_there_are_thirteen_recordings():
    assert len(RECORDED) == 13


@pytest.mark.parametrize("name", RECORDED)
def test_recording_replays_the_real_response(provider, name):
    recorded = json.loads((RECORDINGS / name).read_text(encoding="utf-8"))
    request, reply = recording(name)
    assert request == recorded["request"]["body"]
    assert recording(name.removesuffix(".json")) == (request, reply)
    response = recorded["response"]
    assert (reply.status, reply.content_type) == (response["status"], response["content_type"])
    assert json.loads(reply.body.decode("utf-8")) == response["body"]

    provider.script(reply)
    status, ctype, raw = post(provider.base_url + "/chat/completions", request)
    assert (status, ctype) == (response["status"], response["content_type"])
    assert json.loads(raw) == response["body"]
    assert provider.requests[0].body == request
