"""The template's roles, queues, buckets, tables and Glue catalog, created in moto for the
local stack (those restored from the last stop are kept as they are)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetcast.embedded.lifecycle import lifecycle_rules
from fleetcast.embedded.template import LocalTemplate


def _properties(template: LocalTemplate, logical_id: str) -> dict[str, Any]:
    properties: dict[str, Any] = template.resolve(
        template.resources[logical_id].get("Properties", {})
    )
    return properties


def create_resources(
    template: LocalTemplate,
    client: Callable[[str], Any],
    create_roles: Callable[[Any, Any], None],
) -> None:
    """The template's roles, queues, buckets, tables and Glue catalog, one type each.

    Why not samtranslator's translation created through moto's CloudFormation (tried
    on 2026-12-01, moto 5.2.5): of the 71 translated resources moto's CloudFormation
    does not implement AWS::Glue::Database and ::Table, AWS::CloudWatch::Alarm and the
    S3, SQS and SNS policies, and ``create_stack`` fails outright at the first
    ``Fn::GetAtt`` of one (FailedJobsAlarm). A stack would also have to be created
    afresh, where buckets and tables restored from the last stop are kept here.
    Removing the unsupported resources and their references first would be more code
    than this, not less.
    """
    s3, dynamodb, sqs = (client(s) for s in ("s3", "dynamodb", "sqs"))
    create_roles(client("iam"), client("sts"))  # SAM's roles too, as it makes them
    for logical_id in template.resources_of_type("AWS::SQS::Queue"):
        sqs.create_queue(QueueName=template.physical_name(logical_id))
    # Buckets and tables restored from the last stop are there already.
    buckets = {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}
    tables = set(dynamodb.list_tables()["TableNames"])
    for logical_id in template.resources_of_type("AWS::S3::Bucket"):
        name, properties = template.physical_name(logical_id), _properties(template, logical_id)
        if name not in buckets:
            _create_bucket(s3, name, properties)
        # Every start, restored buckets too: the template's rules may have changed, as a
        # deploy would change them (embedded/lifecycle.py acts on them).
        rules = lifecycle_rules(properties.get("LifecycleConfiguration", {}))
        if rules:
            s3.put_bucket_lifecycle_configuration(
                Bucket=name, LifecycleConfiguration={"Rules": rules}
            )
    for logical_id in template.resources_of_type("AWS::DynamoDB::Table"):
        if template.physical_name(logical_id) in tables:
            continue
        properties = _properties(template, logical_id)
        request: dict[str, Any] = {
            "TableName": template.physical_name(logical_id),
            "KeySchema": properties["KeySchema"],
            "AttributeDefinitions": properties["AttributeDefinitions"],
            "BillingMode": properties.get("BillingMode", "PAY_PER_REQUEST"),
        }
        if "GlobalSecondaryIndexes" in properties:
            request["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
        dynamodb.create_table(**request)
    _create_glue_catalog(template, client("glue"))


def _create_glue_catalog(template: LocalTemplate, glue: Any) -> None:
    """The template's Glue databases and tables (the run exports' catalog), so the
    CLI and tests see what Athena would; those restored from the last stop stay."""
    databases = {d["Name"] for d in glue.get_databases()["DatabaseList"]}
    for logical_id in template.resources_of_type("AWS::Glue::Database"):
        database_input = _properties(template, logical_id)["DatabaseInput"]
        if database_input["Name"] not in databases:
            glue.create_database(DatabaseInput=database_input)
    for logical_id in template.resources_of_type("AWS::Glue::Table"):
        properties = _properties(template, logical_id)
        database, table_input = properties["DatabaseName"], properties["TableInput"]
        existing = {t["Name"] for t in glue.get_tables(DatabaseName=database)["TableList"]}
        if table_input["Name"] not in existing:
            glue.create_table(DatabaseName=database, TableInput=table_input)


def _create_bucket(s3: Any, name: str, properties: dict[str, Any]) -> None:
    s3.create_bucket(Bucket=name)
    if properties.get("VersioningConfiguration", {}).get("Status") == "Enabled":
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    if "PublicAccessBlockConfiguration" in properties:
        s3.put_public_access_block(
            Bucket=name,
            PublicAccessBlockConfiguration=properties["PublicAccessBlockConfiguration"],
        )
    if "BucketEncryption" in properties:
        # CloudFormation's property names differ from the API's here.
        rules = [
            {
                "ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                **(
                    {"BucketKeyEnabled": rule["BucketKeyEnabled"]}
                    if "BucketKeyEnabled" in rule
                    else {}
                ),
            }
            for rule in properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
            if "ServerSideEncryptionByDefault" in rule
        ]
        if rules:
            s3.put_bucket_encryption(
                Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules}
            )
    notifications = properties.get("NotificationConfiguration", {})
    if (
        str(
            notifications.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled", "false")
        ).lower()
        == "true"
    ):
        s3.put_bucket_notification_configuration(
            Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
        )
