"""Shared pytest fixtures: a scripted OpenAI-compatible server and a dead URL."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.provider_server import ProviderServer


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
