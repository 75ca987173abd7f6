"""Every grant of template.yaml, as SAM translates it, against AWS's own tables
(policy-sentry's copy of the Service Authorization Reference): each action exists, each
resource ARN has the shape of one of the action's resource types, each condition key is
one the action (or every action: ``aws:*``) supports. A typo in an action or a key would
otherwise only show as an AccessDenied after a deploy."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import regex
from policy_sentry.querying.actions import get_action_data

from fleetcast.embedded.iam.roles import template_roles
from fleetcast.embedded.template import LocalTemplate

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PARAMETERS = {
    "CostReportSender": "cost-watch@example.com",
    "CostReportRecipients": "ops@example.com",
}


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _arn_pattern(arn_format: str) -> re.Pattern[str]:
    pieces = re.split(r"(\$\{[^}]+\})", arn_format)
    return re.compile("".join(".*" if p.startswith("${") else re.escape(p) for p in pieces))


def _may_name(resource: str, arn_format: str) -> bool:
    """Whether a policy's resource can name an ARN of this format: a concrete ARN must be
    one; a pattern's literal start (before its first wildcard) must begin one."""
    pattern = _arn_pattern(arn_format).pattern
    literal = re.split(r"[*?]", resource, maxsplit=1)[0]
    if literal == resource:
        return regex.fullmatch(pattern, resource) is not None
    return regex.fullmatch(pattern, literal, partial=True) is not None


def _statements() -> list[tuple[str, dict[str, Any]]]:
    template = LocalTemplate(ROOT / "template.yaml", parameter_overrides=PARAMETERS)
    roles = template_roles(template, cache=None)
    return [
        (f"{role.logical_id}/{name}", statement)
        for role in roles.roles.values()
        for name, document in role.inline_policies.items()
        for statement in _listed(document["Statement"])
    ]


def test_every_role_of_the_translation_is_there() -> None:
    template = LocalTemplate(ROOT / "template.yaml", parameter_overrides=PARAMETERS)
    roles = template_roles(template)
    functions = template.resources_of_type("AWS::Serverless::Function")
    assert set(roles.function_roles) == set(functions)
    assert {"SageMakerExecutionRole", "InferenceExecutionRole"} <= set(roles.roles)
    for function in functions:
        role = roles.of_function(function)
        # SAM's additions: logs, X-Ray (Tracing: Active) and the dead-letter queue.
        assert set(role.managed_policy_arns) == {
            "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",
            "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",
        }
        assert "DeadLetterQueuePolicy" in role.inline_policies
        assert len(role.documents()) == len(role.inline_policies) + 2


def test_every_grant_is_an_action_resource_and_condition_aws_has() -> None:
    problems = []
    for where, statement in _statements():
        for action in _listed(statement["Action"]):
            prefix, name = action.split(":")
            rows = get_action_data(prefix, name).get(prefix, [])
            if not rows:
                problems.append(f"{where}: {action} is no IAM action")
                continue
            formats = [row["resource_arn_format"] for row in rows]
            for resource in _listed(statement["Resource"]):
                if resource == "*":
                    if "*" not in formats:
                        problems.append(f"{where}: {action} on * though it takes {formats}")
                elif not any(f != "*" and _may_name(resource, f) for f in formats):
                    problems.append(f"{where}: {resource} is none of {action}'s {formats}")
            keys = {key.lower() for row in rows for key in row["condition_keys"]}
            for operator in statement.get("Condition", {}).values():
                for key in operator:
                    if not key.lower().startswith("aws:") and key.lower() not in keys:
                        problems.append(f"{where}: {action} has no condition key {key}")
    assert problems == []
