"""Shared pytest fixtures: a scripted OpenAI-compatible server and a dead URL."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.provider_server import ProviderServer


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> Iterator[int]:
    """-n auto (or logical) starts one worker more than pytest-xdist would (one per core). A
    good part of this suite waits rather than computes: scripted servers that answer late,
    deadlines, child processes starting up. The extra worker runs tests meanwhile."""
    count = yield
    chosen = os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").strip().isdigit()
    return count if chosen else count + 1


SMALL_CA_FILE = Path(__file__).resolve().parent / "tls" / "self_signed_127.0.0.1.pem"
TRUST_VARIABLES = ("SSL_CERT_FILE", "SSL_CERT_DIR")
# The machine's own settings, for the one test that does reach a real endpoint (test_live)
MACHINE_TRUST = {name: os.environ[name] for name in TRUST_VARIABLES if name in os.environ}


@pytest.fixture(autouse=True, scope="session")
def one_certificate_trust_store() -> Iterator[None]:
    """The SDK's HTTP client loads a trust store for every client it builds, even for http://:
    the machine's whole CA bundle takes ~50 ms, about a fifth of this suite's CPU time. The
    test servers are on 127.0.0.1 and the tests about TLS set their own trust, so one small
    certificate stands in, and the suite no longer depends on the machine's SSL_CERT_FILE or
    SSL_CERT_DIR. Child processes inherit it; test_live gives back MACHINE_TRUST."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("SSL_CERT_DIR", raising=False)
        patch.setenv("SSL_CERT_FILE", str(SMALL_CA_FILE))
        yield


@pytest.fixture
def quick_sdk_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK sleeps about 0.5 s before its one retry; tests count attempts, not waits."""
    import openai._base_client

    monkeypatch.setattr(openai._base_client, "INITIAL_RETRY_DELAY", 0.01)


@pytest.fixture
def provider() -> Iterator[ProviderServer]:
    """A running ProviderServer, stopped after the test."""
    with ProviderServer() as server:
        yield server


@pytest.fixture
def closed_port_url() -> Iterator[str]:
    """A base URL that refuses connections. The port stays bound, never listening, until the
    test ends: no other test (or xdist worker) can start a server on it meanwhile."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.fixture
def no_ambient_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """No proxy or OPENAI_* variable from the machine running the tests (the network and proxy
    tests use it: the SDK's HTTP library reads the proxy variables from os.environ)."""
    for name in list(os.environ):
        if name.lower().endswith("_proxy") or name.startswith("OPENAI_"):
            monkeypatch.delenv(name)


@pytest.fixture
def dead_port() -> Iterator:
    """A factory of ports on 127.0.0.1 that refuse connections: each stays bound, never
    listening, until the test ends, so nothing else can start listening on it meanwhile."""
    held = []

    def bind() -> int:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        held.append(sock)
        return sock.getsockname()[1]

    yield bind
    for sock in held:
        sock.close()
