"""template.yaml through the tools that deploy and police it: cfn-lint, SAM's linter and
transform, checkov and `sam build`. All offline, no AWS account; each test shows the
tool's whole output when it fails."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from template_helpers import REPO_ROOT, load_template

from fleetcast.embedded.costs import LOCAL_PARAMETERS
from fleetcast.embedded.template import LocalTemplate

TEMPLATE = REPO_ROOT / "template.yaml"
CFN_LINT = Path(sys.executable).parent / "cfn-lint"
SAM = REPO_ROOT / ".venv-sam" / "bin" / "sam"
SAM_PYTHON = REPO_ROOT / ".venv-sam" / "bin" / "python"
CHECKOV = REPO_ROOT / ".venv-checkov" / "bin" / "checkov"
FUNCTIONS = ("StartProcessingFunction", "StartTrainingFunction", "RegisterModelsFunction")
# Registration chunks arrive from an SQS queue rather than an EventBridge rule.
CHUNK_FUNCTION = "RegisterChunkFunction"
# Functions behind the API rather than EventBridge rules.
API_FUNCTIONS = ("ForecastApiFunction",)
# The scheduled cost report, and the reads it needs that IAM cannot scope to a resource.
COST_FUNCTION = "CostReportFunction"
COST_UNSCOPABLE_ACTIONS = {
    "ce:GetCostAndUsage",
    "ce:GetAnomalies",
    "sagemaker:ListTrainingJobs",
    "cloudwatch:GetMetricData",
}

# Checks that do not apply, each with the reason recorded in the template's Metadata.
# A new skip must be added here too, so it is reviewed rather than slipped in.
EXPECTED_CHECKOV_SKIPS = {
    ("CKV_AWS_18", "AWS::S3::Bucket.AccessLogsBucket"),
    ("CKV_AWS_119", "AWS::DynamoDB::Table.ModelRegistryTable"),
    ("CKV_AWS_119", "AWS::DynamoDB::Table.UploadQueueTable"),
    ("CKV_AWS_111", "AWS::IAM::Role.SageMakerExecutionRole"),
    ("CKV_AWS_27", "AWS::SQS::Queue.EventsDeadLetterQueue"),
    ("CKV_AWS_27", "AWS::SQS::Queue.RegistrationChunksQueue"),
    ("CKV_AWS_27", "AWS::SQS::Queue.RegistrationChunksDeadLetterQueue"),
    ("CKV_AWS_26", "AWS::SNS::Topic.AlarmTopic"),
    *(
        (check, f"AWS::Serverless::Function.{function}")
        for function in (*FUNCTIONS, *API_FUNCTIONS, COST_FUNCTION, CHUNK_FUNCTION)
        for check in ("CKV_AWS_115", "CKV_AWS_117", "CKV_AWS_173")
    ),
    ("CKV_AWS_119", "AWS::DynamoDB::Table.CostReportStateTable"),
    ("CKV_AWS_158", "AWS::Logs::LogGroup.CostReportLogGroup"),
    ("CKV_AWS_111", "AWS::IAM::Role.InferenceExecutionRole"),
    ("CKV_AWS_76", "AWS::Serverless::Api.ForecastApi"),
    ("CKV_AWS_120", "AWS::Serverless::Api.ForecastApi"),
    ("CKV_AWS_158", "AWS::Logs::LogGroup.ForecastApiLogGroup"),
    *(
        ("CKV_AWS_158", f"AWS::Logs::LogGroup.{group}")
        for group in (
            "StartProcessingLogGroup",
            "StartTrainingLogGroup",
            "RegisterModelsLogGroup",
            "RegisterChunkLogGroup",
        )
    ),
}

# Rules that tell the alarm topic about failed SageMaker jobs rather than invoke a function.
FAILURE_RULES = ("ProcessingJobFailedRule", "TrainingJobFailedRule")

# What the SAM transform attaches to each function role beyond template.yaml's Policies;
# both grant on Resource "*", which IAM offers no way to narrow for these actions.
SAM_MANAGED_POLICIES = {
    "arn:aws:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole",  # logs
    "arn:aws:iam::aws:policy/AWSXrayWriteOnlyAccess",  # Tracing: Active
}

# Translate template.yaml the way `sam validate`/`sam deploy` do, without AWS: local code
# paths become S3 URIs, and nothing may need a managed policy looked up in IAM.
_SAM_TRANSFORM = """
import json, sys
from boto3.session import Session
from samcli.yamlhelper import yaml_parse
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator

with open(sys.argv[1]) as stream:
    template = yaml_parse(stream.read())
for resource in template["Resources"].values():
    properties = resource.get("Properties", {})
    if resource["Type"] == "AWS::Serverless::Function":
        properties["CodeUri"] = "s3://bucket/function.zip"
    elif resource["Type"] == "AWS::Serverless::LayerVersion":
        properties["ContentUri"] = "s3://bucket/layer.zip"

def no_lookup():
    raise AssertionError("the template names a managed policy that needs an IAM lookup")

translator = Translator(
    managed_policy_map=None, sam_parser=Parser(), plugins=[],
    boto_session=Session(region_name="us-east-1"),
)
print(json.dumps(translator.translate(
    sam_template=template, parameter_values={}, get_managed_policy_map=no_lookup,
)))
"""


# Run with `python -S`: only the standard library, then the two folders Lambda puts on
# sys.path (the function's code, the layer's python/), so nothing comes from this venv.
_IMPORT_HANDLER = """
import importlib, inspect, json, sys
function_dir, layer_dir, handler = sys.argv[1:]
sys.path[:0] = [function_dir, layer_dir]
module_name, _, attribute = handler.rpartition(".")
module = importlib.import_module(module_name)
target = getattr(module, attribute)
import aws_lambda_powertools, fleetcast_common
print(json.dumps({
    "module": module.__file__,
    "handler": "function" if callable(target) and inspect.isfunction(inspect.unwrap(target))
    else type(target).__name__,
    "fleetcast_common": fleetcast_common.__file__,
    "powertools": aws_lambda_powertools.__file__,
}))
"""


def offline_env() -> dict[str, str]:
    """This environment without AWS settings, plus a region and dummy credentials."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_REGION="us-east-1",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        SAM_CLI_TELEMETRY="0",
    )
    return env


def run(command: list[str | Path], cwd: Path = REPO_ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def output_of(result: subprocess.CompletedProcess[str]) -> str:
    return (
        f"$ {' '.join(result.args)}\nexit {result.returncode}\n"
        f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    )


def require(tool: Path) -> None:
    if not tool.exists():
        pytest.skip(f"{tool.relative_to(REPO_ROOT)} is not installed: run `make install`")


def test_cfn_lint_is_clean() -> None:
    require(CFN_LINT)
    result = run([CFN_LINT, TEMPLATE])
    assert result.returncode == 0, output_of(result)


def test_sam_validate_lint_passes_offline() -> None:
    require(SAM)
    result = run([SAM, "validate", "--lint", "--template-file", TEMPLATE])
    assert result.returncode == 0, output_of(result)
    assert "is a valid SAM Template" in result.stdout, output_of(result)


def test_checkov_finds_nothing_and_skips_only_what_is_documented() -> None:
    require(CHECKOV)
    result = run(
        [CHECKOV, "-f", TEMPLATE, "--framework", "cloudformation", "--skip-download", "-o", "json"]
    )
    report = json.loads(result.stdout)
    checks = report["results"]
    failed = [
        f"{c['check_id']} {c['resource']}: {c['check_name']}" for c in checks["failed_checks"]
    ]
    assert not failed, "\n".join(failed) + "\n\n" + output_of(result)
    assert result.returncode == 0, output_of(result)
    assert len(checks["passed_checks"]) > 0
    skipped = {(c["check_id"], c["resource"]) for c in checks["skipped_checks"]}
    assert skipped == EXPECTED_CHECKOV_SKIPS
    undocumented = [
        c["check_id"]
        for c in checks["skipped_checks"]
        if not c["check_result"].get("suppress_comment")
    ]
    assert not undocumented


@pytest.fixture(scope="module")
def transformed() -> dict[str, Any]:
    require(SAM_PYTHON)
    result = run([SAM_PYTHON, "-c", _SAM_TRANSFORM, TEMPLATE])
    assert result.returncode == 0, output_of(result)
    template: dict[str, Any] = json.loads(result.stdout)
    return template


def test_sam_transform_gives_function_roles_only_scoped_statements(
    transformed: dict[str, Any],
) -> None:
    resources = transformed["Resources"]
    for function in (*FUNCTIONS, *API_FUNCTIONS, CHUNK_FUNCTION):
        role = resources[resources[function]["Properties"]["Role"]["Fn::GetAtt"][0]]["Properties"]
        assert set(role["ManagedPolicyArns"]) == SAM_MANAGED_POLICIES
        granted = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
        unscoped = [s for s in granted if s["Resource"] == "*" or "*" in s["Resource"]]
        assert not unscoped, json.dumps(unscoped, indent=2)
        # Function failures after Lambda's retries reach the events dead-letter queue.
        assert {
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]},
            "Effect": "Allow",
        } in granted


def test_sam_transform_wires_each_rule_with_retries_and_dead_letters(
    transformed: dict[str, Any],
) -> None:
    resources = transformed["Resources"]
    rules = {
        k: r["Properties"]
        for k, r in resources.items()
        if r["Type"] == "AWS::Events::Rule"
        and "EventPattern" in r["Properties"]
        and k not in FAILURE_RULES
    }
    # One rule per EventBridgeRule event of a function in template.yaml
    function_events = [
        event
        for resource in load_template(TEMPLATE)["Resources"].values()
        if resource["Type"] == "AWS::Serverless::Function"
        for event in resource["Properties"].get("Events", {}).values()
        if event["Type"] == "EventBridgeRule"
    ]
    assert len(rules) == len(function_events)
    for rule in rules.values():
        (target,) = rule["Targets"]
        assert target["Arn"]["Fn::GetAtt"][0] in FUNCTIONS
        assert target["RetryPolicy"] == {
            "MaximumRetryAttempts": 4,
            "MaximumEventAgeInSeconds": 3600,
        }
        assert target["DeadLetterConfig"] == {
            "Arn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
        }
    # Every rule of the stack (the failure rules and the schedule too) dead-letters to the
    # queue, and the queue policy admits exactly those rules.
    every_rule = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    for rule in every_rule:
        for target in rule["Targets"]:
            assert target["DeadLetterConfig"] == {
                "Arn": {"Fn::GetAtt": ["EventsDeadLetterQueue", "Arn"]}
            }, rule["Name"]
    policy = resources["EventsDeadLetterQueuePolicy"]["Properties"]["PolicyDocument"]
    (statement,) = policy["Statement"]
    allowed = {
        arn["Fn::Sub"].rsplit("/", 1)[1]
        for arn in statement["Condition"]["ArnEquals"]["aws:SourceArn"]
    }
    assert allowed == {rule["Name"]["Fn::Sub"] for rule in every_rule}


def test_sam_transform_puts_every_api_method_behind_the_key_and_usage_plan(
    transformed: dict[str, Any],
) -> None:
    resources = transformed["Resources"]

    def of_type(kind: str) -> dict[str, dict[str, Any]]:
        return {k: r["Properties"] for k, r in resources.items() if r["Type"] == kind}

    # Every method of the REST API requires the key and proxies to the forecast function.
    (api_id,) = of_type("AWS::ApiGateway::RestApi")
    paths = of_type("AWS::ApiGateway::RestApi")[api_id]["Body"]["paths"]
    methods = {(path, verb): spec for path, verbs in paths.items() for verb, spec in verbs.items()}
    assert set(methods) == {
        ("/customers/{customer_id}/forecast", "get"),
        ("/customers/{customer_id}/model", "get"),
    }
    for spec in methods.values():
        assert spec["security"] == [{"api_key": []}]
        integration = spec["x-amazon-apigateway-integration"]
        assert integration["type"] == "aws_proxy"
        assert "ForecastApiFunction" in json.dumps(integration["uri"])
    # One usage plan on the v1 stage, its throttle and quota from the parameters (the
    # transform fills in their defaults), one key.
    defaults = {k: v.get("Default") for k, v in load_template()["Parameters"].items()}
    (plan,) = of_type("AWS::ApiGateway::UsagePlan").values()
    assert plan["Throttle"] == {
        "RateLimit": defaults["ApiThrottleRateLimit"],
        "BurstLimit": defaults["ApiThrottleBurstLimit"],
    }
    assert plan["Quota"] == {"Limit": defaults["ApiQuotaLimit"], "Period": "DAY"}
    assert [s["Stage"] for s in plan["ApiStages"]] == [{"Ref": "ForecastApiv1Stage"}]
    assert list(of_type("AWS::ApiGateway::ApiKey")) == ["ForecastApiApiKey"]
    (link,) = of_type("AWS::ApiGateway::UsagePlanKey").values()
    assert link["KeyId"] == {"Ref": "ForecastApiApiKey"}


def test_sam_transform_schedules_the_cost_report_with_only_unscopable_reads_unscoped(
    transformed: dict[str, Any],
) -> None:
    resources = transformed["Resources"]
    # One schedule rule, on the cost report, from the parameter, with retries
    (schedule,) = (
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::Events::Rule" and "ScheduleExpression" in r["Properties"]
    )
    assert schedule["ScheduleExpression"] == {"Ref": "CostReportSchedule"}
    (target,) = schedule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [COST_FUNCTION, "Arn"]}
    assert target["RetryPolicy"]["MaximumRetryAttempts"] >= 1
    # And its role grants "*" only for the reads IAM cannot scope, writes never
    role_id = resources[COST_FUNCTION]["Properties"]["Role"]["Fn::GetAtt"][0]
    role = resources[role_id]["Properties"]
    assert set(role["ManagedPolicyArns"]) == SAM_MANAGED_POLICIES
    granted = [s for p in role["Policies"] for s in p["PolicyDocument"]["Statement"]]
    unscoped = {
        action
        for s in granted
        if s["Resource"] == "*"
        for action in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert unscoped == COST_UNSCOPABLE_ACTIONS


@pytest.fixture
def repo_copy(tmp_path: Path) -> Iterator[Path]:
    """What `sam build` reads, copied so that nothing lands in the working tree; a
    placeholder handler stands in for any the lead has not written yet."""
    copy = tmp_path / "repo"
    copy.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".aws-sam")
    for name in ("template.yaml", "samconfig.toml"):
        shutil.copy2(REPO_ROOT / name, copy / name)
    for folder in ("functions", "layers"):
        shutil.copytree(REPO_ROOT / folder, copy / folder, ignore=ignore)
    for function_dir in (copy / "functions").iterdir():
        handler = function_dir / "app.py"
        if function_dir.is_dir() and not handler.exists():
            handler.write_text("def lambda_handler(event, context):\n    return None\n")
    yield copy


def test_sam_build_builds_every_function_and_the_layer(repo_copy: Path, tmp_path: Path) -> None:
    require(SAM)
    build = tmp_path / "build"
    result = run(
        [
            SAM,
            "build",
            "--template-file",
            repo_copy / "template.yaml",
            "--base-dir",
            repo_copy,
            "--build-dir",
            build,
            "--cache-dir",
            tmp_path / "cache",
        ],
        cwd=repo_copy,
    )
    assert result.returncode == 0, output_of(result)
    for function in (*FUNCTIONS, *API_FUNCTIONS, COST_FUNCTION, CHUNK_FUNCTION):
        assert (build / function / "app.py").is_file(), output_of(result)
    # The cost report's chart library, built for Lambda's x86_64 Python 3.11
    assert list((build / COST_FUNCTION / "matplotlib").glob("*.cpython-311-x86_64-linux-gnu.so"))
    layer = build / "FleetcastCommonLayer" / "python"
    assert (layer / "fleetcast_contracts" / "ids.py").is_file(), output_of(result)
    assert (layer / "fleetcast_common" / "registry.py").is_file(), output_of(result)
    # The cost watch only in its own function's artifact; the images' model families in none
    assert (build / COST_FUNCTION / "fleetcast_cost" / "report.py").is_file()
    assert (build / COST_FUNCTION / "fleetcast_cost" / "prices.json").is_file()
    assert not (layer / "fleetcast_cost").exists()
    assert not list(build.glob("*/fleetcast_forecasters")) + list(
        layer.glob("fleetcast_forecasters")
    )
    for function in (*FUNCTIONS, *API_FUNCTIONS, CHUNK_FUNCTION):
        assert not (build / function / "fleetcast_cost").exists(), function
    assert (layer / "aws_lambda_powertools").is_dir(), output_of(result)
    # Compiled wheels for the functions' architecture, not whatever this machine runs.
    assert list(layer.glob("pydantic_core/*.cpython-311-x86_64-linux-gnu.so")), output_of(result)
    assert (build / "template.yaml").is_file()
    # Each built function imports from its build folder and the layer's alone (what
    # Lambda puts on sys.path), with the environment the template gives it, and its
    # handler resolves to a function.
    template = LocalTemplate(TEMPLATE, parameter_overrides=LOCAL_PARAMETERS)
    for function in (*FUNCTIONS, *API_FUNCTIONS, COST_FUNCTION, CHUNK_FUNCTION):
        handler = load_template(TEMPLATE)["Resources"][function]["Properties"]["Handler"]
        result = subprocess.run(
            [sys.executable, "-S", "-c", _IMPORT_HANDLER, build / function, layer, handler],
            env={
                **offline_env(),
                **template.function_environment(function),
                "PYTHONNOUSERSITE": "1",
                "MPLCONFIGDIR": str(tmp_path / "matplotlib"),
            },
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert result.returncode == 0, f"{function}:\n{output_of(result)}"
        imported = json.loads(result.stdout.splitlines()[-1])
        assert imported["handler"] == "function", imported
        assert imported["module"] == str(build / function / "app.py"), imported
        assert imported["fleetcast_common"].startswith(str(layer)), imported
        assert imported["powertools"].startswith(str(layer)), imported


# Services the deployer needs beyond the stack's own resources, each for a README step.
DEPLOYER_SERVICES_OUTSIDE_THE_STACK = {"ecr", "ses"}


def test_the_readme_lists_every_service_the_stack_creates_resources_in(
    transformed: dict[str, Any],
) -> None:
    # Issue 41: the list left out Glue and CloudWatch Logs, so a deployer limited to it
    # failed. The services are those of every resource type `sam deploy` creates, after
    # the transform (a Serverless::Function is a Lambda function and an IAM role ...).
    readme = (REPO_ROOT / "README.md").read_text()
    start = readme.index("- **AWS credentials**", readme.index("## Deploy to AWS"))
    bullet = readme[start : readme.index("\n- **", start + 1)]
    in_stack, _, outside = bullet.partition("Outside the stack")
    listed = set(re.findall(r"\(`([a-z0-9-]+)`", in_stack))
    created = {kind.split("::")[1].lower() for kind in _types(transformed)}
    # CloudFormation prefixes: AWS::ApiGateway -> apigateway, AWS::Events -> events ...
    assert listed == created | {"cloudformation"}
    assert set(re.findall(r"\(`([a-z0-9-]+)`", outside)) == DEPLOYER_SERVICES_OUTSIDE_THE_STACK


def _types(template: dict[str, Any]) -> set[str]:
    return {resource["Type"] for resource in template["Resources"].values()}


def test_api_gateway_has_only_the_v1_stage(transformed: dict[str, Any]) -> None:
    # Issue 41: without OpenApiVersion SAM's deployment also made a stage named "Stage",
    # outside the usage plan, that answers 403 to everyone.
    resources = transformed["Resources"]
    stages = [
        r["Properties"]["StageName"]
        for r in resources.values()
        if r["Type"] == "AWS::ApiGateway::Stage"
    ]
    assert stages == ["v1"]
    deployments = [
        r["Properties"] for r in resources.values() if r["Type"] == "AWS::ApiGateway::Deployment"
    ]
    assert deployments
    assert all("StageName" not in deployment for deployment in deployments)
