"""The local stack's template parameters, set as ``sam deploy`` takes them and checked as
CloudFormation checks them.

``fleetcast up --parameter-overrides Key=Value ...`` and ``--config-env NAME`` (that
environment's ``parameter_overrides`` in samconfig.toml) give the same values a deploy
would; each is validated against the template's own ``AllowedValues``,
``AllowedPattern``, ``MinLength``/``MaxLength`` and ``MinValue``/``MaxValue`` before the
stack starts, with CloudFormation's wording ("Parameters: [X] do not exist in the
template", "Parameter 'X' must be one of AllowedValues", "failed to satisfy constraint:"
and the parameter's ``ConstraintDescription``), so a value the local stack accepts is one
a deploy accepts.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from fleetcast.embedded.template import ACCOUNT_ID, REGION

# ECR URIs in this account and region: image parameters refuse anything else (a deploy
# would), and the local stack runs the Dockerfile a URI's repository names
# (sagemaker_jobs/containers.py: fleetcast-<family> -> containers/<family>).
LOCAL_IMAGE_TAG = "local"
LOCAL_IMAGE_PARAMETERS = {
    parameter: f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/fleetcast-{family}:{LOCAL_IMAGE_TAG}"
    for parameter, family in (
        ("ProcessingImageUri", "processing"),
        ("TrainingImageUri", "training"),
        ("InferenceImageUri", "inference"),
    )
}


class ParameterError(ValueError):
    """Values CloudFormation would refuse; the message lists every problem."""


def parse_overrides(entries: Iterable[str]) -> dict[str, str]:
    """``Key=Value`` entries (or ``ParameterKey=K,ParameterValue=V``, the other form
    ``sam deploy --parameter-overrides`` takes); a later entry of a key wins."""
    values: dict[str, str] = {}
    for entry in entries:
        long_form = re.fullmatch(r"ParameterKey=([^,]+),ParameterValue=(.*)", entry, re.S)
        if long_form:
            values[long_form.group(1)] = long_form.group(2)
            continue
        key, equals, value = entry.partition("=")
        if not equals or not key:
            raise ParameterError(f"{entry!r} is not Key=Value")
        values[key] = value
    return values


def samconfig_overrides(samconfig: Path, config_env: str) -> dict[str, str]:
    """The ``parameter_overrides`` of ``[<config_env>.deploy.parameters]``: a list of
    ``Key=Value`` entries, or one string of them as ``sam deploy --guided`` may write it
    (shell-quoted, so a value may hold spaces)."""
    document = tomllib.loads(samconfig.read_text())
    if config_env not in document:
        raise ParameterError(
            f"{samconfig.name} has no environment {config_env!r} "
            f"(it has {', '.join(sorted(k for k in document if k != 'version'))})"
        )
    overrides: Any = (
        document[config_env].get("deploy", {}).get("parameters", {}).get("parameter_overrides", [])
    )
    entries = shlex.split(overrides) if isinstance(overrides, str) else [str(e) for e in overrides]
    return parse_overrides(entries)


def validate(declared: Mapping[str, Mapping[str, Any]], values: Mapping[str, str]) -> None:
    """Raise :class:`ParameterError` for what CloudFormation would refuse: a parameter
    the template does not declare, one without a value, a value outside its constraints."""
    problems = []
    unknown = sorted(set(values) - set(declared))
    if unknown:
        problems.append(f"Parameters: [{', '.join(unknown)}] do not exist in the template")
    missing = sorted(
        name for name, spec in declared.items() if "Default" not in spec and name not in values
    )
    if missing:
        problems.append(f"Parameters: [{', '.join(missing)}] must have values")
    for name, spec in declared.items():
        value = values.get(name, spec.get("Default"))
        if value is not None:
            problems += constraint_problems(name, spec, str(value))
    if problems:
        raise ParameterError("; ".join(problems))


def constraint_problems(name: str, spec: Mapping[str, Any], value: str) -> list[str]:
    """Why ``value`` breaks the parameter's constraints (none: an empty list).

    CloudFormation's rules (Parameters section of the template anatomy): AllowedPattern,
    MinLength and MaxLength apply to String parameters, MinValue and MaxValue to Number
    ones, whose value must be a number; AllowedValues to both, compared as text; the
    pattern must match the whole value.
    """
    said = spec.get("ConstraintDescription")

    def refused(default: str) -> str:
        return f"Parameter '{name}' failed to satisfy constraint: {said or default}"

    allowed = [str(v) for v in spec.get("AllowedValues", [])]
    if allowed and value not in allowed:
        # CloudFormation's words, then what it does not say: which values are allowed.
        return [
            refused(f"Parameter '{name}' must be one of AllowedValues")
            + f" (allowed: {', '.join(allowed)}; given: {value!r})"
        ]
    kind = spec.get("Type", "String")
    if kind == "Number":
        try:
            number = float(value)
        except ValueError:
            return [f"Parameter '{name}' must be a number"]
        if "MinValue" in spec and number < float(spec["MinValue"]):
            return [
                refused(f"Parameter '{name}' must be a number not less than {spec['MinValue']}")
            ]
        if "MaxValue" in spec and number > float(spec["MaxValue"]):
            return [
                refused(f"Parameter '{name}' must be a number not greater than {spec['MaxValue']}")
            ]
        return []
    if "AllowedPattern" in spec and re.fullmatch(str(spec["AllowedPattern"]), value) is None:
        return [
            refused(f"Malformed input-Parameter {name} must match pattern {spec['AllowedPattern']}")
        ]
    if "MinLength" in spec and len(value) < int(spec["MinLength"]):
        return [refused(f"Parameter '{name}' must contain at least {spec['MinLength']} characters")]
    if "MaxLength" in spec and len(value) > int(spec["MaxLength"]):
        return [refused(f"Parameter '{name}' must contain at most {spec['MaxLength']} characters")]
    return []
