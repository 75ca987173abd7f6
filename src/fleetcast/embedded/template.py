"""template.yaml as the local stack's single source of wiring.

Loads the SAM template (CloudFormation short tags included) and resolves the intrinsic
functions the template uses, with local physical names standing in for the ones
CloudFormation would generate.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetcast_contracts.files import write_whole

ACCOUNT_ID = "123456789012"
REGION = "us-east-1"

# The intrinsic functions CloudFormation has (the short tags' long forms).
INTRINSIC_FUNCTIONS = frozenset(
    {"Ref", "Condition"}
    | {
        f"Fn::{name}"
        for name in [
            "And",
            "Base64",
            "Cidr",
            "Equals",
            "FindInMap",
            "GetAZs",
            "GetAtt",
            "If",
            "ImportValue",
            "Join",
            "Length",
            "Not",
            "Or",
            "Select",
            "Split",
            "Sub",
            "ToJsonString",
            "Transform",
        ]
    }
)


def loads_template(text: str, source: str = "template") -> dict[str, Any]:
    """A CloudFormation/SAM template as plain data, read by cfn-lint's decoder: short tags
    in their long form (``!Ref X`` -> ``{"Ref": "X"}``, ``!GetAtt A.B`` ->
    ``{"Fn::GetAtt": ["A", "B"]}``). The one reader of template.yaml, for the local stack
    and the tests alike."""
    # Imported here: cfn-lint loads all its rules on import (seconds of CPU), and every
    # function worker the stack spawns imports this module but never reads a template.
    from cfnlint.decode import decode_str

    decoded, problems = decode_str(text)
    if problems:
        raise ValueError(f"{source}: {'; '.join(str(problem) for problem in problems)}")
    if not isinstance(decoded, dict):
        raise ValueError(f"{source}: a template is a mapping at the top level")
    plain: dict[str, Any] = _plain(decoded, source)
    return plain


def load_template(path: Path, cache: Path | None = None) -> dict[str, Any]:
    """:func:`loads_template` of the file, kept as JSON in ``cache`` (by default the user's
    cache folder) under a digest of its text and of cfn-lint's version: importing cfn-lint
    costs about 6 s of CPU, and every local stack and CLI start reads the same template.
    A change to the template, or another cfn-lint, reads it again."""
    text = path.read_text()
    folder = cache if cache is not None else cache_folder()
    digest = hashlib.sha256(
        f"{importlib.metadata.version('cfn-lint')}\n{text}".encode()
    ).hexdigest()
    kept = folder / f"template-{digest}.json"
    with contextlib.suppress(OSError, ValueError):
        body: dict[str, Any] = json.loads(kept.read_text())
        return body
    body = loads_template(text, str(path))
    # (A folder that cannot be written, or a value JSON cannot hold: not kept)
    with contextlib.suppress(OSError, TypeError, ValueError):
        write_whole(kept, json.dumps(body), shared=True)
    return body


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "fleetcast"


def _plain(value: Any, source: str) -> Any:
    """cfn-lint's nodes (which carry line marks) as plain dicts, lists and scalars; a tag
    CloudFormation does not have is refused, not read as a function."""
    if isinstance(value, dict):
        for key in value:
            if str(key).startswith("Fn::") and key not in INTRINSIC_FUNCTIONS:
                raise ValueError(f"{source}: unknown CloudFormation tag !{key[4:]}")
        return {str(key): _plain(item, source) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, source) for item in value]
    if isinstance(value, str):
        return str(value)
    return value


def _physical_name(stack: str, logical_id: str, resource_type: str) -> str:
    if resource_type == "AWS::S3::Bucket":
        # Bucket names are global and lower case; CloudFormation adds a random suffix.
        return re.sub(r"[^a-z0-9-]", "-", f"{stack}-{logical_id}".lower())[:63]
    return f"{stack}-{logical_id}"[:64]


_NAME_PROPERTIES = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::IAM::Role": "RoleName",
    "AWS::Serverless::Function": "FunctionName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SageMaker::Model": "ModelName",
    "AWS::SageMaker::EndpointConfig": "EndpointConfigName",
    "AWS::SageMaker::Endpoint": "EndpointName",
    "AWS::Serverless::Api": "Name",
    "AWS::Events::Rule": "Name",
    "AWS::CloudWatch::Alarm": "AlarmName",
}
# Glue keeps a database's or table's name inside its input structure.
_NESTED_NAME_PROPERTIES = {
    "AWS::Glue::Database": "DatabaseInput",
    "AWS::Glue::Table": "TableInput",
}
# Ref gives these resources' ARN, not their name; their names come from Fn::GetAtt.
_REF_IS_ARN = {
    "AWS::SageMaker::Model",
    "AWS::SageMaker::EndpointConfig",
    "AWS::SageMaker::Endpoint",
}
_NAME_ATTRIBUTES = {
    "Name",
    "QueueName",
    "TopicName",
    "ModelName",
    "EndpointConfigName",
    "EndpointName",
}


@dataclass
class LocalTemplate:
    """A resolved view of template.yaml for one local stack."""

    path: Path
    stack_name: str = "fleetcast"
    parameter_overrides: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.body = load_template(self.path)

    @functools.cached_property
    def resources(self) -> dict[str, dict[str, Any]]:
        """The resources this stack has: as CloudFormation, those whose ``Condition`` is
        false for the parameters are not created (the endpoint without an image)."""
        declared: dict[str, dict[str, Any]] = self.body.get("Resources", {})
        return {
            logical_id: resource
            for logical_id, resource in declared.items()
            if "Condition" not in resource or self.condition(str(resource["Condition"]))
        }

    def resources_of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v.get("Type") == resource_type}

    @property
    def parameters(self) -> dict[str, str]:
        values = {
            name: str(spec["Default"])
            for name, spec in self.body.get("Parameters", {}).items()
            if "Default" in spec
        }
        values.update(self.parameter_overrides)
        return values

    def physical_name(self, logical_id: str) -> str:
        """The name the template gives the resource, else one like CloudFormation's."""
        resource = self.resources[logical_id]
        explicit = _NAME_PROPERTIES.get(resource["Type"])
        if explicit and explicit in resource.get("Properties", {}):
            return str(self.resolve(resource["Properties"][explicit]))
        nested = _NESTED_NAME_PROPERTIES.get(resource["Type"])
        if nested and "Name" in resource.get("Properties", {}).get(nested, {}):
            return str(self.resolve(resource["Properties"][nested]["Name"]))
        return _physical_name(self.stack_name, logical_id, resource["Type"])

    def arn(self, logical_id: str) -> str:
        kind = self.resources[logical_id]["Type"]
        name = self.physical_name(logical_id)
        formats = {
            "AWS::S3::Bucket": f"arn:aws:s3:::{name}",
            "AWS::DynamoDB::Table": f"arn:aws:dynamodb:{REGION}:{ACCOUNT_ID}:table/{name}",
            "AWS::IAM::Role": f"arn:aws:iam::{ACCOUNT_ID}:role/{name}",
            "AWS::SQS::Queue": f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}",
            "AWS::Serverless::Function": f"arn:aws:lambda:{REGION}:{ACCOUNT_ID}:function:{name}",
            "AWS::SNS::Topic": f"arn:aws:sns:{REGION}:{ACCOUNT_ID}:{name}",
            "AWS::Events::Rule": f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{name}",
            "AWS::CloudWatch::Alarm": f"arn:aws:cloudwatch:{REGION}:{ACCOUNT_ID}:alarm:{name}",
            # SageMaker lower-cases the names in its ARNs.
            "AWS::SageMaker::Model": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:model/{name.lower()}",
            "AWS::SageMaker::EndpointConfig": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:endpoint-config/{name.lower()}",
            "AWS::SageMaker::Endpoint": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:endpoint/{name.lower()}",
        }
        return formats.get(kind, f"arn:aws:local:{REGION}:{ACCOUNT_ID}:{logical_id}/{name}")

    def ref(self, name: str) -> str:
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT_ID,
            "AWS::StackName": self.stack_name,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::NoValue": "",
        }
        if name in pseudo:
            return pseudo[name]
        if name in self.parameters:
            return self.parameters[name]
        if name in self.resources:
            if self.resources[name]["Type"] == "AWS::SQS::Queue":
                return f"http://local/{ACCOUNT_ID}/{self.physical_name(name)}"
            if self.resources[name]["Type"] in _REF_IS_ARN:
                return self.arn(name)
            return self.physical_name(name)
        raise KeyError(f"template.yaml refers to unknown name {name!r}")

    def get_att(self, logical_id: str, attribute: str) -> str:
        if attribute == "Arn":
            return self.arn(logical_id)
        if attribute in _NAME_ATTRIBUTES:
            return self.physical_name(logical_id)
        raise KeyError(f"local stack cannot resolve {logical_id}.{attribute}")

    def condition(self, name: str) -> bool:
        return bool(self.resolve(self.body.get("Conditions", {})[name]))

    def resolve(self, value: Any) -> Any:
        """Resolve intrinsic functions in ``value`` (recursively)."""
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self.ref(argument)
            if key == "Fn::GetAtt":
                return self.get_att(*argument)
            if key == "Fn::Sub":
                return self._sub(argument)
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(str(self.resolve(i)) for i in items)
            if key == "Fn::If":
                name, when_true, when_false = argument
                return self.resolve(when_true if self.condition(name) else when_false)
            if key == "Fn::Equals":
                left, right = (self.resolve(a) for a in argument)
                return str(left) == str(right)
            if key == "Fn::Not":
                return not self.resolve(argument[0])
            if key == "Fn::And":
                return all(self.resolve(a) for a in argument)
            if key == "Fn::Or":
                return any(self.resolve(a) for a in argument)
            if key == "Condition":
                return self.condition(argument)
            if key == "Fn::Select":
                index, items = argument
                return self.resolve(items)[int(self.resolve(index))]
            if key == "Fn::Split":
                separator, text = argument
                return str(self.resolve(text)).split(separator)
        return {k: self.resolve(v) for k, v in value.items()}

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        resolved = {k: str(self.resolve(v)) for k, v in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # ${!Literal}: CloudFormation's escape
            if name in resolved:
                return resolved[name]
            if "." in name:
                logical_id, attribute = name.split(".", 1)
                return self.get_att(logical_id, attribute)
            return self.ref(name)

        return re.sub(r"\$\{([^}]+)\}", replace, text)

    def function_environment(self, logical_id: str) -> dict[str, str]:
        """Globals' environment variables overlaid with the function's own, resolved."""
        global_env = self.body.get("Globals", {}).get("Function", {}).get("Environment", {})
        own_env = self.resources[logical_id]["Properties"].get("Environment", {})
        merged = {**global_env.get("Variables", {}), **own_env.get("Variables", {})}
        return {k: str(self.resolve(v)) for k, v in merged.items()}
