"""Integration tests talk to a real moto server on 127.0.0.1, started once per session."""

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer

from fleetcast.embedded.template import LocalTemplate

ROOT = Path(__file__).resolve().parents[2]


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
    template = LocalTemplate(ROOT / "template.yaml")
    properties = template.resolve(template.resources["ModelRegistryTable"]["Properties"])
    name = f"registry-{uuid.uuid4().hex[:8]}"
    client = boto3.client("dynamodb")
    client.create_table(
        TableName=name,
        KeySchema=properties["KeySchema"],
        AttributeDefinitions=properties["AttributeDefinitions"],
        BillingMode="PAY_PER_REQUEST",
    )
    yield boto3.resource("dynamodb").Table(name)
    client.delete_table(TableName=name)
