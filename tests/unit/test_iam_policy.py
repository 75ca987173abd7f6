"""The local stack's IAM evaluator against AWS's documented evaluation logic (IAM User
Guide: "Policy evaluation logic", "IAM JSON policy elements": Action, NotAction, Resource,
NotResource, Condition, condition operators and set operators)."""

from __future__ import annotations

from typing import Any

import pytest

from fleetcast.embedded.iam.policy import (
    Decision,
    Request,
    action_matches,
    allows_everything,
    evaluate,
    resource_matches,
)

BUCKET = "arn:aws:s3:::artifacts"
TABLE = "arn:aws:dynamodb:us-east-1:123456789012:table/registry"


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def deny(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Deny", "Action": action, "Resource": resource, **extra}


def decide(documents: list[dict[str, Any]], action: str, resource: str, **context: Any) -> Decision:
    return evaluate(documents, Request(action, resource, context)).decision


# -- the decision ---------------------------------------------------------------------------


def test_nothing_allows_is_an_implicit_deny() -> None:
    assert decide([], "s3:GetObject", f"{BUCKET}/a") is Decision.IMPLICIT_DENY
    assert decide([policy(allow("s3:PutObject"))], "s3:GetObject", f"{BUCKET}/a") is (
        Decision.IMPLICIT_DENY
    )


def test_an_allow_allows() -> None:
    assert decide([policy(allow("s3:GetObject"))], "s3:GetObject", f"{BUCKET}/a") is Decision.ALLOW


def test_an_explicit_deny_beats_an_allow_in_any_policy_and_any_order() -> None:
    # Given an Allow and a Deny of the same action, in one policy or in two
    together = [policy(allow("s3:*"), deny("s3:GetObject", f"{BUCKET}/secret/*"))]
    apart = [policy(deny("s3:GetObject", f"{BUCKET}/secret/*")), policy(allow("s3:*"))]
    for documents in (together, apart):
        # Then the deny decides where it applies, and the allow elsewhere
        assert decide(documents, "s3:GetObject", f"{BUCKET}/secret/x") is Decision.EXPLICIT_DENY
        assert decide(documents, "s3:GetObject", f"{BUCKET}/public/x") is Decision.ALLOW


def test_a_single_statement_not_in_a_list_counts() -> None:
    document = {"Version": "2012-10-17", "Statement": allow("sqs:SendMessage")}
    assert decide([document], "sqs:SendMessage", "arn:aws:sqs:us-east-1:1:q") is Decision.ALLOW


# -- Action and NotAction -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "action", "matches"),
    [
        ("s3:GetObject", "s3:GetObject", True),
        ("s3:getobject", "S3:GetObject", True),  # actions are not case sensitive
        ("s3:Get*", "s3:GetObjectVersion", True),
        ("s3:Get*", "s3:PutObject", False),
        ("*", "dynamodb:GetItem", True),
        ("dynamodb:?etItem", "dynamodb:GetItem", True),
        ("dynamodb:?etItem", "dynamodb:BatchGetItem", False),
        ("sagemaker:Describe*Job", "sagemaker:DescribeTrainingJob", True),
    ],
)
def test_action_wildcards(pattern: str, action: str, matches: bool) -> None:
    assert action_matches(pattern, action) is matches


def test_not_action_allows_every_other_action() -> None:
    documents = [policy({"Effect": "Allow", "NotAction": "iam:*", "Resource": "*"})]
    assert decide(documents, "s3:GetObject", f"{BUCKET}/a") is Decision.ALLOW
    assert decide(documents, "iam:PassRole", "arn:aws:iam::1:role/r") is Decision.IMPLICIT_DENY


def test_not_action_in_a_deny_denies_every_other_action() -> None:
    documents = [policy(allow("*"), {"Effect": "Deny", "NotAction": "s3:Get*", "Resource": "*"})]
    assert decide(documents, "s3:GetObject", f"{BUCKET}/a") is Decision.ALLOW
    assert decide(documents, "s3:PutObject", f"{BUCKET}/a") is Decision.EXPLICIT_DENY


# -- Resource and NotResource --------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "resource", "matches"),
    [
        ("*", "arn:aws:s3:::anything/at/all", True),
        (f"{BUCKET}/models/*", f"{BUCKET}/models/r1/7.tar.gz", True),
        (f"{BUCKET}/models/*", f"{BUCKET}/history/shard", False),
        (f"{BUCKET}/models/*/manifest-*", f"{BUCKET}/models/r1/manifest-algo-1.json", True),
        # The register-models finding: the summaries are not manifests.
        (f"{BUCKET}/models/*/manifest-*", f"{BUCKET}/models/r1/pages/algo-1-summary.json", False),
        (BUCKET, f"{BUCKET}/key", False),  # a bucket's ARN is not its objects'
        (f"{BUCKET}/Models/*", f"{BUCKET}/models/x", False),  # resources are case sensitive
        (
            "arn:aws:sqs:us-east-1:123456789012:queue-?",
            "arn:aws:sqs:us-east-1:123456789012:queue-1",
            True,
        ),
        # A wildcard inside a segment stops at a colon; one that ends a segment does not.
        (
            "arn:aws:lambda:us-east-1:1:function:f*x",
            "arn:aws:lambda:us-east-1:1:function:f:1x",
            False,
        ),
        (
            "arn:aws:lambda:us-east-1:1:function:f*",
            "arn:aws:lambda:us-east-1:1:function:f:alias",
            True,
        ),
        (
            "arn:aws:sagemaker:*:*:training-job/*",
            "arn:aws:sagemaker:eu-west-1:9:training-job/t",
            True,
        ),
    ],
)
def test_resource_wildcards(pattern: str, resource: str, matches: bool) -> None:
    assert resource_matches(pattern, resource) is matches


def test_resource_lists_are_any_of() -> None:
    documents = [policy(allow("s3:GetObject", [f"{BUCKET}/runs/*", f"{BUCKET}/models/*"]))]
    assert decide(documents, "s3:GetObject", f"{BUCKET}/models/x") is Decision.ALLOW
    assert decide(documents, "s3:GetObject", f"{BUCKET}/history/x") is Decision.IMPLICIT_DENY


def test_not_resource() -> None:
    documents = [
        policy({"Effect": "Allow", "Action": "s3:*", "NotResource": f"{BUCKET}/private/*"})
    ]
    assert decide(documents, "s3:GetObject", f"{BUCKET}/public/a") is Decision.ALLOW
    assert decide(documents, "s3:GetObject", f"{BUCKET}/private/a") is Decision.IMPLICIT_DENY


# -- conditions ---------------------------------------------------------------------------

LIST_MODELS = allow(
    "s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": ["models/*", "runs/*"]}}
)


def test_a_met_condition_lets_the_allow_apply() -> None:
    assert decide(
        [policy(LIST_MODELS)], "s3:ListBucket", BUCKET, **{"s3:prefix": "models/r1/"}
    ) is (Decision.ALLOW)


def test_an_unmet_condition_makes_an_allow_not_apply_rather_than_deny() -> None:
    # moto 5.2.5 returns an explicit deny here; IAM only ignores the statement, so another
    # statement may still allow the request.
    documents = [policy(LIST_MODELS)]
    assert decide(documents, "s3:ListBucket", BUCKET, **{"s3:prefix": "history/"}) is (
        Decision.IMPLICIT_DENY
    )
    documents = [policy(LIST_MODELS, allow("s3:ListBucket", BUCKET))]
    assert decide(documents, "s3:ListBucket", BUCKET, **{"s3:prefix": "history/"}) is Decision.ALLOW


def test_an_unmet_condition_makes_a_deny_not_apply() -> None:
    documents = [
        policy(
            allow("s3:*"),
            deny("s3:*", Condition={"Bool": {"aws:SecureTransport": "false"}}),
        )
    ]
    assert decide(documents, "s3:GetObject", f"{BUCKET}/a", **{"aws:SecureTransport": "true"}) is (
        Decision.ALLOW
    )
    assert decide(documents, "s3:GetObject", f"{BUCKET}/a", **{"aws:SecureTransport": "false"}) is (
        Decision.EXPLICIT_DENY
    )


def test_an_absent_key_fails_a_positive_operator() -> None:
    assert decide([policy(LIST_MODELS)], "s3:ListBucket", BUCKET) is Decision.IMPLICIT_DENY


def test_an_absent_key_satisfies_a_negated_operator_and_if_exists() -> None:
    negated = allow(
        "s3:ListBucket", BUCKET, Condition={"StringNotLike": {"s3:prefix": "private/*"}}
    )
    if_exists = allow(
        "s3:ListBucket", BUCKET, Condition={"StringLikeIfExists": {"s3:prefix": "x/*"}}
    )
    for statement in (negated, if_exists):
        assert decide([policy(statement)], "s3:ListBucket", BUCKET) is Decision.ALLOW
    assert decide([policy(if_exists)], "s3:ListBucket", BUCKET, **{"s3:prefix": "y/"}) is (
        Decision.IMPLICIT_DENY
    )


def test_keys_are_and_values_are_or_and_operators_are_and() -> None:
    statement = allow(
        "iam:PassRole",
        Condition={
            "StringEquals": {
                "iam:PassedToService": ["sagemaker.amazonaws.com", "lambda.amazonaws.com"],
                "aws:RequestedRegion": "us-east-1",
            },
            "StringLike": {"aws:PrincipalTag/team": "ml-*"},
        },
    )
    good = {
        "iam:PassedToService": "lambda.amazonaws.com",
        "aws:RequestedRegion": "us-east-1",
        "aws:PrincipalTag/team": "ml-ops",
    }
    assert decide([policy(statement)], "iam:PassRole", "r", **good) is Decision.ALLOW
    for key, wrong in (
        ("iam:PassedToService", "ec2.amazonaws.com"),
        ("aws:RequestedRegion", "eu-west-1"),
        ("aws:PrincipalTag/team", "web"),
    ):
        assert decide([policy(statement)], "iam:PassRole", "r", **{**good, key: wrong}) is (
            Decision.IMPLICIT_DENY
        )


def test_condition_key_names_are_not_case_sensitive_but_string_values_are() -> None:
    statement = allow(
        "iam:PassRole",
        Condition={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
    )
    assert (
        decide(
            [policy(statement)],
            "iam:PassRole",
            "r",
            **{"IAM:passedtoservice": "sagemaker.amazonaws.com"},
        )
        is Decision.ALLOW
    )
    assert (
        decide(
            [policy(statement)],
            "iam:PassRole",
            "r",
            **{"iam:PassedToService": "SageMaker.amazonaws.com"},
        )
        is Decision.IMPLICIT_DENY
    )
    ignoring = allow(
        "iam:PassRole",
        Condition={"StringEqualsIgnoreCase": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
    )
    assert (
        decide(
            [policy(ignoring)],
            "iam:PassRole",
            "r",
            **{"iam:PassedToService": "SageMaker.amazonaws.com"},
        )
        is Decision.ALLOW
    )


RUN_RECORDS = allow(
    "dynamodb:UpdateItem",
    TABLE,
    Condition={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["RUN#*"]}},
)


def test_for_all_values_needs_every_value_to_match() -> None:
    assert (
        decide(
            [policy(RUN_RECORDS)],
            "dynamodb:UpdateItem",
            TABLE,
            **{"dynamodb:LeadingKeys": ["RUN#r1"]},
        )
        is Decision.ALLOW
    )
    assert (
        decide(
            [policy(RUN_RECORDS)],
            "dynamodb:UpdateItem",
            TABLE,
            **{"dynamodb:LeadingKeys": ["RUN#r1", "42"]},
        )
        is Decision.IMPLICIT_DENY
    )


def test_for_all_values_holds_for_an_absent_key_and_for_any_value_does_not() -> None:
    # IAM User Guide, "Single-valued vs. multivalued context keys": ForAllValues returns
    # true when the key is absent (a Scan has no leading keys).
    assert decide([policy(RUN_RECORDS)], "dynamodb:UpdateItem", TABLE) is Decision.ALLOW
    any_value = allow(
        "ses:SendRawEmail",
        Condition={"ForAnyValue:StringEquals": {"ses:Recipients": "ops@example.com"}},
    )
    assert decide([policy(any_value)], "ses:SendRawEmail", "i") is Decision.IMPLICIT_DENY
    assert (
        decide(
            [policy(any_value)],
            "ses:SendRawEmail",
            "i",
            **{"ses:Recipients": ["a@b.c", "ops@example.com"]},
        )
        is Decision.ALLOW
    )


def test_null_checks_whether_a_key_is_present() -> None:
    absent = allow("s3:ListBucket", Condition={"Null": {"s3:prefix": "true"}})
    present = allow("s3:ListBucket", Condition={"Null": {"s3:prefix": "false"}})
    assert decide([policy(absent)], "s3:ListBucket", BUCKET) is Decision.ALLOW
    assert decide([policy(present)], "s3:ListBucket", BUCKET) is Decision.IMPLICIT_DENY
    assert (
        decide([policy(present)], "s3:ListBucket", BUCKET, **{"s3:prefix": "a"}) is Decision.ALLOW
    )


def test_arn_like_numeric_date_and_bool() -> None:
    arn = allow(
        "sns:Publish",
        Condition={"ArnLike": {"aws:SourceArn": "arn:aws:events:*:123456789012:rule/fleetcast-*"}},
    )
    assert (
        decide(
            [policy(arn)],
            "sns:Publish",
            "t",
            **{"aws:SourceArn": "arn:aws:events:us-east-1:123456789012:rule/fleetcast-x"},
        )
        is Decision.ALLOW
    )
    assert (
        decide(
            [policy(arn)],
            "sns:Publish",
            "t",
            **{"aws:SourceArn": "arn:aws:events:us-east-1:999999999999:rule/fleetcast-x"},
        )
        is Decision.IMPLICIT_DENY
    )
    keys = allow("s3:ListBucket", Condition={"NumericLessThanEquals": {"s3:max-keys": "10"}})
    assert (
        decide([policy(keys)], "s3:ListBucket", BUCKET, **{"s3:max-keys": "10"}) is Decision.ALLOW
    )
    assert (
        decide([policy(keys)], "s3:ListBucket", BUCKET, **{"s3:max-keys": "1000"})
        is Decision.IMPLICIT_DENY
    )
    before = allow(
        "s3:GetObject", Condition={"DateLessThan": {"aws:CurrentTime": "2030-01-01T00:00:00Z"}}
    )
    assert (
        decide([policy(before)], "s3:GetObject", "o", **{"aws:CurrentTime": "2029-12-31T23:59:59Z"})
        is Decision.ALLOW
    )
    assert (
        decide([policy(before)], "s3:GetObject", "o", **{"aws:CurrentTime": "2030-01-02T00:00:00Z"})
        is Decision.IMPLICIT_DENY
    )
    secure = allow("s3:GetObject", Condition={"Bool": {"aws:SecureTransport": "true"}})
    assert (
        decide([policy(secure)], "s3:GetObject", "o", **{"aws:SecureTransport": "TRUE"})
        is Decision.ALLOW
    )
    assert (
        decide([policy(secure)], "s3:GetObject", "o", **{"aws:SecureTransport": "false"})
        is Decision.IMPLICIT_DENY
    )


def test_an_operator_iam_does_not_have_is_refused_rather_than_guessed() -> None:
    statement = allow("s3:GetObject", Condition={"StringSortOf": {"s3:prefix": "a"}})
    with pytest.raises(ValueError, match="StringSortOf"):
        decide([policy(statement)], "s3:GetObject", "o", **{"s3:prefix": "a"})


def test_administrator_access_is_recognised_and_a_deny_or_condition_spoils_it() -> None:
    assert allows_everything([policy(allow("*"))])
    assert not allows_everything([policy(allow("*"), deny("iam:*"))])
    assert not allows_everything(
        [policy(allow("*", Condition={"Bool": {"aws:MultiFactorAuthPresent": "true"}}))]
    )
    assert not allows_everything([policy(allow("s3:*"))])
