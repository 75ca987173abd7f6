"""Integration tests talk to a real moto server on 127.0.0.1, started once per session."""

from collections.abc import Iterator
from typing import Any

import pytest
from moto.server import ThreadedMotoServer
from registry_tables import create_registry_table

from fleetcast.embedded.gateway import Gateway


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def aws_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Standard AWS variables pointing every client at the moto server."""
    for name, value in {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    return moto_endpoint


@pytest.fixture
def registry_table(aws_env: str) -> Iterator[Any]:
    """A fresh model-registry table, built from template.yaml's own properties."""
    table = create_registry_table()
    yield table
    table.delete()


@pytest.fixture
def gateway(aws_env: str) -> Iterator[Gateway]:
    """The local stack's AWS gateway (moto with the stack's patches), in this process."""
    running = Gateway()
    running.start()
    try:
        yield running
    finally:
        running.stop()
