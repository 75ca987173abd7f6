"""The forecast API handler as tests load it: with the environment template.yaml gives it,
fed the sample API Gateway events from events/ (changed where a test needs another
customer, query or path)."""

from __future__ import annotations

import copy
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any

from function_helpers import load_function
from openapi_schema_validator import OAS31Validator, oas31_format_checker

from fleetcast.embedded.lambdas import LambdaContext
from fleetcast.embedded.template import LocalTemplate

REPO_ROOT = Path(__file__).resolve().parents[1]
FUNCTION = "ForecastApiFunction"


def template_environment() -> dict[str, str]:
    return LocalTemplate(REPO_ROOT / "template.yaml").function_environment(FUNCTION)


def load_forecast_api(module_name: str) -> Any:
    """Import functions/forecast_api/app.py under ``module_name`` and read its settings
    from the template's environment; the process environment is left as it was."""
    if module_name in sys.modules:
        return sys.modules[module_name]
    saved = dict(os.environ)
    os.environ.update(
        {
            **template_environment(),
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "WARNING",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    try:
        module = load_function("forecast_api", module_name)
        module.settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return sys.modules[module_name]


def sample(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((REPO_ROOT / "events" / name).read_text())
    return loaded


def api_event(
    name: str = "api_forecast.json",
    customer_id: str | None = None,
    query: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A sample event for another customer and/or query string, changed consistently in
    every field API Gateway fills from them."""
    event = copy.deepcopy(sample(name))
    if customer_id is not None:
        suffix = event["resource"].rsplit("}", 1)[1]
        event["path"] = f"/customers/{customer_id}{suffix}"
        event["pathParameters"] = {"customer_id": customer_id}
        event["requestContext"]["path"] = f"/{event['requestContext']['stage']}{event['path']}"
    if query is not None:
        event["queryStringParameters"] = query or None
        event["multiValueQueryStringParameters"] = {k: [v] for k, v in query.items()} or None
    return event


def context() -> LambdaContext:
    return LambdaContext(
        function_name="fleetcast-ForecastApiFunction",
        memory_limit_in_mb=512,
        aws_request_id=str(uuid.uuid4()),
        invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:fleetcast-ForecastApiFunction",
    )


def call(module: Any, event: dict[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Invoke the handler; return status, headers (single-valued) and the JSON body."""
    result = module.lambda_handler(event, context())
    headers = {k: v[-1] for k, v in (result.get("multiValueHeaders") or {}).items()}
    headers.update(result.get("headers") or {})
    return result["statusCode"], headers, json.loads(result["body"])


def document() -> dict[str, Any]:
    """docs/openapi.json as committed (a unit test keeps it what the code generates)."""
    loaded: dict[str, Any] = json.loads((REPO_ROOT / "docs" / "openapi.json").read_text())
    return loaded


def violations(route: str, status: int, body: dict[str, Any]) -> list[str]:
    """Where ``body``, answered with ``status`` by ``GET route`` (a path of the document,
    such as ``/customers/{customer_id}/model``), is not what docs/openapi.json says: its
    response schema, formats included (a ``date-time`` is RFC 3339, with its offset), as a
    client generated from the document reads it."""
    spec = document()
    response = spec["paths"][route]["get"]["responses"][str(status)]
    schema = {**response["content"]["application/json"]["schema"], "components": spec["components"]}
    # (A format the checker does not know is skipped without a word: not these.)
    assert {"date", "date-time"} <= set(oas31_format_checker.checkers)
    validator = OAS31Validator(schema, format_checker=oas31_format_checker)
    return [f"{list(error.path)}: {error.message}" for error in validator.iter_errors(body)]
