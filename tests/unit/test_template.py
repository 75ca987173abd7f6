"""template.yaml's contract: the wiring handlers, the local stack and AWS all rely on.

Sample events come from events/*.json, the template from template.yaml: neither is
restated here, so a drift in either makes a test fail.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import tomllib
from collections.abc import Iterator
from typing import Any, get_args

import pytest
from aws_lambda_powertools.utilities.parser.models import (
    APIGatewayProxyEventModel,
    EventBridgeModel,
    S3EventNotificationEventBridgeModel,
)
from pydantic import BaseModel, ValidationError
from template_helpers import REPO_ROOT, loads_template, local_template

from fleetcast import images
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast_common import chunk_queue
from fleetcast_common.forecasting import ForecastApiSettings
from fleetcast_common.jobs import training_job_request
from fleetcast_common.pipeline import STAGING_CONCURRENCY, STAGING_PART_BYTES
from fleetcast_common.sagemaker_events import (
    ProcessingJobEnded,
    ProcessingJobStateChange,
    TrainingJobStateChange,
)
from fleetcast_common.settings import (
    ProcessingSettings,
    RegistrationCoordinatorSettings,
    RegistrationSettings,
    TrainingSettings,
)
from fleetcast_common.upload_queue import UNSTARTED_LEASE_GRACE
from fleetcast_contracts import layout
from fleetcast_contracts.families import DEFAULT_CANDIDATES, PROPHET, default_candidates
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.ids import is_valid_run_id
from fleetcast_contracts.stages import PIPELINE, PROCESSING, TRAINING
from fleetcast_contracts.training import CANDIDATES_PATTERN, HYPERPARAMETER_DEFAULTS
from fleetcast_cost import state as cost_state
from fleetcast_cost.models import Anomaly
from fleetcast_cost.settings import CostReportSettings
from fleetcast_forecasters.families import known_kinds
from fleetcast_training.hyperparameters import CANDIDATES, Hyperparameters

# The template as the local stack reads and resolves it (parameters' defaults, the
# stack named for JobNamePrefix's default, the local account and region).
# What a deployment must give: the parameters have no default.
COST_ADDRESSES = {
    "CostReportRecipients": "ops@example.com, finops@example.com",
    "CostReportSender": "cost-watch@example.com",
}
# After `make images`: the images pushed, so the endpoint is part of the stack (the first
# deploy, without images, is tests/unit/test_first_deploy.py).
LOCAL = local_template({**COST_ADDRESSES, **LOCAL_IMAGE_PARAMETERS})
resolve = LOCAL.resolve
name_of = LOCAL.physical_name
TEMPLATE = LOCAL.body
RESOURCES: dict[str, dict[str, Any]] = TEMPLATE["Resources"]
PARAMETERS: dict[str, dict[str, Any]] = TEMPLATE["Parameters"]
GLOBALS: dict[str, Any] = TEMPLATE["Globals"]["Function"]

# Each pipeline function's EventBridge rules, by event name.
FUNCTION_EVENTS = {
    "StartProcessingFunction": ("UploadedCsv", "ProcessingEnded"),
    "StartTrainingFunction": ("ProcessingCompleted",),
    "RegisterModelsFunction": ("TrainingFinished",),
}
FUNCTION_RULES = [(f, e) for f, events in FUNCTION_EVENTS.items() for e in events]
FUNCTIONS = sorted(k for k, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function")
FUNCTION_SETTINGS: dict[str, type[BaseModel]] = {
    "StartProcessingFunction": ProcessingSettings,
    "StartTrainingFunction": TrainingSettings,
    "RegisterModelsFunction": RegistrationCoordinatorSettings,
    "RegisterChunkFunction": RegistrationSettings,
}
# Actions IAM cannot scope to a resource; the only statements allowed Resource "*".
UNSCOPABLE_ACTIONS = {"ecr:GetAuthorizationToken", "cloudwatch:PutMetricData"}
# Not in template.yaml but attached by the SAM transform to every function role, with
# Resource "*": AWSLambdaBasicExecutionRole (logs) and, for Tracing: Active,
# AWSXrayWriteOnlyAccess. Checked on the transformed template in
# tests/integration/test_template_tools.py.
RUN_ID = "q0000000909-20261129t120000"
PREFIX = "fleetcast"  # JobNamePrefix's default, which the samples are named for


# ---------------------------------------------------------------- helpers


def matches(pattern: dict[str, Any], event: dict[str, Any]) -> bool:
    """EventBridge pattern matching, for the subset our rules use: nested fields, exact
    values and ``prefix``. Any other operator fails the test rather than guess."""
    for field, expected in pattern.items():
        if field not in event:
            return False
        actual = event[field]
        if isinstance(expected, dict):
            if not isinstance(actual, dict) or not matches(expected, actual):
                return False
            continue
        candidates = actual if isinstance(actual, list) else [actual]
        if not any(_matches_value(m, c) for m in expected for c in candidates):
            return False
    return True


def _matches_value(matcher: Any, value: Any) -> bool:
    if isinstance(matcher, dict):
        ((operator, argument),) = matcher.items()
        if operator == "prefix":
            return isinstance(value, str) and value.startswith(argument)
        raise NotImplementedError(f"pattern operator {operator!r}: teach matches() first")
    return bool(matcher == value)


def event_rules() -> dict[tuple[str, str], dict[str, Any]]:
    """Every EventBridgeRule event in the template, by (function, event name), with Refs
    resolved."""
    rules = {}
    for logical_id, resource in RESOURCES.items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for name, event in resource["Properties"].get("Events", {}).items():
            if event["Type"] == "EventBridgeRule":
                rules[logical_id, name] = resolve(event["Properties"]["Pattern"])
    return rules


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((REPO_ROOT / "events" / name).read_text())
    return loaded


def with_value(event: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(event)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


def statements(policies: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for policy in policies:
        document = policy.get("PolicyDocument", policy)
        yield from document["Statement"]


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def function_statements(logical_id: str) -> list[dict[str, Any]]:
    return list(statements(RESOURCES[logical_id]["Properties"]["Policies"]))


def role_statements() -> list[dict[str, Any]]:
    return list(statements(RESOURCES["SageMakerExecutionRole"]["Properties"]["Policies"]))


_OBJECT_ARN = re.compile(r"^arn:\$\{AWS::Partition\}:s3:::\$\{(?P<bucket>\w+)\}/(?P<key>.+)$")


def s3_object_grants(granted: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    """(action, bucket logical id, key pattern) for every object-level S3 grant."""
    grants = set()
    for statement in granted:
        actions = [a for a in as_list(statement["Action"]) if a.startswith("s3:")]
        for resource in as_list(statement["Resource"]):
            if not (isinstance(resource, dict) and "Fn::Sub" in resource):
                continue
            arn = _OBJECT_ARN.match(resource["Fn::Sub"])
            if arn is None:
                continue
            for action in actions:
                grants.add((action, arn["bucket"], arn["key"]))
    return grants


def _own_variables(logical_id: str) -> dict[str, Any]:
    """The function's own environment variables (none when it reads only the globals)."""
    return RESOURCES[logical_id]["Properties"].get("Environment", {}).get("Variables", {})


def environment_for(logical_id: str, overrides: dict[str, str] | None = None) -> dict[str, str]:
    """A function's resolved environment, as Lambda would give it, with parameter values
    overridden by name."""
    values = {**LOCAL.parameters, **(overrides or {})}
    merged = {
        **GLOBALS["Environment"]["Variables"],
        **_own_variables(logical_id),
    }
    environment = {}
    for name, value in merged.items():
        if isinstance(value, dict) and value.keys() == {"Ref"} and value["Ref"] in values:
            environment[name] = values[value["Ref"]]
        else:
            environment[name] = str(resolve(value))
    return environment


# ---------------------------------------------------------------- events vs rules

EXPECTED_TARGETS = {
    "s3_object_created.json": {"StartProcessingFunction"},
    # Keys S3 allows that a URL-decoding or path-deriving reader would break.
    "s3_object_created_plus_key.json": {"StartProcessingFunction"},
    "s3_object_created_unusual_key.json": {"StartProcessingFunction"},
    "s3_object_created_longest_key.json": {"StartProcessingFunction"},
    # A processing job's end, however it ended, lets the next upload's job start.
    "processing_job_completed.json": {"StartTrainingFunction", "StartProcessingFunction"},
    "processing_job_failed.json": {"StartProcessingFunction"},
    "training_job_completed.json": {"RegisterModelsFunction"},
    "training_job_failed.json": {"RegisterModelsFunction"},
    "schedule.json": set(),
}
# API Gateway (REST proxy) samples: the function and the route (method, resource) they are for.
API_EVENTS = {
    "api_forecast.json": ("ForecastApiFunction", "GET", "/customers/{customer_id}/forecast"),
    "api_model.json": ("ForecastApiFunction", "GET", "/customers/{customer_id}/model"),
}


def test_every_sample_event_file_is_accounted_for() -> None:
    assert {p.name for p in (REPO_ROOT / "events").glob("*.json")} == set(EXPECTED_TARGETS) | set(
        API_EVENTS
    )
    assert set(event_rules()) == set(FUNCTION_RULES)


@pytest.mark.parametrize(
    ("name", "targets"), sorted(EXPECTED_TARGETS.items()), ids=sorted(EXPECTED_TARGETS)
)
def test_each_sample_event_reaches_exactly_the_functions_it_is_for(
    name: str, targets: set[str]
) -> None:
    # Given the sample and every EventBridge rule in the template
    event = sample(name)
    # When each rule's pattern is applied to it
    reached = {function for (function, _), p in event_rules().items() if matches(p, event)}
    # Then only the intended function is invoked
    assert reached == targets


COUNTER_EXAMPLES: list[tuple[str, str, tuple[str, ...], Any]] = [
    ("s3_object_created.json", "another bucket", ("detail", "bucket", "name"), "other-raw"),
    ("s3_object_created.json", "outside incoming/", ("detail", "object", "key"), "archive/a.csv"),
    ("s3_object_created.json", "incoming without /", ("detail", "object", "key"), "incoming.csv"),
    ("s3_object_created.json", "a deletion", ("detail-type",), "Object Deleted"),
    ("processing_job_completed.json", "in progress", ("detail", "ProcessingJobStatus"), "InProgress"),
    ("processing_job_completed.json", "another prefix", ("detail", "ProcessingJobName"), f"other-p-{RUN_ID}"),
    ("processing_job_completed.json", "a longer prefix", ("detail", "ProcessingJobName"), f"fleetcast-prod-p-{RUN_ID}"),
    ("processing_job_completed.json", "a training job name", ("detail", "ProcessingJobName"), f"fleetcast-t-{RUN_ID}"),
    ("training_job_completed.json", "in progress", ("detail", "TrainingJobStatus"), "InProgress"),
    ("training_job_completed.json", "another prefix", ("detail", "TrainingJobName"), f"other-t-{RUN_ID}"),
    ("training_job_completed.json", "a longer prefix", ("detail", "TrainingJobName"), f"fleetcast-prod-t-{RUN_ID}"),
    ("training_job_completed.json", "a processing job name", ("detail", "TrainingJobName"), f"fleetcast-p-{RUN_ID}"),
    ("training_job_completed.json", "another source", ("source",), "aws.events"),
]  # fmt: skip


def sagemaker_patterns() -> dict[str, dict[str, Any]]:
    """Every EventBridge pattern on SageMaker job events (the functions' rules and the
    failure rules), by rule, resolved."""
    patterns = {f"{f}.{e}": p for (f, e), p in event_rules().items()}
    for logical_id, resource in RESOURCES.items():
        if resource["Type"] == "AWS::Events::Rule":
            patterns[logical_id] = resolve(resource["Properties"]["EventPattern"])
    return {rule: p for rule, p in patterns.items() if p.get("source") == ["aws.sagemaker"]}


def test_every_sagemaker_rule_names_a_stage_as_the_pipeline_names_it() -> None:
    # Given the pipeline's stages, named once (fleetcast_contracts.stages)
    by_detail_type = {stage.detail_type: stage for stage in PIPELINE}
    matched = set()
    for rule, pattern in sagemaker_patterns().items():
        # Then each rule on SageMaker's events is on one stage's events, and ours only
        (detail_type,) = pattern["detail-type"]
        stage = by_detail_type.get(detail_type)
        assert stage is not None, f"{rule}: {detail_type!r} is no stage of PIPELINE"
        assert pattern["detail"][stage.name_field] == [{"prefix": stage.job_name_prefix(PREFIX)}]
        assert stage.status_field in pattern["detail"], rule
        matched.add(stage)
    # And every stage's end is seen by some rule (the next step starts from it)
    assert matched == set(PIPELINE)
    # And the events' models read the fields the stages name
    detail_type = ProcessingJobEnded.model_fields["detail_type"].annotation
    assert get_args(detail_type) == (PROCESSING.detail_type,)
    for stage, model in (
        (PROCESSING, ProcessingJobStateChange),
        (TRAINING, TrainingJobStateChange),
    ):
        fields = model.model_fields
        assert (fields["job_name"].alias, fields["status"].alias) == (
            stage.name_field,
            stage.status_field,
        )


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [(name, path, value) for name, _, path, value in COUNTER_EXAMPLES],
    ids=[f"{name.removesuffix('.json')}: {why}" for name, why, _, _ in COUNTER_EXAMPLES],
)
def test_rules_ignore_near_misses(name: str, path: tuple[str, ...], value: Any) -> None:
    # Given a sample that one rule matches, changed in one field
    original = sample(name)
    assert any(matches(p, original) for p in event_rules().values())
    # When that field no longer fits
    changed = with_value(original, path, value)
    # Then no rule matches
    assert not any(matches(p, changed) for p in event_rules().values())


def test_matcher_refuses_operators_it_does_not_know() -> None:
    with pytest.raises(NotImplementedError, match="suffix"):
        matches({"key": [{"suffix": ".csv"}]}, {"key": "a.csv"})


def test_sample_events_have_the_shapes_powertools_parses() -> None:
    s3_event = S3EventNotificationEventBridgeModel.model_validate(sample("s3_object_created.json"))
    assert s3_event.detail.object.key.startswith(layout.INCOMING_PREFIX)
    assert s3_event.detail.reason == "PutObject"
    for name in sorted(EXPECTED_TARGETS):
        EventBridgeModel.model_validate(sample(name))


def test_sample_names_agree_with_the_template_and_the_layout() -> None:
    raw_bucket, artifacts = name_of("RawBucket"), name_of("ArtifactsBucket")
    assert sample("s3_object_created.json")["detail"]["bucket"]["name"] == raw_bucket
    assert raw_bucket == "fleetcast-raw-123456789012"
    assert LOCAL.parameters["JobNamePrefix"] == PREFIX
    assert is_valid_run_id(RUN_ID)

    for name in ("processing_job_completed.json", "processing_job_failed.json"):
        event = sample(name)
        detail = event["detail"]
        job = PROCESSING.job_name(PREFIX, RUN_ID)
        assert detail["ProcessingJobName"] == job
        assert detail["ProcessingJobArn"].endswith(f":processing-job/{job}")
        assert event["resources"] == [detail["ProcessingJobArn"]]
        outputs = {
            o["OutputName"]: o["S3Output"]["S3Uri"]
            for o in detail["ProcessingOutputConfig"]["Outputs"]
        }
        assert outputs["train"] == f"s3://{artifacts}/{layout.train_prefix(RUN_ID)}"
        assert outputs["report"] == f"s3://{artifacts}/{layout.report_prefix(RUN_ID)}"
        # Processing events carry epoch milliseconds as numbers.
        assert all(isinstance(detail[t], int) for t in ("CreationTime", "LastModifiedTime"))

    for name in ("training_job_completed.json", "training_job_failed.json"):
        event = sample(name)
        detail = event["detail"]
        job = TRAINING.job_name(PREFIX, RUN_ID)
        assert detail["TrainingJobName"] == job
        assert event["resources"] == [detail["TrainingJobArn"]]
        assert all(isinstance(v, str) for v in detail["HyperParameters"].values())
        assert detail["HyperParameters"]["run_id"] == RUN_ID
        (channel,) = detail["InputDataConfig"]
        source = channel["DataSource"]["S3DataSource"]
        assert source["S3DataDistributionType"] == "ShardedByS3Key"
        assert source["S3Uri"] == f"s3://{artifacts}/{layout.train_prefix(RUN_ID)}"
        checkpoints = f"s3://{artifacts}/{layout.checkpoint_prefix(RUN_ID)}"
        assert detail["CheckpointConfig"]["S3Uri"] == checkpoints
        # Training events carry epoch milliseconds as strings.
        times = [detail["CreationTime"], detail["LastModifiedTime"]] + [
            t["StartTime"] for t in detail["SecondaryStatusTransitions"]
        ]
        assert all(isinstance(t, str) and t.isdigit() for t in times)

    failures = [
        sample(n)["detail"] for n in ("processing_job_failed.json", "training_job_failed.json")
    ]
    assert all(d["FailureReason"].startswith("AlgorithmError: ") for d in failures)


# ---------------------------------------------------------------- functions


def test_every_parameter_default_is_a_value_it_allows() -> None:
    defaults = {
        name: str(spec["Default"]) for name, spec in PARAMETERS.items() if "Default" in spec
    }
    assert {k: v for k, v in defaults.items() if not _valid_for(k, v)} == {}
    # Only the addresses have no default: a deployment names real ones.
    assert set(PARAMETERS) - set(defaults) == set(COST_ADDRESSES)
    # The same pattern as the start-training function's settings, checked at deploy time
    holiday_pattern = PARAMETERS["DefaultHolidayCountry"]["AllowedPattern"]
    assert all(re.fullmatch(holiday_pattern, code) for code in ("", "US", "DE", "GBR"))
    assert not any(re.fullmatch(holiday_pattern, code) for code in ("us", "Germany", "D"))


@pytest.mark.parametrize(
    ("value", "deploys"),
    [
        ("seasonal_naive,ets,theta,prophet", True),
        ("default", True),
        ("seasonal_median,prophet", True),
        ("prophet", True),
        ("ets,theta", True),
        ("theta,seasonal_naive", True),
        ("", False),
        ("ets, theta", False),
        ("Prophet", False),
        ("arima", False),
        ("ets,", False),
        ("default,ets", False),
    ],
)
def test_model_candidates_reach_the_training_job_as_its_candidates(
    value: str, deploys: bool
) -> None:
    # Given ModelCandidates, checked at deploy time by its pattern
    spec = PARAMETERS["ModelCandidates"]
    assert bool(re.fullmatch(spec["AllowedPattern"], value)) is deploys
    if not deploys:
        # Then the start-training function refuses what CloudFormation would
        with pytest.raises(ValidationError, match="MODEL_CANDIDATES"):
            TrainingSettings.from_env(
                environment_for("StartTrainingFunction", {"ModelCandidates": value})
            )
        return
    # When start-training builds the job from the environment the template gives it
    settings = TrainingSettings.from_env(
        environment_for("StartTrainingFunction", {"ModelCandidates": value})
    )
    request = training_job_request(settings, "q0000000909-20261129t120000", 3)
    # Then the job's candidates are the parameter's value, which the job accepts
    assert request["HyperParameters"]["candidates"] == value
    parsed = Hyperparameters.parse(request["HyperParameters"])
    listed = (
        default_candidates(Frequency.DAILY) if value == DEFAULT_CANDIDATES else value.split(",")
    )
    assert set(parsed.candidates) == set(listed)


def test_model_candidates_default_to_the_frequencys_families() -> None:
    spec = PARAMETERS["ModelCandidates"]
    assert spec["AllowedPattern"] == CANDIDATES_PATTERN
    assert spec["Default"] == HYPERPARAMETER_DEFAULTS["candidates"] == DEFAULT_CANDIDATES
    # Then a daily model's default is every family the job knows, an hourly one's every
    # family but Prophet (the catalogue's default_for)
    defaults = {
        frequency: Hyperparameters.parse(
            {"run_id": "q0000000909-20261129t120000", "frequency": frequency.value}
        ).candidates
        for frequency in Frequency
    }
    assert set(defaults[Frequency.DAILY]) == set(CANDIDATES)
    assert set(defaults[Frequency.HOURLY]) == set(CANDIDATES) - {PROPHET}
    # And every family the job may serve is one the endpoint can compile
    assert set(CANDIDATES) <= set(known_kinds())


def test_globals_trace_and_dead_letter_and_the_layer_is_built_for_their_runtime() -> None:
    assert GLOBALS["Tracing"] == "Active"
    assert GLOBALS["Layers"] == [{"Ref": "FleetcastCommonLayer"}]
    assert GLOBALS["DeadLetterQueue"] == {
        "Type": "SQS",
        "TargetArn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]},
    }
    layer = RESOURCES["FleetcastCommonLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Metadata"]["BuildMethod"] == GLOBALS["Runtime"]
    assert layer["Properties"]["CompatibleRuntimes"] == [GLOBALS["Runtime"]]
    assert (REPO_ROOT / layer["Properties"]["ContentUri"] / "fleetcast_common").is_dir()


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_has_its_code_and_no_variable_of_its_own_shadows_a_global(
    function: str,
) -> None:
    properties = RESOURCES[function]["Properties"]
    assert properties["Handler"] == "app.lambda_handler"
    assert (REPO_ROOT / properties["CodeUri"] / "app.py").is_file()
    assert (REPO_ROOT / properties["CodeUri"] / "requirements.txt").is_file()
    # A function's own variable silently wins over a global one of the same name.
    own = _own_variables(function)
    assert not set(own) & set(GLOBALS["Environment"]["Variables"])


@pytest.mark.parametrize("function", FUNCTIONS)
def test_each_function_keeps_its_logs_30_days(function: str) -> None:
    groups = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::Logs::LogGroup"
        and r["Properties"]["LogGroupName"] == {"Fn::Sub": f"/aws/lambda/${{{function}}}"}
    ]
    assert [g["RetentionInDays"] for g in groups] == [30]


@pytest.mark.parametrize("function", sorted(FUNCTION_SETTINGS))
def test_handler_settings_read_exactly_what_the_template_sets(function: str) -> None:
    # Given the function's settings model and the environment the template gives it
    fields = FUNCTION_SETTINGS[function].model_fields.values()
    read = {field.alias for field in fields}
    required = {field.alias for field in fields if field.is_required()}
    environment = environment_for(function)
    set_by_template = {name for name in environment if not name.startswith("POWERTOOLS_")}
    # Then every variable set is read, and every variable without a default is set
    assert set_by_template <= read, f"set but never read: {set_by_template - read}"
    assert required <= set_by_template, f"read but never set: {required - set_by_template}"
    FUNCTION_SETTINGS[function].model_validate(environment)


def _allowed_values(parameter: str) -> list[str]:
    spec = PARAMETERS[parameter]
    if "AllowedValues" in spec:
        return [str(v) for v in spec["AllowedValues"]]
    return [str(spec[k]) for k in ("MinValue", "MaxValue") if k in spec]


@pytest.mark.parametrize("function", sorted(FUNCTION_SETTINGS))
def test_every_value_a_parameter_allows_is_accepted_by_the_handler(function: str) -> None:
    variables = {**GLOBALS["Environment"]["Variables"], **_own_variables(function)}
    parameters = [
        v["Ref"] for v in variables.values() if isinstance(v, dict) and v.get("Ref") in PARAMETERS
    ]
    checked = 0
    for parameter in parameters:
        for value in _allowed_values(parameter):
            try:
                FUNCTION_SETTINGS[function].model_validate(
                    environment_for(function, {parameter: value})
                )
            except ValidationError as error:
                pytest.fail(f"{parameter}={value} deploys but the handler rejects it: {error}")
            checked += 1
    assert checked > 0


@pytest.mark.parametrize(("function", "name"), FUNCTION_RULES)
def test_each_rule_retries_then_dead_letters(function: str, name: str) -> None:
    event = RESOURCES[function]["Properties"]["Events"][name]
    assert event["Type"] == "EventBridgeRule"
    properties = event["Properties"]
    assert properties["RetryPolicy"] == {
        "MaximumRetryAttempts": 4,
        "MaximumEventAgeInSeconds": 3600,
    }
    assert properties["DeadLetterConfig"] == {
        "Arn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
    }


def test_only_our_rules_may_dead_letter_and_the_alarm_watches_that_queue() -> None:
    queue = RESOURCES["EventsDeadLetterQueue"]["Properties"]
    assert queue["SqsManagedSseEnabled"] is True
    (statement,) = RESOURCES["EventsDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"][
        "Statement"
    ]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    # Every rule of the template, its name and how each of its targets dead-letters:
    # functions' EventBridgeRule and Schedule events, and stand-alone rules' targets.
    dead_letters: dict[str, list[Any]] = {}
    for resource in RESOURCES.values():
        if resource["Type"] == "AWS::Serverless::Function":
            for event in resource["Properties"].get("Events", {}).values():
                if event["Type"] in ("EventBridgeRule", "Schedule"):
                    properties = event["Properties"]
                    name = properties.get("RuleName") or properties["Name"]
                    dead_letters[resolve(name)] = [properties.get("DeadLetterConfig")]
        elif resource["Type"] == "AWS::Events::Rule":
            properties = resource["Properties"]
            dead_letters[resolve(properties["Name"])] = [
                target.get("DeadLetterConfig") for target in properties["Targets"]
            ]
    to_queue = {"Arn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}}
    assert {n: c for n, configs in dead_letters.items() for c in configs if c != to_queue} == {}
    prefix = resolve(
        {"Fn::Sub": "arn:${AWS::Partition}:events:${AWS::Region}:${AWS::AccountId}:rule/"}
    )
    assert set(resolve(statement["Condition"]["ArnEquals"]["aws:SourceArn"])) == {
        prefix + name for name in dead_letters
    }

    alarm = RESOURCES["EventsDeadLetterAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"]) == (
        "AWS/SQS",
        "ApproximateNumberOfMessagesVisible",
    )
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    assert alarm["Dimensions"] == [{"Name": "QueueName", "Value": queue["QueueName"]}]


# ---------------------------------------------------------------- storage


def _buckets() -> list[str]:
    return sorted(k for k, r in RESOURCES.items() if r["Type"] == "AWS::S3::Bucket")


def test_the_contracted_buckets_exist() -> None:
    assert {"RawBucket", "ArtifactsBucket"} <= set(_buckets())
    assert RESOURCES["RawBucketPolicy"]["Properties"]["Bucket"] == {"Ref": "RawBucket"}
    assert RESOURCES["ArtifactsBucketPolicy"]["Properties"]["Bucket"] == {"Ref": "ArtifactsBucket"}
    raw = RESOURCES["RawBucket"]["Properties"]
    assert (
        raw["NotificationConfiguration"]["EventBridgeConfiguration"]["EventBridgeEnabled"] is True
    )


@pytest.mark.parametrize("bucket", _buckets())
def test_buckets_are_private_encrypted_versioned_and_tls_only(bucket: str) -> None:
    properties = RESOURCES[bucket]["Properties"]
    block = properties["PublicAccessBlockConfiguration"]
    assert block == dict.fromkeys(
        ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets"), True
    )
    (rule,) = properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] in {"AES256", "aws:kms"}
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    lifecycle = properties["LifecycleConfiguration"]["Rules"]
    assert any(r["Status"] == "Enabled" and "NoncurrentVersionExpiration" in r for r in lifecycle)

    policies = [
        r["Properties"]["PolicyDocument"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::S3::BucketPolicy" and r["Properties"]["Bucket"] == {"Ref": bucket}
    ]
    (policy,) = policies
    tls_denials = [
        s
        for s in policy["Statement"]
        if s["Effect"] == "Deny"
        and s["Principal"] == "*"
        and s["Action"] == "s3:*"
        and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    ]
    (denial,) = tls_denials
    assert set(resolve(denial["Resource"])) == {
        f"arn:aws:s3:::{name_of(bucket)}",
        f"arn:aws:s3:::{name_of(bucket)}/*",
    }


# ---------------------------------------------------------------- permissions


@pytest.mark.parametrize("function", sorted(FUNCTION_EVENTS))
def test_function_statements_are_all_scoped(function: str) -> None:
    for statement in function_statements(function):
        assert statement["Effect"] == "Allow"
        assert "*" not in as_list(statement["Resource"]), statement
        assert not any(a == "*" or a.endswith(":*") for a in as_list(statement["Action"]))
        if "iam:PassRole" in as_list(statement["Action"]):
            assert as_list(statement["Action"]) == ["iam:PassRole"]
            assert statement["Resource"] == {"Fn::GetAtt": ["SageMakerExecutionRole", "Arn"]}
            assert statement["Condition"] == {
                "StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}
            }
        if "s3:ListBucket" in as_list(statement["Action"]):
            assert "s3:prefix" in statement["Condition"]["StringLike"], statement


def test_sagemaker_role_is_scoped_except_for_unscopable_actions() -> None:
    trust = RESOURCES["SageMakerExecutionRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert [s["Principal"] for s in trust["Statement"]] == [{"Service": "sagemaker.amazonaws.com"}]
    unscoped = set()
    for statement in role_statements():
        assert statement["Effect"] == "Allow"
        if "*" in as_list(statement["Resource"]):
            unscoped |= set(as_list(statement["Action"]))
        if "cloudwatch:PutMetricData" in as_list(statement["Action"]):
            assert "cloudwatch:namespace" in statement["Condition"]["StringLike"]
        if "s3:ListBucket" in as_list(statement["Action"]):
            assert "s3:prefix" in statement["Condition"]["StringLike"], statement
    assert unscoped == UNSCOPABLE_ACTIONS


S3_OBJECT_GRANTS = {
    # The jobs read the run's staged copy, never the raw bucket (issue 41).
    "SageMakerExecutionRole": {
        ("s3:GetObject", "ArtifactsBucket", "history/*"),
        ("s3:GetObject", "ArtifactsBucket", "runs/*"),
        ("s3:PutObject", "ArtifactsBucket", "history/*"),
        ("s3:PutObject", "ArtifactsBucket", "runs/*"),
        ("s3:AbortMultipartUpload", "ArtifactsBucket", "history/*"),
        ("s3:AbortMultipartUpload", "ArtifactsBucket", "runs/*"),
        # Training syncs its checkpoints, the model archives, under their final keys.
        ("s3:GetObject", "ArtifactsBucket", "models/*"),
        ("s3:PutObject", "ArtifactsBucket", "models/*"),
        ("s3:AbortMultipartUpload", "ArtifactsBucket", "models/*"),
        # Processing reads and rewrites the customer metadata store.
        ("s3:GetObject", "ArtifactsBucket", "metadata/*"),
        ("s3:PutObject", "ArtifactsBucket", "metadata/*"),
        ("s3:AbortMultipartUpload", "ArtifactsBucket", "metadata/*"),
    },
    # A key SageMaker cannot take as it is goes to the job as a copy under a short name.
    "StartProcessingFunction": {
        ("s3:GetObject", "RawBucket", "incoming/*"),
        ("s3:GetObjectVersion", "RawBucket", "incoming/*"),
        ("s3:PutObject", "ArtifactsBucket", "runs/*/upload/*"),
        ("s3:AbortMultipartUpload", "ArtifactsBucket", "runs/*/upload/*"),
        # The copy carries its retention tag (issue 41): the lifecycle rule expires it.
        ("s3:PutObjectTagging", "ArtifactsBucket", "runs/*/upload/*"),
        ("s3:PutObjectVersionTagging", "ArtifactsBucket", "runs/*/upload/*"),
        # The run's upload record: the upload's real key, for status and reports.
        ("s3:PutObject", "ArtifactsBucket", "runs/*/upload.json"),
    },
    "StartTrainingFunction": {("s3:GetObject", "ArtifactsBucket", "runs/*/report/*")},
    "RegisterModelsFunction": {
        ("s3:GetObject", "ArtifactsBucket", "models/*/manifest-*"),
        # Each instance's counts and failures, read before its manifest (issue 27).
        ("s3:GetObject", "ArtifactsBucket", "models/*/pages/*-summary.json"),
        # Which customers a failed job was sent: processing's summary names them.
        ("s3:GetObject", "ArtifactsBucket", "runs/*/report/summary.json"),
        # The run's registration record: its failures and which customers were lost.
        ("s3:PutObject", "ArtifactsBucket", "runs/*/registration.json"),
    },
    # Reads manifests and checks a failed job's archives; copies and writes nothing.
    # And tags the archives it retires, for the lifecycle rule (issue 41).
    "RegisterChunkFunction": {
        ("s3:GetObject", "ArtifactsBucket", "models/*"),
        ("s3:PutObjectTagging", "ArtifactsBucket", "models/*"),
    },
}


@pytest.mark.parametrize("principal", sorted(S3_OBJECT_GRANTS))
def test_object_access_is_limited_to_the_prefixes_each_step_needs(principal: str) -> None:
    granted = (
        role_statements()
        if principal == "SageMakerExecutionRole"
        else function_statements(principal)
    )
    assert s3_object_grants(granted) == S3_OBJECT_GRANTS[principal]


SAGEMAKER_GRANTS = {
    "StartProcessingFunction": {
        ("sagemaker:CreateProcessingJob", "processing-job/${JobNamePrefix}-p-*"),
        ("sagemaker:DescribeProcessingJob", "processing-job/${JobNamePrefix}-p-*"),
        ("sagemaker:AddTags", "processing-job/${JobNamePrefix}-p-*"),
    },
    "StartTrainingFunction": {
        ("sagemaker:CreateTrainingJob", "training-job/${JobNamePrefix}-t-*"),
        ("sagemaker:AddTags", "training-job/${JobNamePrefix}-t-*"),
    },
    # Registration reads the training job's event and its manifests in S3, never the job.
    "RegisterModelsFunction": set(),
    "RegisterChunkFunction": set(),
}


@pytest.mark.parametrize("function", sorted(SAGEMAKER_GRANTS))
def test_sagemaker_access_is_limited_to_our_job_names(function: str) -> None:
    arn = "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:"
    grants = set()
    for statement in function_statements(function):
        for action in as_list(statement["Action"]):
            if action.startswith("sagemaker:"):
                resource = statement["Resource"]["Fn::Sub"]
                assert resource.startswith(arn)
                grants.add((action, resource.removeprefix(arn)))
    assert grants == SAGEMAKER_GRANTS[function]


# Each pipeline function's DynamoDB grants: (table, actions).
DYNAMODB_GRANTS = {
    "StartProcessingFunction": {
        ("UploadQueueTable", "dynamodb:GetItem"),
        ("UploadQueueTable", "dynamodb:PutItem"),
        ("UploadQueueTable", "dynamodb:UpdateItem"),
        ("UploadQueueTable", "dynamodb:DeleteItem"),
        ("UploadQueueTable", "dynamodb:Query"),
    },
    "StartTrainingFunction": set(),
    # The run's progress record only (its LeadingKeys condition is checked below).
    # (GetItem: a run with no chunks is read back to be marked registered; issue 27.)
    "RegisterModelsFunction": {
        ("ModelRegistryTable", "dynamodb:GetItem"),
        ("ModelRegistryTable", "dynamodb:UpdateItem"),
    },
    "RegisterChunkFunction": {
        ("ModelRegistryTable", "dynamodb:GetItem"),
        ("ModelRegistryTable", "dynamodb:PutItem"),
        ("ModelRegistryTable", "dynamodb:UpdateItem"),
        ("ModelRegistryTable", "dynamodb:BatchGetItem"),
        ("ModelRegistryTable", "dynamodb:BatchWriteItem"),
    },
}


@pytest.mark.parametrize("function", sorted(DYNAMODB_GRANTS))
def test_only_the_register_function_touches_the_registry(function: str) -> None:
    grants = {
        (statement["Resource"]["Fn::GetAtt"][0], action)
        for statement in function_statements(function)
        for action in as_list(statement["Action"])
        if action.startswith("dynamodb:")
    }
    assert grants == DYNAMODB_GRANTS[function]


def test_registration_chunks_reach_their_function_like_an_event_source_mapping() -> None:
    # Given the chunks queue and the function it feeds
    queue = RESOURCES["RegistrationChunksQueue"]["Properties"]
    function = RESOURCES["RegisterChunkFunction"]["Properties"]
    (mapping,) = [
        r["Properties"]
        for r in RESOURCES.values()
        if r["Type"] == "AWS::Lambda::EventSourceMapping"
    ]
    # Then the function takes small batches from it and reports its failures one by one
    assert mapping["FunctionName"] == {"Ref": "RegisterChunkFunction"}
    assert mapping["EventSourceArn"] == {"Fn::GetAtt": ["RegistrationChunksQueue", "Arn"]}
    assert mapping["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert 1 <= mapping["BatchSize"] <= 10
    # And it may read and delete that queue's messages only (no SAM policy on "*")
    assert "Events" not in function
    assert any(
        "sqs:ReceiveMessage" in s["Action"]
        and "sqs:DeleteMessage" in s["Action"]
        and s["Resource"] == {"Fn::GetAtt": ["RegistrationChunksQueue", "Arn"]}
        for s in function_statements("RegisterChunkFunction")
    )
    # And a message is hidden longer than an invocation can run (Lambda advises 6x)
    assert queue["VisibilityTimeout"] >= 6 * function["Timeout"]
    # And a chunk that keeps failing is dead-lettered after a few receives, and alarmed on
    redrive = queue["RedrivePolicy"]
    assert redrive["deadLetterTargetArn"] == {
        "Fn::GetAtt": ["RegistrationChunksDeadLetterQueue", "Arn"]
    }
    # (at least 5, as Lambda's SQS event source guide advises: issue 41)
    assert 5 <= redrive["maxReceiveCount"] <= 10
    # (fleetcast status and the re-drive know the queues and the count by these)
    assert redrive["maxReceiveCount"] == chunk_queue.MAX_RECEIVES
    assert resolve(queue["QueueName"]) == chunk_queue.QUEUE_NAME.format(prefix="fleetcast")
    dead_letter = RESOURCES["RegistrationChunksDeadLetterQueue"]["Properties"]["QueueName"]
    assert resolve(dead_letter) == chunk_queue.DEAD_LETTER_QUEUE_NAME.format(prefix="fleetcast")
    alarm = RESOURCES["RegistrationChunksDeadLetterAlarm"]["Properties"]
    (dimension,) = alarm["Dimensions"]
    assert resolve(dimension["Value"]) == name_of("RegistrationChunksDeadLetterQueue")
    # And the coordinator may send to the queue, and write only runs' progress records
    statements = function_statements("RegisterModelsFunction")
    assert any(
        s["Action"] == "sqs:SendMessage"
        and s["Resource"] == {"Fn::GetAtt": ["RegistrationChunksQueue", "Arn"]}
        for s in statements
    )
    (dynamodb,) = (s for s in statements if "dynamodb:" in str(s["Action"]))
    assert dynamodb["Condition"] == {"ForAllValues:StringLike": {"dynamodb:LeadingKeys": ["RUN#*"]}}


# ---------------------------------------------------------------- serving


def test_api_samples_are_proxy_events_for_the_routes_the_template_declares() -> None:
    # Given each API Gateway sample and the Api events of its function
    for name, (function, method, resource) in API_EVENTS.items():
        event = sample(name)
        declared = {
            (e["Properties"]["Method"].upper(), e["Properties"]["Path"])
            for e in RESOURCES[function]["Properties"]["Events"].values()
            if e["Type"] == "Api" and e["Properties"]["RestApiId"] == {"Ref": "ForecastApi"}
        }
        # Then the sample is a REST proxy event of that route, on the template's stage
        APIGatewayProxyEventModel.model_validate(event)
        assert (event["httpMethod"], event["resource"]) == (method, resource)
        assert (method, resource) in declared
        stage = RESOURCES["ForecastApi"]["Properties"]["StageName"]
        assert event["requestContext"]["stage"] == stage
        assert event["requestContext"]["path"] == f"/{stage}{event['path']}"
        assert event["headers"]["x-api-key"] == event["requestContext"]["identity"]["apiKey"]


def test_the_api_requires_a_key_and_throttles_each_key_by_the_parameters() -> None:
    api = RESOURCES["ForecastApi"]
    assert api["Type"] == "AWS::Serverless::Api"
    properties = api["Properties"]
    assert properties["TracingEnabled"] is True
    auth = properties["Auth"]
    assert auth["ApiKeyRequired"] is True
    plan = auth["UsagePlan"]
    assert plan["CreateUsagePlan"] == "PER_API"
    assert plan["Throttle"] == {
        "RateLimit": {"Ref": "ApiThrottleRateLimit"},
        "BurstLimit": {"Ref": "ApiThrottleBurstLimit"},
    }
    assert plan["Quota"] == {"Limit": {"Ref": "ApiQuotaLimit"}, "Period": "DAY"}
    # No route opts out of the key.
    for event in RESOURCES["ForecastApiFunction"]["Properties"]["Events"].values():
        assert "Auth" not in event["Properties"]


def test_the_model_serves_the_registrys_target_models_from_the_models_prefix() -> None:
    model = RESOURCES["ForecastModel"]["Properties"]
    container = model["PrimaryContainer"]
    assert container["Mode"] == "MultiModel"
    assert container["Image"] == {"Ref": "InferenceImageUri"}
    # TargetModel (layout.target_model) is relative to ModelDataUrl: together, model_key.
    prefix = f"s3://{name_of('ArtifactsBucket')}/"
    assert resolve(container["ModelDataUrl"]) == prefix + layout.MODELS_PREFIX
    assert resolve(container["ModelDataUrl"]) + layout.target_model("42", RUN_ID) == (
        prefix + layout.model_key("42", RUN_ID)
    )
    assert model["ExecutionRoleArn"] == {"Fn::GetAtt": ["InferenceExecutionRole", "Arn"]}
    assert model["EnableNetworkIsolation"] is True
    # Unnamed: a new image replaces the model under a new name, and the endpoint follows.
    assert (
        "ModelName" not in model
        and "EndpointConfigName" not in (RESOURCES["ForecastEndpointConfig"]["Properties"])
    )
    (variant,) = RESOURCES["ForecastEndpointConfig"]["Properties"]["ProductionVariants"]
    assert variant["ModelName"] == {"Fn::GetAtt": ["ForecastModel", "ModelName"]}
    assert variant["InstanceType"] == {"Ref": "InferenceInstanceType"}
    assert variant["InitialInstanceCount"] == {"Ref": "InferenceInstanceCount"}
    endpoint = RESOURCES["ForecastEndpoint"]["Properties"]
    assert endpoint["EndpointConfigName"] == {
        "Fn::GetAtt": ["ForecastEndpointConfig", "EndpointConfigName"]
    }
    assert resolve(endpoint["EndpointName"]) == f"{PREFIX}-forecast"


def test_the_endpoint_role_only_reads_published_models() -> None:
    role = RESOURCES["InferenceExecutionRole"]["Properties"]
    trust = role["AssumeRolePolicyDocument"]["Statement"]
    assert [s["Principal"] for s in trust] == [{"Service": "sagemaker.amazonaws.com"}]
    granted = list(statements(role["Policies"]))
    assert s3_object_grants(granted) == {("s3:GetObject", "ArtifactsBucket", "models/*")}
    unscoped = set()
    for statement in granted:
        assert statement["Effect"] == "Allow"
        actions = as_list(statement["Action"])
        assert not any(a.startswith(("s3:Put", "s3:Delete", "dynamodb:")) for a in actions)
        if "*" in as_list(statement["Resource"]):
            unscoped |= set(actions)
        if "s3:ListBucket" in actions:
            assert statement["Condition"]["StringLike"]["s3:prefix"] == "models/*"
        if "cloudwatch:PutMetricData" in actions:
            assert "cloudwatch:namespace" in statement["Condition"]["StringLike"]
    assert unscoped == UNSCOPABLE_ACTIONS


def test_the_api_function_reads_the_registry_and_invokes_only_its_endpoint() -> None:
    function = RESOURCES["ForecastApiFunction"]["Properties"]
    # API Gateway stops waiting after 29 s; the function should not outlive that.
    assert function["Timeout"] <= 29
    granted = {
        (action, json.dumps(statement["Resource"], sort_keys=True))
        for statement in function_statements("ForecastApiFunction")
        for action in as_list(statement["Action"])
    }
    endpoint_arn = (
        "arn:${AWS::Partition}:sagemaker:${AWS::Region}:${AWS::AccountId}:endpoint/"
        "${JobNamePrefix}-forecast"
    )
    assert granted == {
        ("dynamodb:GetItem", json.dumps({"Fn::GetAtt": ["ModelRegistryTable", "Arn"]})),
        ("sagemaker:InvokeEndpoint", json.dumps({"Fn::Sub": endpoint_arn})),
    }
    # The ARN names the endpoint the template creates.
    assert endpoint_arn.endswith(
        RESOURCES["ForecastEndpoint"]["Properties"]["EndpointName"]["Fn::Sub"]
    )


def test_the_api_function_settings_read_what_the_template_sets() -> None:
    environment = {
        **{k: str(resolve(v)) for k, v in GLOBALS["Environment"]["Variables"].items()},
        **{
            k: str(resolve(v))
            for k, v in RESOURCES["ForecastApiFunction"]["Properties"]["Environment"][
                "Variables"
            ].items()
        },
    }
    fields = ForecastApiSettings.model_fields.values()
    required = {field.alias for field in fields if field.is_required()}
    assert required <= set(environment)
    settings = ForecastApiSettings.model_validate(environment)
    assert settings.endpoint_name == f"{PREFIX}-forecast"
    assert settings.registry_table == name_of("ModelRegistryTable")


# ---------------------------------------------------------------- cost report

COST_FUNCTION = "CostReportFunction"
COST_ENVIRONMENT: dict[str, Any] = RESOURCES[COST_FUNCTION]["Properties"]["Environment"][
    "Variables"
]
_ARN = "arn:${AWS::Partition}:"
# Every call the report makes (fleetcast_cost/{sources,state,delivery}.py), on
# what. Cost Explorer, ListTrainingJobs and GetMetricData have no resource-level
# permissions; every training job is read, as the bill covers them all.
COST_GRANTS = {
    ("ce:GetCostAndUsage", "*"),
    ("ce:GetAnomalies", "*"),
    ("sagemaker:ListTrainingJobs", "*"),
    ("cloudwatch:GetMetricData", "*"),
    (
        "sagemaker:DescribeTrainingJob",
        _ARN + "sagemaker:${AWS::Region}:${AWS::AccountId}:training-job/*",
    ),
    # Any identity SES checks (the sender's; in the sandbox each recipient's), from the
    # sender only: the condition is checked below.
    ("ses:SendRawEmail", _ARN + "ses:${AWS::Region}:${AWS::AccountId}:identity/*"),
    ("dynamodb:PutItem", "CostReportStateTable.Arn"),
    ("dynamodb:DeleteItem", "CostReportStateTable.Arn"),
}


def cost_environment(overrides: dict[str, str] | None = None) -> dict[str, str]:
    return environment_for(COST_FUNCTION, {**COST_ADDRESSES, **(overrides or {})})


def test_cost_function_environment_is_read_by_its_settings() -> None:
    # Given the cost function's variables and its settings model
    properties = RESOURCES[COST_FUNCTION]["Properties"]
    # (MPLCONFIGDIR is matplotlib's, in Lambda's only writable folder)
    assert COST_ENVIRONMENT["MPLCONFIGDIR"].startswith("/tmp/")
    fields = CostReportSettings.model_fields.values()
    read = {field.alias for field in fields}
    required = {field.alias for field in fields if field.is_required()}
    own = set(COST_ENVIRONMENT) - {"MPLCONFIGDIR"}
    # Then every variable it sets is read, every one without a default is set
    assert own <= read, f"set but never read: {own - read}"
    assert required <= own, f"read but never set: {required - own}"
    # (COST_OUTBOX_DIR is the local stack's alone)
    assert "COST_OUTBOX_DIR" in read - own
    settings = CostReportSettings.model_validate(cost_environment())
    assert settings.state_table == name_of("CostReportStateTable")
    assert settings.recipients == ("ops@example.com", "finops@example.com")
    # And matplotlib gets the time and memory a chart and a few hundred calls need
    assert properties["MemorySize"] >= 1024 and 60 < properties["Timeout"] <= 900


@pytest.mark.parametrize(
    "parameter",
    sorted(
        v["Ref"]
        for v in COST_ENVIRONMENT.values()
        if isinstance(v, dict) and v["Ref"] in PARAMETERS
    ),
)
def test_every_cost_parameter_value_that_deploys_is_accepted_by_the_handler(
    parameter: str,
) -> None:
    spec = PARAMETERS[parameter]
    values = _allowed_values(parameter) if parameter not in COST_ADDRESSES else []
    values += [str(spec["Default"])] if "Default" in spec else []
    for value in values:
        try:
            CostReportSettings.model_validate(cost_environment({parameter: value}))
        except ValidationError as error:
            pytest.fail(f"{parameter}={value} deploys but the handler rejects it: {error}")


ADDRESS_SAMPLES = [
    ("CostReportRecipients", "ops@example.com", True),
    ("CostReportRecipients", "ops@example.com,finops@example.co.uk", True),
    ("CostReportRecipients", "ops@example.com, finops@example.com", True),
    ("CostReportRecipients", "ops@localhost", False),
    ("CostReportRecipients", "ops@example.com;finops@example.com", False),
    ("CostReportRecipients", "Ops <ops@example.com>", False),
    ("CostReportRecipients", "ops@example.com,", False),
    ("CostReportSender", "cost-watch@example.com", True),
    ("CostReportSender", "cost-watch@localhost", False),
    ("CostReportSender", "a@example.com,b@example.com", False),
]


@pytest.mark.parametrize(("parameter", "value", "valid"), ADDRESS_SAMPLES)
def test_address_parameters_deploy_only_what_the_handler_accepts(
    parameter: str, value: str, valid: bool
) -> None:
    # Given an address value, When CloudFormation checks it against AllowedPattern
    deploys = re.fullmatch(PARAMETERS[parameter]["AllowedPattern"], value) is not None
    # Then it deploys as expected, and what deploys the handler accepts when it starts
    assert deploys == valid
    if deploys:
        CostReportSettings.model_validate(cost_environment({parameter: value}))


def test_cost_report_runs_on_its_schedule_as_the_sample_event_names_it() -> None:
    (event,) = RESOURCES[COST_FUNCTION]["Properties"]["Events"].values()
    assert event["Type"] == "Schedule"
    properties = event["Properties"]
    assert properties["Schedule"] == {"Ref": "CostReportSchedule"}
    # EventBridge cron: six fields, minutes to year
    schedule = LOCAL.parameters["CostReportSchedule"]
    assert re.fullmatch(r"cron\((\S+ ){5}\S+\)", schedule), schedule
    assert properties["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    rule = resolve(properties["Name"])
    assert sample("schedule.json")["resources"] == [
        f"arn:aws:events:us-east-1:123456789012:rule/{rule}"
    ]


def test_cost_function_has_exactly_the_permissions_its_calls_need() -> None:
    granted = set()
    for statement in function_statements(COST_FUNCTION):
        assert statement["Effect"] == "Allow"
        resource = statement["Resource"]
        if isinstance(resource, dict) and "Fn::GetAtt" in resource:
            resource = ".".join(resource["Fn::GetAtt"])
        elif isinstance(resource, dict):
            resource = resource["Fn::Sub"]
        granted |= {(action, resource) for action in as_list(statement["Action"])}
    assert granted == COST_GRANTS
    (ses,) = (s for s in function_statements(COST_FUNCTION) if s["Action"] == "ses:SendRawEmail")
    assert ses["Condition"] == {"StringEquals": {"ses:FromAddress": {"Ref": "CostReportSender"}}}


def test_cost_state_table_is_keyed_and_expired_as_the_report_writes_it() -> None:
    # Given the table and an item as the report claims an anomaly
    properties = RESOURCES["CostReportStateTable"]["Properties"]
    anomaly = Anomaly(
        usage_type="USE1-Train:ml.p3.2xlarge",
        date=dt.date(2026, 11, 27),
        actual=31.84,
        expected=0.0,
        impact=31.84,
        kind="new_usage_type",
    )
    item = cost_state._item(anomaly, "run", dt.datetime(2026, 11, 30, tzinfo=dt.UTC))
    # Then its key is the table's, typed as declared, and it expires by the table's TTL
    types = {a["AttributeName"]: a["AttributeType"] for a in properties["AttributeDefinitions"]}
    key = [k["AttributeName"] for k in properties["KeySchema"]]
    assert key == ["usage_type", "date"]
    assert {name: next(iter(item[name])) for name in key} == {name: types[name] for name in key}
    ttl = properties["TimeToLiveSpecification"]
    assert ttl["Enabled"] is True and "N" in item[ttl["AttributeName"]]
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}


def test_a_cost_report_failure_raises_the_alarm() -> None:
    alarm = RESOURCES["CostReportFailedAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/Lambda",
        "Errors",
        "Sum",
    )
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": COST_FUNCTION}}]
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == ("GreaterThanThreshold", 0)
    # A daily run: one day's errors decide, and no run is no alarm
    assert alarm["Period"] == 86400 and alarm["TreatMissingData"] == "notBreaching"


# ---------------------------------------------------------------- the template as a whole


def _intrinsics(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, list):
        for item in value:
            yield from _intrinsics(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            # A resource's own Condition attribute sits beside its Type, not alone.
            if key == "Ref" or key.startswith("Fn::") or (key == "Condition" and len(value) == 1):
                yield key, item
            yield from _intrinsics(item)


# (Outputs are for scripts run against AWS; the local stack does not read them.)
@pytest.mark.parametrize("section", ["Resources", "Globals"])
def test_template_uses_only_intrinsics_the_local_stack_resolves(section: str) -> None:
    assert TEMPLATE["Transform"] == "AWS::Serverless-2016-10-31"
    assert "Mappings" not in TEMPLATE
    assert list(_intrinsics(TEMPLATE[section]))
    assert list(_intrinsics(resolve(TEMPLATE[section]))) == []


# ---------------------------------------------------------------- samconfig.toml


SAMCONFIG = tomllib.loads((REPO_ROOT / "samconfig.toml").read_text())


def _overrides(environment: str) -> dict[str, str]:
    value = SAMCONFIG[environment]["deploy"]["parameters"]["parameter_overrides"]
    pairs = value if isinstance(value, list) else value.split()
    return dict(pair.split("=", 1) for pair in pairs)


def _valid_for(parameter: str, value: str) -> bool:
    spec = PARAMETERS[parameter]
    if "AllowedValues" in spec and value not in [str(v) for v in spec["AllowedValues"]]:
        return False
    if "AllowedPattern" in spec and re.fullmatch(spec["AllowedPattern"], value) is None:
        return False
    if spec["Type"] == "Number":
        number = float(value)
        return spec.get("MinValue", number) <= number <= spec.get("MaxValue", number)
    return True


@pytest.mark.parametrize("environment", ["default", "prod"])
def test_samconfig_overrides_are_valid_parameter_values(environment: str) -> None:
    overrides = _overrides(environment)
    assert set(overrides) <= set(PARAMETERS)
    invalid = {k: v for k, v in overrides.items() if not _valid_for(k, v)}
    assert not invalid
    for function, settings in FUNCTION_SETTINGS.items():
        settings.model_validate(environment_for(function, overrides))
    deploy = SAMCONFIG[environment]["deploy"]["parameters"]
    assert deploy["capabilities"] == "CAPABILITY_IAM"
    assert deploy["confirm_changeset"] is True
    assert deploy["resolve_s3"] is True


def test_samconfig_environments_are_separate_stacks_with_separate_names() -> None:
    assert SAMCONFIG["version"] == 0.1
    assert SAMCONFIG["default"]["global"]["parameters"]["stack_name"] == "fleetcast"
    assert SAMCONFIG["prod"]["global"]["parameters"]["stack_name"] == "fleetcast-prod"
    assert SAMCONFIG["default"]["build"]["parameters"] == {"cached": True, "parallel": True}
    assert SAMCONFIG["default"]["validate"]["parameters"] == {"lint": True}
    prod = _overrides("prod")
    assert (prod["TrainingInstanceCount"], prod["LogLevel"]) == ("10", "WARNING")
    # One prefix per stack: it names buckets, rules and jobs, and a rule matches jobs by it.
    assert _overrides("default")["JobNamePrefix"] != prod["JobNamePrefix"]


@pytest.mark.parametrize("environment", ["default", "prod"])
def test_every_sam_command_finds_the_stack_in_samconfigs_region(environment: str) -> None:
    # Issue 41: the region was a deploy parameter only, so `sam delete` (and the AWS CLI
    # steps) looked in the profile's region and found no stack.
    config = SAMCONFIG[environment]
    region = config["global"]["parameters"]["region"]
    assert re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region)
    # Nowhere does a command's own table name another one
    assert [
        command
        for command, table in config.items()
        if command != "global" and "region" in table.get("parameters", {})
    ] == []
    # And `fleetcast images` pushes to that region's ECR by default
    assert images.samconfig_region(REPO_ROOT / "samconfig.toml", environment) == region


# ---------------------------------------------------------------- template_helpers


def test_loader_reads_every_short_form() -> None:
    loaded = loads_template(
        "a: !Ref X\n"
        "b: !GetAtt Res.Attr.Nested\n"
        "c: !GetAtt [Res, Arn]\n"
        'd: !Sub ["${A}-x", {A: !Ref B}]\n'
        "e: !If [Cond, !Join ['', [a, b]], !Ref AWS::NoValue]\n"
        "f: !Equals [!Ref P, 'x']\n"
        "g: !Condition C\n"
    )
    assert loaded == {
        "a": {"Ref": "X"},
        "b": {"Fn::GetAtt": ["Res", "Attr.Nested"]},
        "c": {"Fn::GetAtt": ["Res", "Arn"]},
        "d": {"Fn::Sub": ["${A}-x", {"A": {"Ref": "B"}}]},
        "e": {"Fn::If": ["Cond", {"Fn::Join": ["", ["a", "b"]]}, {"Ref": "AWS::NoValue"}]},
        "f": {"Fn::Equals": [{"Ref": "P"}, "x"]},
        "g": {"Condition": "C"},
    }


def test_loader_rejects_tags_cloudformation_does_not_have() -> None:
    with pytest.raises(ValueError, match="!Reff"):
        loads_template("a: !Reff X\n")


# ---------------------------------------------------------------- alarms and dashboard

# Rule -> the failed-job sample it is for; each sends the alarm topic the job's reason.
FAILURE_RULES = {
    "ProcessingJobFailedRule": "processing_job_failed.json",
    "TrainingJobFailedRule": "training_job_failed.json",
}
# What each alarm the issue asks for watches: (namespace, metric) of its metric or metrics.
WATCHED = {
    "FailedJobsAlarm": {("AWS/Events", "MatchedEvents")},
    "EventsDeadLetterAlarm": {("AWS/SQS", "ApproximateNumberOfMessagesVisible")},
    "ApiServerErrorsAlarm": {("AWS/ApiGateway", "5XXError")},
    "EndpointErrorsAlarm": {("AWS/SageMaker", "Invocation5XXErrors")},
    "CostReportFailedAlarm": {("AWS/Lambda", "Errors")},
    "RegistrationChunksDeadLetterAlarm": {("AWS/SQS", "ApproximateNumberOfMessagesVisible")},
}


def _alarms() -> dict[str, dict[str, Any]]:
    return {
        k: r["Properties"] for k, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"
    }


def _watched(alarm: dict[str, Any]) -> set[tuple[str, str]]:
    if "MetricName" in alarm:
        return {(alarm["Namespace"], alarm["MetricName"])}
    return {
        (m["MetricStat"]["Metric"]["Namespace"], m["MetricStat"]["Metric"]["MetricName"])
        for m in alarm["Metrics"]
        if "MetricStat" in m
    }


def test_the_alarms_are_the_contracted_ones_and_each_notifies_the_alarm_topic() -> None:
    alarms = _alarms()
    assert {name: _watched(alarm) for name, alarm in alarms.items()} == WATCHED
    for name, alarm in alarms.items():
        assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}], name
        # No data (a quiet day) is not an alarm.
        assert alarm["TreatMissingData"] == "notBreaching", name


def test_alarm_dimensions_name_this_stacks_resources() -> None:
    alarms = _alarms()

    def dimensions(alarm: str) -> dict[str, Any]:
        return {d["Name"]: resolve(d["Value"]) for d in alarms[alarm]["Dimensions"]}

    assert dimensions("EventsDeadLetterAlarm") == {"QueueName": name_of("EventsDeadLetterQueue")}
    assert dimensions("ApiServerErrorsAlarm") == {
        "ApiName": resolve(RESOURCES["ForecastApi"]["Properties"]["Name"]),
        "Stage": RESOURCES["ForecastApi"]["Properties"]["StageName"],
    }
    assert dimensions("EndpointErrorsAlarm") == {
        "EndpointName": name_of("ForecastEndpoint"),
        "VariantName": RESOURCES["ForecastEndpointConfig"]["Properties"]["ProductionVariants"][0][
            "VariantName"
        ],
    }
    # The failed-jobs alarm adds up both failure rules' matches.
    rules = {
        m["MetricStat"]["Metric"]["Dimensions"][0]["Value"]["Ref"]
        for m in alarms["FailedJobsAlarm"]["Metrics"]
        if "MetricStat" in m
    }
    assert rules == set(FAILURE_RULES)


@pytest.mark.parametrize("status", ["Failed", "Stopped"])
def test_each_failed_or_stopped_job_reaches_exactly_its_failure_rule(status: str) -> None:
    patterns = {
        rule: resolve(RESOURCES[rule]["Properties"]["EventPattern"]) for rule in FAILURE_RULES
    }
    for rule, name in FAILURE_RULES.items():
        event = sample(name)
        status_field = next(k for k in event["detail"] if k.endswith("JobStatus"))
        event = with_value(event, ("detail", status_field), status)
        assert {r for r, p in patterns.items() if matches(p, event)} == {rule}
    # Completed jobs, other stacks' jobs and everything else reach none of them.
    quiet = [
        sample("processing_job_completed.json"),
        sample("training_job_completed.json"),
        sample("s3_object_created.json"),
        sample("schedule.json"),
        with_value(
            sample("training_job_failed.json"),
            ("detail", "TrainingJobName"),
            f"fleetcast-prod-t-{RUN_ID}",
        ),
    ]
    for event in quiet:
        assert not any(matches(p, event) for p in patterns.values())


def test_failure_rules_publish_to_the_topic_and_only_they_and_alarms_may() -> None:
    for rule in FAILURE_RULES:
        (target,) = RESOURCES[rule]["Properties"]["Targets"]
        assert target["Arn"] == {"Ref": "AlarmTopic"}
        # The message names the job, its status and SageMaker's reason.
        assert {"job", "status", "reason"} <= set(target["InputTransformer"]["InputPathsMap"])
    policy = RESOURCES["AlarmTopicPolicy"]["Properties"]["PolicyDocument"]
    principals = {s["Principal"]["Service"]: s for s in policy["Statement"]}
    assert set(principals) == {"events.amazonaws.com", "cloudwatch.amazonaws.com"}
    for statement in principals.values():
        assert (statement["Effect"], statement["Action"]) == ("Allow", "sns:Publish")
        assert statement["Condition"], "a service principal without a source condition"
    allowed = principals["events.amazonaws.com"]["Condition"]["ArnEquals"]["aws:SourceArn"]
    assert allowed == [{"Fn::GetAtt": [rule, "Arn"]} for rule in FAILURE_RULES]


def transformed_input(transformer: dict[str, Any], event: dict[str, Any]) -> Any:
    """What EventBridge sends the target: each <name> of InputTemplate replaced by its
    InputPathsMap path's value in the event (dot notation only, as the rules use)."""
    values = {}
    for name, path in transformer["InputPathsMap"].items():
        value: Any = event
        for part in path.removeprefix("$.").split("."):
            value = value.get(part) if isinstance(value, dict) else None
        values[name] = value
    text = re.sub(
        r"<([\w.-]+)>", lambda m: str(values[m.group(1)] or ""), transformer["InputTemplate"]
    )
    return json.loads(text)


def test_a_failed_processing_jobs_message_carries_the_containers_own_words() -> None:
    # Issue 41: SageMaker surfaces the container's /opt/ml/output/message as the job's
    # ExitMessage; its FailureReason is generic. The notification mapped only the latter.
    # Given the event of a processing job whose container said why it failed
    event = sample("processing_job_failed.json")
    detail = event["detail"]
    assert detail["FailureReason"] == "AlgorithmError: See job logs for more information"
    (target,) = RESOURCES["ProcessingJobFailedRule"]["Properties"]["Targets"]
    # When the rule transforms it for the alarm topic
    message = transformed_input(target["InputTransformer"], event)
    # Then the e-mail says what the container said, SageMaker's reason and where the logs are
    assert detail["ExitMessage"] in message
    assert detail["FailureReason"] in message
    assert f"{detail['ProcessingJobName']} ended Failed" in message
    assert "/aws/sagemaker/ProcessingJobs" in message
    # And a job that ended without a message (stopped) still makes a message
    del detail["ExitMessage"]
    detail["ProcessingJobStatus"] = "Stopped"
    assert "ended Stopped" in transformed_input(target["InputTransformer"], event)


@pytest.mark.parametrize(
    ("value", "deploys"),
    [("", True), ("ops@example.com", True), ("ops", False), ("a@b.c,d@e.f", False)],
)
def test_the_alarm_e_mail_is_optional_and_one_address(value: str, deploys: bool) -> None:
    pattern = PARAMETERS["AlarmEmail"]["AllowedPattern"]
    assert (re.fullmatch(pattern, value) is not None) is deploys
    subscription = RESOURCES["AlarmEmailSubscription"]
    assert subscription["Condition"] == "HasAlarmEmail"
    assert subscription["Properties"]["Endpoint"] == {"Ref": "AlarmEmail"}
    assert TEMPLATE["Conditions"]["HasAlarmEmail"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmEmail"}, ""]}]
    }


def _dashboard() -> dict[str, Any]:
    """The dashboard body resolved, parsed: it must be JSON once deployed."""
    body = resolve(RESOURCES["Dashboard"]["Properties"]["DashboardBody"])
    loaded: dict[str, Any] = json.loads(body)
    return loaded


def _emitted_metrics() -> set[str]:
    """Every EMF metric name a function publishes (functions/*/app.py)."""
    names = set()
    for handler in (REPO_ROOT / "functions").glob("*/app.py"):
        names |= set(re.findall(r'add_metric\(\s*name="(\w+)"', handler.read_text()))
    return names


def test_functions_publish_the_metrics_the_issue_names() -> None:
    assert {
        "ModelsTrained",
        "ModelsRegistered",
        "ModelsFailed",
        "RowsRejected",
        "ForecastLatency",
        "AnomaliesFound",
    } <= _emitted_metrics()


def test_the_dashboard_shows_every_alarm_and_every_metric_the_functions_publish() -> None:
    widgets = _dashboard()["widgets"]
    (alarm_widget,) = (w for w in widgets if w["type"] == "alarm")
    assert set(alarm_widget["properties"]["alarms"]) == {LOCAL.arn(alarm) for alarm in _alarms()}
    shown = [m for w in widgets if w["type"] == "metric" for m in w["properties"]["metrics"]]
    ours = [
        m
        for m in shown
        if m[0] == GLOBALS["Environment"]["Variables"]["POWERTOOLS_METRICS_NAMESPACE"]
    ]
    assert {m[1] for m in ours} == _emitted_metrics()
    # Powertools' only dimension is the service, which is this stack's prefix.
    assert GLOBALS["Environment"]["Variables"]["POWERTOOLS_SERVICE_NAME"] == {
        "Ref": "JobNamePrefix"
    }
    assert {(m[2], m[3]) for m in ours} == {("service", PREFIX)}
    # Every other metric names this stack's queue, API, endpoint or rules.
    names = {
        name_of("EventsDeadLetterQueue"),
        name_of("RegistrationChunksDeadLetterQueue"),
        name_of("ForecastEndpoint"),
        *map(name_of, FAILURE_RULES),
    }
    names.add(resolve(RESOURCES["ForecastApi"]["Properties"]["Name"]))
    for metric in shown:
        if metric[0] != "Fleetcast":
            assert metric[3] in names, metric


# ---------------------------------------------------------------- least privilege, across


@pytest.mark.parametrize(
    "table", sorted(k for k, r in RESOURCES.items() if r["Type"] == "AWS::DynamoDB::Table")
)
def test_every_table_is_encrypted_and_recoverable(table: str) -> None:
    properties = RESOURCES[table]["Properties"]
    assert properties["SSESpecification"] == {"SSEEnabled": True}
    assert properties["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert properties["BillingMode"] == "PAY_PER_REQUEST"


def test_training_needs_no_network_and_neither_does_the_endpoint() -> None:
    settings = TrainingSettings.model_validate(environment_for("StartTrainingFunction"))
    assert training_job_request(settings, RUN_ID, 5)["EnableNetworkIsolation"] is True
    assert RESOURCES["ForecastModel"]["Properties"]["EnableNetworkIsolation"] is True


def test_only_cost_explorer_reads_and_unscopable_calls_are_granted_on_everything() -> None:
    # Every IAM statement in the template names its resources, except for actions IAM
    # cannot scope; the cost report's reads are the documented exception.
    cost_reads = {
        "ce:GetCostAndUsage",
        "ce:GetAnomalies",
        "sagemaker:ListTrainingJobs",
        "cloudwatch:GetMetricData",
    }
    unscoped = set()
    for resource in RESOURCES.values():
        properties = resource.get("Properties", {})
        for statement in statements(properties.get("Policies", [])):
            if statement.get("Effect", "Allow") == "Allow" and statement["Resource"] == "*":
                unscoped |= set(as_list(statement["Action"]))
    assert unscoped <= UNSCOPABLE_ACTIONS | cost_reads


def test_start_processing_has_time_to_stage_the_largest_upload_and_less_than_the_lease() -> None:
    """Every upload is copied into its run's folder before its job starts (UploadPartCopy
    parts of pipeline.STAGING_PART_BYTES, STAGING_CONCURRENCY at a time)."""
    # Given the largest upload a processing job takes
    largest = int(PARAMETERS["ProcessingMaxUploadMB"]["Default"]) * 2**20
    parts = -(-largest // STAGING_PART_BYTES)
    # Then it is a few dozen UploadPartCopy calls, within S3's limits on a part
    assert 5 * 2**20 <= STAGING_PART_BYTES <= 5 * 2**30
    assert 10 <= parts <= 60
    # And at a slow 20 MB/s per part request the copy takes under half the Timeout
    per_part_seconds = STAGING_PART_BYTES / 20e6
    copy_seconds = -(-parts // STAGING_CONCURRENCY) * per_part_seconds
    timeout = RESOURCES["StartProcessingFunction"]["Properties"]["Timeout"]
    assert 2 * copy_seconds <= timeout
    # And a function still copying is never mistaken for one that died holding the lease
    assert timeout < UNSTARTED_LEASE_GRACE.total_seconds()
