"""Proxies: the SDK's HTTP library decides, from the usual variables; the script only reports.

The library (httpx2 under openai 3.x, httpx before) reads HTTP_PROXY, HTTPS_PROXY, ALL_PROXY
and NO_PROXY, in either case, from os.environ when the SDK builds its client (trust_env).
main() reads its own dict. A real run has the variables in both, so every run here puts them
in both (tests/runs.py: environ_runner). Neither library bypasses 127.0.0.1 by itself: with
NO_PROXY unset, a run to the local test server goes through the proxy, and each test checks
that it did by what the proxy (or the server) saw.

A socks5:// proxy (Clash, V2Ray) and an HTTP proxy carry the run; the NO_PROXY fix the report
gives for a local endpoint works; proxy settings the library cannot use are a configuration
error, never a traceback. How a failed proxy is named: tests/test_network.py.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading

import pytest

from tests.provider_server import ARTICLE_FINAL, ARTICLE_LINES, ARTICLE_TOOL_TURN
from tests.runs import environ_runner

KEY = "sk-proxies-secret-0123456789"
TOOL_TURN, FINAL = ARTICLE_TOOL_TURN, ARTICLE_FINAL


pytestmark = pytest.mark.usefixtures("no_ambient_proxy")  # tests/conftest.py


@pytest.fixture
def run(provider, capsys, monkeypatch):
    """main() in-process; the variables go into os.environ as well as into main()'s dict."""
    return environ_runner(provider, capsys, monkeypatch, KEY)


def report(result):
    """The two stderr lines, as (first, second); fails if there are not exactly two."""
    lines = result.err.splitlines()
    assert len(lines) == 2 and "Traceback" not in result.everything, result.everything
    return lines[0], lines[1]


def proxy_names(text):
    """The *_proxy variable names a text mentions (NO_PROXY included), as a set."""
    return set(re.findall(r"\b[A-Za-z]+_proxy\b", text, re.IGNORECASE))


# ---------------------------------------------------------------------------
# A SOCKS5 proxy, standard library only (RFC 1928: no authentication, CONNECT only)
# ---------------------------------------------------------------------------


def recv_exactly(conn, count):
    data = b""
    while len(data) < count:
        chunk = conn.recv(count - len(data))
        if not chunk:
            raise ConnectionError("the client closed the connection mid-handshake")
        data += chunk
    return data


class Socks5Proxy:
    """A SOCKS5 server on 127.0.0.1 that relays each CONNECT to its target and records the
    targets, as (host, port), in `connects`."""

    def __init__(self):
        self.connects = []
        self._sockets = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.02)  # accept() wakes to see whether to stop
        self.port = self._listener.getsockname()[1]
        self.url = f"socks5://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stopping.set()
        self._thread.join(5)
        self._listener.close()
        with self._lock:
            for sock in self._sockets:
                sock.close()

    def _keep(self, sock):
        with self._lock:
            self._sockets.append(sock)
        return sock

    def _accept(self):
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            conn.settimeout(None)
            threading.Thread(target=self._serve, args=(self._keep(conn),), daemon=True).start()

    def _serve(self, conn):
        try:
            version, count = recv_exactly(conn, 2)
            if version != 5 or 0 not in recv_exactly(conn, count):
                conn.sendall(b"\x05\xff")  # no acceptable method
                return
            conn.sendall(b"\x05\x00")  # no authentication
            _, command, _, kind = recv_exactly(conn, 4)
            if kind == 1:
                host = socket.inet_ntop(socket.AF_INET, recv_exactly(conn, 4))
            elif kind == 4:
                host = socket.inet_ntop(socket.AF_INET6, recv_exactly(conn, 16))
            else:
                host = recv_exactly(conn, recv_exactly(conn, 1)[0]).decode()
            port = int.from_bytes(recv_exactly(conn, 2), "big")
            bound = b"\x00\x01" + bytes(4) + bytes(2)
            if command != 1:
                conn.sendall(b"\x05\x07" + bound)  # command not supported
                return
            try:
                upstream = self._keep(socket.create_connection((host, port), timeout=5))
            except OSError:
                conn.sendall(b"\x05\x05" + bound)  # connection refused
                return
            upstream.settimeout(None)
            with self._lock:
                self.connects.append((host, port))
            conn.sendall(b"\x05\x00" + bound)
            back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
            back.start()
            pump(conn, upstream)
            back.join(10)
        except (OSError, ValueError):
            pass
        finally:
            conn.close()


def pump(source, sink):
    """Copy bytes from source to sink until source ends, then end sink for writing."""
    try:
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    except OSError:
        pass
    with contextlib.suppress(OSError):  # the other side may be gone already
        sink.shutdown(socket.SHUT_WR)


@pytest.fixture
def socks():
    with Socks5Proxy() as proxy:
        yield proxy


# ---------------------------------------------------------------------------
# A proxy the variables name carries the run
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["ALL_PROXY", "all_proxy", "HTTP_PROXY"])
def test_a_socks5_proxy_carries_the_run(run, provider, socks, variable):
    provider.script(TOOL_TURN, FINAL)
    result = run(**{variable: socks.url})
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
    assert len(provider.requests) == 2
    # it went through the proxy: every connection to the provider was one of its CONNECTs
    assert socks.connects and set(socks.connects) == {("127.0.0.1", provider.port)}


def test_an_http_proxy_carries_the_run_to_an_endpoint_that_refuses_direct_connections(
    run, provider, dead_port
):
    # The test server answers a forward proxy's absolute-form requests as it answers any.
    endpoint = f"http://127.0.0.1:{dead_port()}/v1"
    provider.script(TOOL_TURN, FINAL)
    result = run(OPENAI_BASE_URL=endpoint, HTTP_PROXY=provider.base_url[: -len("/v1")])
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
    assert [r.path for r in provider.requests] == [f"{endpoint}/chat/completions"] * 2


# ---------------------------------------------------------------------------
# After a connection failure: NO_PROXY alone blames no proxy; the NO_PROXY fix works
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["NO_PROXY", "no_proxy"])
def test_no_proxy_alone_is_not_a_proxy_to_blame(run, dead_port, variable):
    # Many machines set no_proxy=localhost,127.0.0.1 with no proxy at all. With nothing to
    # bypass, "add the endpoint to NO_PROXY" sends the learner away from the server that
    # is not running.
    result = run(OPENAI_BASE_URL=f"http://127.0.0.1:{dead_port()}/v1", **{variable: "localhost"})
    first, second = report(result)
    assert result.code == 3 and first.startswith("[SDK/网络] step 1: "), result.err
    assert proxy_names(second) == set(), second


def test_the_no_proxy_fix_the_report_gives_makes_a_local_run_work(run, provider, dead_port):
    provider.script(TOOL_TURN, FINAL)
    proxies = {
        "HTTP_PROXY": f"http://127.0.0.1:{dead_port()}",
        "ALL_PROXY": f"socks5://127.0.0.1:{dead_port()}",
    }
    failed = run(**proxies)
    _, second = report(failed)
    assert failed.code == 3 and provider.requests == []  # the dead proxies were really used
    [fix] = re.findall(r"NO_PROXY=([^\s；;，,]+(?:,[^\s；;，,]+)*)", second)
    result = run(**proxies, NO_PROXY=fix)  # exactly what the report says to set
    assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")


# ---------------------------------------------------------------------------
# Proxy settings the library cannot use: a report, never a traceback
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "url"),
    [
        ("ALL_PROXY", "socks4://127.0.0.1:7890"),  # the library speaks socks5 only
        ("all_proxy", "socks://127.0.0.1:7890"),
        ("HTTP_PROXY", "ftp://127.0.0.1:7890"),
    ],
)
def test_a_proxy_address_the_library_cannot_use_is_a_configuration_error(
    run, provider, variable, url
):
    result = run(**{variable: url})
    first, _ = report(result)
    assert (result.code, result.out, provider.requests) == (2, "", []), result.everything
    assert first.startswith("[Harness] ") and "127.0.0.1:7890" in first  # the library's words


@pytest.mark.parametrize("entry", ["[::1]", "[::1]:8080", "::1/128"])
def test_a_no_proxy_entry_the_library_cannot_parse_is_never_a_traceback(
    run, provider, dead_port, entry
):
    # httpx 0.28 raises InvalidURL for these when the client is built (a configuration
    # report, exit 2); httpx2 ignores them, and 127.0.0.1 beside them is bypassed.
    provider.script(TOOL_TURN, FINAL)
    result = run(HTTP_PROXY=f"http://127.0.0.1:{dead_port()}", NO_PROXY=f"{entry},127.0.0.1")
    if result.code == 2:
        first, _ = report(result)
        assert first.startswith("[Harness] ") and provider.requests == []
    else:
        assert (result.code, result.out.splitlines(), result.err) == (0, ARTICLE_LINES, "")
