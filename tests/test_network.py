"""The network hop: when the request never gets an HTTP answer, the report names where it broke.

Each failure here is real: a closed port, a proxy on 127.0.0.1 that refuses, a TLS server with a
certificate nobody trusts, a plain-http server reached with https://, a server that answers late,
a listener too busy to accept. The request goes through the real openai SDK and its HTTP library
(httpx, or httpx2 under openai 3.x), which read the proxy and certificate variables from
os.environ when the client is built; main() reads its own dict. So every run puts the variables in
both (tests/runs.py: environ_runner). Each ends with exit 3, link [SDK/网络], the hop named in the
first line (the proxy's address, TLS, the local service, the seconds waited) and, in the second,
advice that fixes that hop. A certificate variable pointing at nothing is a configuration error
(exit 2) caught before anything is sent.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import socketserver
import ssl
import threading
import time
from pathlib import Path

import pytest

import lesson_03_tool_calling_loop as lesson
from tests.provider_server import ARTICLE_FINAL, Reply, completion
from tests.runs import environ_runner

KEY = "sk-network-hop-test-0a1b2c3d4e5f"
PASSWORD = "proxy-pass-5x7Q2w"  # in a proxy address: never printed
REMOTE = "https://api.deepseek.com/v1"  # never reached: every run here stops on 127.0.0.1
CERTIFICATE = Path(__file__).resolve().parent / "tls" / "self_signed_127.0.0.1.pem"
ANSWER = ARTICLE_FINAL["choices"][0]["message"]["content"]


pytestmark = pytest.mark.usefixtures("no_ambient_proxy")  # tests/conftest.py


@pytest.fixture
def run(provider, capsys, monkeypatch):
    """main() in-process; the variables go into os.environ as well as into main()'s dict."""
    return environ_runner(provider, capsys, monkeypatch, KEY)


def network_report(result):
    """The two lines of a network failure: exit 3, link [SDK/网络], no traceback, no key."""
    assert result.code == 3, result.everything
    lines = result.err.splitlines()
    assert len(lines) == 2, result.everything
    first, second = lines
    assert first.startswith(f"[{lesson.SDK_NETWORK}] step 1: "), first
    assert second.startswith("最后一个成功事件：") and "建议：" in second, second
    assert "Traceback" not in result.everything and KEY not in result.everything
    assert result.out == ""
    return first, second


REFERENCE = (Path(__file__).resolve().parent.parent / "REFERENCE.md").read_text(encoding="utf-8")


def shown(text):
    """A line with its run-to-run details (ports on 127.0.0.1, seconds) made alike."""
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", text)
    return re.sub(r"\d+(\.\d+)? 秒", "N 秒", text)


def documented(first, second=None):
    """REFERENCE shows this hop as it is printed: the hop's words before the library's own (the
    part in the first parentheses), and the advice whole."""
    assert shown(first.split("（")[0]) in shown(REFERENCE), first
    if second is not None:
        assert shown(second.split("建议：")[1]) in shown(REFERENCE), second


def pump(source, sink):
    """Copy bytes from source to sink until source ends, then end sink for writing."""
    with contextlib.suppress(OSError):
        while True:
            chunk = source.recv(65536)
            if not chunk:
                break
            sink.sendall(chunk)
    with contextlib.suppress(OSError):  # the other side may be gone already
        sink.shutdown(socket.SHUT_WR)


class Listener:
    """A TCP server on 127.0.0.1 (free port) that hands each connection to `serve` in a thread
    of its own; `lines` records what `serve` chose to record."""

    def __init__(self, serve):
        listener = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self):
                with contextlib.suppress(OSError):
                    serve(listener, self.request)

        self.lines = []
        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()


def connect_proxy(answer: bytes):
    """An HTTP proxy that reads a request's head, records its first line, writes `answer` and
    closes: 407 or 502 to CONNECT, or 200 and then nothing (a tunnel that dies at once)."""

    def serve(listener, conn):
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = conn.recv(4096)
            if not chunk:
                return
            head += chunk
        listener.lines.append(head.split(b"\r\n", 1)[0].decode("latin-1"))
        conn.sendall(answer)

    return Listener(serve)


def tls_front(upstream_port: int):
    """A TLS server that presents tests/tls/self_signed_127.0.0.1.pem and relays what it
    decrypts to the plain-http server on upstream_port; `lines` records each handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(CERTIFICATE)

    def serve(listener, conn):
        try:
            tls = context.wrap_socket(conn, server_side=True)
        except (ssl.SSLError, OSError) as error:
            listener.lines.append(f"handshake failed: {type(error).__name__}")
            return
        listener.lines.append("handshake done")
        with tls, socket.create_connection(("127.0.0.1", upstream_port), timeout=5) as upstream:
            back = threading.Thread(target=pump, args=(upstream, tls), daemon=True)
            back.start()
            pump(tls, upstream)
            back.join(10)

    return Listener(serve)


def another_trust_store():
    """A CA bundle that exists and does not hold the test certificate: the system's (or
    certifi's); with none on this machine, None (the variable is then left unset, and the
    HTTP library falls back to its own default store, which does not hold it either)."""
    candidates = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
    candidates.append(ssl.get_default_verify_paths().openssl_cafile)
    with contextlib.suppress(ImportError):
        import certifi

        candidates.insert(0, certifi.where())
    return next((path for path in candidates if path and os.path.isfile(path)), None)


# ---------------------------------------------------------------------------
# The proxy: a closed port, a refusal, a tunnel that dies, an https:// address for an http proxy
# ---------------------------------------------------------------------------

CLOSED_PROXIES = {
    "HTTPS_PROXY, https endpoint": (REMOTE, "HTTPS_PROXY", "http://127.0.0.1:{proxy}"),
    "HTTP_PROXY, local http endpoint": (
        "http://127.0.0.1:{local}/v1", "HTTP_PROXY", "http://127.0.0.1:{proxy}",
    ),
    "ALL_PROXY socks5": (REMOTE, "ALL_PROXY", "socks5://127.0.0.1:{proxy}"),
    "HTTPS_PROXY socks5 with a password": (
        REMOTE, "HTTPS_PROXY", "socks5://learner:" + PASSWORD + "@127.0.0.1:{proxy}",
    ),
    "HTTPS_PROXY http with a password": (
        REMOTE, "HTTPS_PROXY", "http://learner:" + PASSWORD + "@127.0.0.1:{proxy}",
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("endpoint", "variable", "url"), CLOSED_PROXIES.values(), ids=CLOSED_PROXIES
)
def test_a_proxy_on_a_closed_port_is_named_and_the_advice_is_to_open_it(
    run, dead_port, endpoint, variable, url
):
    proxy, local = dead_port(), dead_port()
    result = run(
        OPENAI_BASE_URL=endpoint.format(local=local), **{variable: url.format(proxy=proxy)}
    )
    first, second = network_report(result)
    assert f"代理 127.0.0.1:{proxy} " in first, first  # the proxy, not the endpoint
    assert "端口" in second and "NO_PROXY=127.0.0.1" in second, second  # its port; local: bypass
    assert PASSWORD not in result.everything
    documented(first, second)


@pytest.mark.parametrize(
    "answer",
    [
        b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n"
        b"Content-Length: 0\r\n\r\n",
        b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=["407", "502"],
)
@pytest.mark.parametrize("userinfo", ["", f"learner:{PASSWORD}@"], ids=["open", "with a password"])
def test_a_proxy_that_refuses_to_connect_is_named_with_its_answer(run, answer, userinfo):
    status = answer.split()[1].decode()
    with connect_proxy(answer) as proxy:
        url = f"http://{userinfo}127.0.0.1:{proxy.port}"
        result = run(OPENAI_BASE_URL=REMOTE, HTTPS_PROXY=url)
    assert proxy.lines == ["CONNECT api.deepseek.com:443 HTTP/1.1"]  # it went to this proxy
    first, second = network_report(result)
    # The library reports the answer, not where it came from: the proxy's URL for https is
    # read where the library reads it, its password masked
    shown = f"http://{'***@' if userinfo else ''}127.0.0.1:{proxy.port}"
    assert first.startswith(f"[{lesson.SDK_NETWORK}] step 1: 代理 {shown} 没接通"), first
    assert PASSWORD not in result.everything
    assert status in first, first  # the proxy's own answer
    if not userinfo:  # REFERENCE shows the open one
        documented(first, second)
    if status == "407":  # the fix for 407: the user name and password in the proxy's address
        assert "407" in second, second


def test_a_proxy_that_drops_the_tunnel_is_a_cut_handshake_and_its_node_is_advised(run):
    # mihomo (Clash Meta) answers CONNECT with 200 before it dials the target
    # (MetaCubeX/mihomo listener/http/proxy.go @ 00e361c5: "Connection established", then
    # tunnel.HandleTCPConn); when its node is down the tunnel closes at once
    with connect_proxy(b"HTTP/1.1 200 Connection established\r\n\r\n") as proxy:
        result = run(OPENAI_BASE_URL=REMOTE, HTTPS_PROXY=f"http://127.0.0.1:{proxy.port}")
    assert proxy.lines == ["CONNECT api.deepseek.com:443 HTTP/1.1"]
    first, second = network_report(result)
    # The same failure as a handshake cut off on a direct line: the advice names both causes
    assert "api.deepseek.com:443 的 TLS 握手被断开" in first, first
    assert "代理的节点" in second and "经代理" in second, second
    documented(first, second)


def test_an_https_address_for_a_plain_http_proxy_is_a_tls_failure_about_the_scheme(run, provider):
    # Clash and V2Ray listen with plain http: https:// in the proxy's address is the mistake
    result = run(OPENAI_BASE_URL=REMOTE, HTTPS_PROXY=f"https://127.0.0.1:{provider.port}")
    first, second = network_report(result)
    assert "TLS" in first, first
    assert "代理" in second and "http://" in second and "https://" in second, second
    assert provider.requests == []
    documented(first, second)


# ---------------------------------------------------------------------------
# TLS to the endpoint: a certificate nobody trusts, a server that does not speak TLS
# ---------------------------------------------------------------------------


def test_a_local_tls_server_works_when_its_certificate_is_in_ssl_cert_file(run, provider):
    # the control for the next test: the same server and certificate, trusted (conftest puts
    # tests/tls/self_signed_127.0.0.1.pem in SSL_CERT_FILE), carry the run
    provider.script(completion(content=ANSWER))
    with tls_front(provider.port) as front:
        result = run(OPENAI_BASE_URL=f"https://127.0.0.1:{front.port}/v1")
    assert (result.code, result.err) == (0, ""), result.everything
    assert result.out.splitlines()[-1] == f"Agent> {ANSWER}"
    assert "handshake done" in front.lines and len(provider.requests) == 1


def test_a_certificate_that_is_not_trusted_is_named_and_ssl_cert_file_is_the_fix(
    run, provider, monkeypatch
):
    store = another_trust_store()
    if store is None:
        monkeypatch.delenv("SSL_CERT_FILE")
    else:
        monkeypatch.setenv("SSL_CERT_FILE", store)
    provider.script(completion(content=ANSWER))
    with tls_front(provider.port) as front:
        result = run(OPENAI_BASE_URL=f"https://127.0.0.1:{front.port}/v1")
    first, second = network_report(result)
    assert f"127.0.0.1:{front.port} 的 TLS 证书不受信任" in first, first
    assert "SSL_CERT_FILE" in second, second
    assert provider.requests == [] and "handshake done" not in front.lines
    documented(first, second)


def test_https_to_a_plain_http_server_is_named_at_once_and_http_is_the_fix(run, provider):
    started = time.monotonic()
    result = run(
        OPENAI_BASE_URL=provider.base_url.replace("http://", "https://"), OPENAI_TIMEOUT="30"
    )
    waited = time.monotonic() - started
    first, second = network_report(result)
    assert "TLS 握手失败" in first, first
    assert "http://" in second, second
    # the connect limit is 5 s (OPENAI_TIMEOUT 30): the answer that is not TLS ends it at once
    assert waited < 2, waited
    assert provider.requests == []


# ---------------------------------------------------------------------------
# The endpoint's own machine: nothing listening, an answer too late, a connection never accepted
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_nothing_listening_on_a_local_port_is_named(run, dead_port, host):
    port = dead_port()
    result = run(OPENAI_BASE_URL=f"http://{host}:{port}/v1")
    first, _ = network_report(result)
    assert f"本机 {host}:{port} 上没有服务在应答" in first, first
    assert "代理" not in first and "PROXY" not in result.err, result.err  # no proxy to blame


def test_a_read_timeout_names_the_seconds_of_openai_timeout(run, provider):
    provider.script(Reply(json=completion(content=ANSWER), delay=5), completion(content=ANSWER))
    started = time.monotonic()
    result = run(OPENAI_TIMEOUT="0.8")
    waited = time.monotonic() - started
    first, second = network_report(result)
    assert "0.8 秒" in first and "OPENAI_TIMEOUT" in first, first
    assert "OPENAI_TIMEOUT" in second, second  # raise it for a slow model
    assert 0.7 < waited < 3, waited
    assert len(provider.requests) == 1  # connected, asked once, no retry
    documented(first)


@pytest.fixture
def busy_port():
    """A port on 127.0.0.1 that is listening but never accepts, its backlog already full: a new
    connection's handshake is never answered, so connecting times out (Linux drops the SYN)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.05)  # let the first connections settle into the queue
    yield port
    for sock in [*fillers, listener]:
        sock.close()


def test_a_connect_timeout_names_the_connect_limit(run, busy_port):
    started = time.monotonic()
    result = run(OPENAI_BASE_URL=f"http://127.0.0.1:{busy_port}/v1", OPENAI_TIMEOUT="0.8")
    waited = time.monotonic() - started
    first, _ = network_report(result)
    assert 0.7 < waited < 3, waited  # it waited out the connect limit: min(OPENAI_TIMEOUT, 5)
    assert f"127.0.0.1:{busy_port}" in first and "连上了" not in first, first  # never connected
    assert "0.8 秒" in first, first  # how long it waited to connect
    documented(first)


# ---------------------------------------------------------------------------
# A certificate variable that points at nothing: a configuration error, nothing sent
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_a_certificate_variable_pointing_at_nothing_stops_before_anything_is_sent(
    run, provider, variable
):
    provider.script(completion(content=ANSWER))
    result = run(**{variable: "/nonexistent/ca.pem"})
    assert result.code == 2, result.everything
    first, second = result.err.splitlines()
    assert first.startswith(f"[{lesson.HARNESS}] {variable} 不可用"), first
    assert variable in second, second
    assert provider.requests == [] and result.out == "" and "Traceback" not in result.err
