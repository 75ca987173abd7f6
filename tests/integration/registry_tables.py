"""The model-registry table as template.yaml declares it, for the integration tests."""

import uuid
from pathlib import Path
from typing import Any

import boto3

from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.aws import TABLE_CONFIG

ROOT = Path(__file__).resolve().parents[2]


def create_registry_table() -> Any:
    """A fresh model-registry table where AWS_ENDPOINT_URL points, built from
    template.yaml's own properties, and reached as the functions reach it (their
    ``fleetcast_common.aws.dynamodb_table``'s configuration)."""
    template = LocalTemplate(ROOT / "template.yaml")
    properties = template.resolve(template.resources["ModelRegistryTable"]["Properties"])
    name = f"registry-{uuid.uuid4().hex[:8]}"
    boto3.client("dynamodb").create_table(
        TableName=name,
        KeySchema=properties["KeySchema"],
        AttributeDefinitions=properties["AttributeDefinitions"],
        BillingMode="PAY_PER_REQUEST",
    )
    return boto3.resource("dynamodb", config=TABLE_CONFIG).Table(name)
