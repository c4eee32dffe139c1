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


def free_closed_port_url() -> str:
    """Return an http://127.0.0.1:<port>/v1 URL where nothing listens."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


@pytest.fixture
def closed_port_url() -> str:
    """A base URL that refuses connections."""
    return free_closed_port_url()
