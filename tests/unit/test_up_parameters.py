"""``fleetcast up --parameter-overrides`` and ``--config-env``: every template parameter
settable on the local stack as ``sam deploy`` takes it, and refused where CloudFormation
would refuse it (issue 27, "What to build" 3). Nothing starts: the values are checked
when the stack is made, before any port is bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from template_helpers import REPO_ROOT

from fleetcast.cli import build_parser, main
from fleetcast.embedded.parameters import (
    LOCAL_IMAGE_PARAMETERS,
    ParameterError,
    parse_overrides,
    samconfig_overrides,
)
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast.up_cli import up_parameters


def _up(*arguments: str) -> dict[str, str]:
    return up_parameters(build_parser().parse_args(["up", *arguments]))


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        (
            "ModelFrequency=W",
            "Parameter 'ModelFrequency' must be one of AllowedValues (allowed: D, H; given: 'W')",
        ),
        ("HoldoutDays=0", "Parameter 'HoldoutDays' failed to satisfy constraint: Parameter "),
        ("HoldoutDays=week", "Parameter 'HoldoutDays' must be a number"),
        (
            "DefaultHolidayCountry=usa",
            "Parameter 'DefaultHolidayCountry' failed to satisfy constraint: an ISO 3166",
        ),
        (
            "TrainingImageUri=fleetcast-training:latest",
            "Parameter 'TrainingImageUri' failed to satisfy constraint: must be an ECR image",
        ),
        ("Frequency=H", "Parameters: [Frequency] do not exist in the template"),
        ("ModelFrequency", "'ModelFrequency' is not Key=Value"),
    ],
    ids=["allowed values", "min", "number", "pattern", "ecr", "unknown", "no value"],
)
def test_a_value_a_deploy_would_refuse_does_not_start_the_stack(
    override: str, complaint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the stack is started with it
    code = main(["--state-dir", str(tmp_path), "up", "--parameter-overrides", override])
    # Then it is refused in CloudFormation's words, and nothing was started
    assert code == 2
    said = " ".join(capsys.readouterr().err.split())
    assert complaint in said and "the stack was not started" in said
    assert not (tmp_path / "stack.json").exists()


def test_overrides_take_both_of_sams_forms_and_the_later_wins() -> None:
    assert parse_overrides(
        ["ModelFrequency=D", "ParameterKey=ModelFrequency,ParameterValue=H", "LogLevel=INFO"]
    ) == {"ModelFrequency": "H", "LogLevel": "INFO"}
    # A value may itself hold '=' (a cron, an ARN's query): only the first one splits
    assert parse_overrides(["CostReportSchedule=cron(0 7 * * ? *)", "A=b=c"])["A"] == "b=c"


def test_a_config_env_is_read_from_samconfig_and_the_command_line_goes_on_top() -> None:
    prod = samconfig_overrides(REPO_ROOT / "samconfig.toml", "prod")
    # Given prod's environment, with one of its values overridden
    values = _up("--config-env", "prod", "--parameter-overrides", "LogLevel=DEBUG")
    # Then it is prod's, but for what the command line says
    assert values == {**prod, "LogLevel": "DEBUG"}
    assert values["TrainingInstanceCount"] == prod["TrainingInstanceCount"] == "10"
    # And --instances, when given, is the last word on the instances
    assert _up("--config-env", "prod", "--instances", "3")["TrainingInstanceCount"] == "3"
    assert _up()["TrainingInstanceCount"] == "2"


def test_a_config_env_samconfig_does_not_have_is_refused() -> None:
    with pytest.raises(ParameterError, match=r"no environment 'staging' .*default, prod"):
        _up("--config-env", "staging")


@pytest.mark.parametrize("environment", ["default", "prod"])
def test_every_samconfig_environment_starts_a_local_stack(environment: str) -> None:
    # The stack is made (its template read and its values checked), not started
    stack = EmbeddedStack(parameters=_up("--config-env", environment))
    values = stack.template.parameters
    assert (
        values["JobNamePrefix"]
        == samconfig_overrides(REPO_ROOT / "samconfig.toml", environment)["JobNamePrefix"]
    )
    # The images it runs are the local ones, in ECR's form, as a deploy's would be
    assert {k: values[k] for k in LOCAL_IMAGE_PARAMETERS} == LOCAL_IMAGE_PARAMETERS


def test_the_stack_itself_refuses_what_cloudformation_would() -> None:
    with pytest.raises(ParameterError, match="'ForecastExportDays' failed to satisfy"):
        EmbeddedStack(parameters={"ForecastExportDays": "366"})
