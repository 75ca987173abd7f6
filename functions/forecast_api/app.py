"""API Gateway (REST, API key required) -> a customer's forecast from the multi-model
endpoint, or its live model from the registry.

Routes, parameters and responses are typed here and validated by Powertools; the OpenAPI
document (docs/openapi.json) is generated from them by ``make openapi``. Errors become
responses in one place, :func:`error_response`.
"""

from __future__ import annotations

import functools
import json
import re
import time
import warnings
from typing import Annotated, Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response, content_types
from aws_lambda_powertools.event_handler.middlewares import NextMiddleware
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.models import (
    APIKey,
    APIKeyIn,
    Server,
    ServerVariable,
)
from aws_lambda_powertools.event_handler.openapi.params import Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, Field

from fleetcast_common.aws import dynamodb_table
from fleetcast_common.forecast_endpoint import ForecastEndpoint, runtime_client
from fleetcast_common.forecasting import (
    CLIPPING_NOTE,
    DEFAULT_PERIOD,
    QUANTILES_EXAMPLE,
    QUANTILES_PARAMETER,
    QUANTILES_SCHEMA,
    CustomerForecast,
    CustomerModel,
    EndpointFailedError,
    EndpointUnavailableError,
    ForecastApiSettings,
    ForecastError,
    InvalidRequestError,
    LiveModelCache,
    NoEndpointError,
    UnknownCustomerError,
    customer_forecast,
    customer_model,
    parse_quantiles,
)
from fleetcast_common.registry import ModelRegistry, RegistryUnavailableError
from fleetcast_common.settings import read_on_first_use
from fleetcast_contracts.frequency import period_limits
from fleetcast_contracts.ids import (
    CUSTOMER_ID_PATTERN,
    InvalidCustomerIdError,
    is_valid_customer_id,
)
from fleetcast_contracts.inference import MAX_PERIOD, MIN_PERIOD
from fleetcast_contracts.quantiles import MAX_QUANTILES

# An error response publishes no metric; that is expected, not worth a warning each time.
warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)

logger = Logger()
tracer = Tracer()
metrics = Metrics()
settings = read_on_first_use(ForecastApiSettings)


app = APIGatewayRestResolver(enable_validation=True)
app.configure_openapi(
    title="fleetcast forecast API",
    version="1.0.0",
    description=(
        "Per-customer forecasts from fleetcast's multi-model endpoint. Send the API key in "
        "the x-api-key header; each key is throttled and has a daily quota (usage plan)."
    ),
    servers=[
        Server(
            url="https://{api_id}.execute-api.{region}.amazonaws.com/v1",
            description="Deployed stack (Outputs: ForecastApiUrl)",
            variables={
                "api_id": ServerVariable(default="abcdef1234"),
                "region": ServerVariable(default="us-east-1"),
            },
        ),
        Server(url="http://127.0.0.1:3000/v1", description="Local stack (fleetcast up)"),
    ],
    security_schemes={
        "apiKey": APIKey.model_validate({"name": "x-api-key", "in": APIKeyIn.header})
    },
    security=[{"apiKey": []}],
)


class ErrorBody(BaseModel):
    error: str = Field(description="What kind of error, e.g. UnknownCustomer")
    message: str = Field(description="What went wrong and what to do about it")


class GatewayErrorBody(BaseModel):
    message: str = Field(description="API Gateway's own message, e.g. Forbidden")


# domain error -> (status, error code)
ERROR_STATUS: dict[type[Exception], tuple[int, str]] = {
    InvalidRequestError: (400, "InvalidRequest"),
    UnknownCustomerError: (404, "UnknownCustomer"),
    EndpointFailedError: (502, "EndpointFailed"),
    EndpointUnavailableError: (503, "EndpointUnavailable"),
    # No Retry-After: the endpoint comes with a deploy, not in seconds.
    NoEndpointError: (503, "NoEndpoint"),
    RegistryUnavailableError: (503, "RegistryUnavailable"),
}


def _documented(success: str, *statuses: int) -> dict[int, OpenAPIResponse]:
    """The route's responses: 200 (its return type) and the errors it can answer."""
    described = {
        400: "Bad customer id, period or query parameter",
        403: (
            "Missing or wrong x-api-key (API Gateway: Forbidden), or a path that none of "
            "the API's routes matches, such as a customer id with a '/' (API Gateway: "
            "Missing Authentication Token; x-amzn-ErrorType says which)"
        ),
        404: "The customer has no live model",
        413: (
            "The request line and headers are over API Gateway's 10,240 bytes (API Gateway: "
            "Request Too Long; a query or path this long is none this API takes)"
        ),
        429: "Throttled or over the daily quota (API Gateway)",
        502: "The endpoint failed to forecast",
        503: (
            "The endpoint or the model registry is busy or unreachable; retry after "
            "Retry-After seconds. NoEndpoint (no Retry-After): the stack has no endpoint "
            "yet (deployed without an inference image)"
        ),
    }
    responses: dict[int, OpenAPIResponse] = {200: {"description": success}}
    for status in statuses:
        model = GatewayErrorBody if status in (403, 413, 429) else ErrorBody
        responses[status] = {
            "description": described[status],
            "content": {"application/json": {"model": model}},
        }
    if 503 in responses:
        responses[503]["headers"] = {
            "Retry-After": {"description": "Seconds to wait", "schema": {"type": "integer"}}
        }
    return responses


CustomerId = Annotated[
    str,
    Path(
        pattern=CUSTOMER_ID_PATTERN,
        description="1 to 64 letters, digits, '_' or '-', starting with a letter or digit",
        examples=["42"],
    ),
]
Period = Annotated[
    int,
    Query(
        ge=MIN_PERIOD,
        le=MAX_PERIOD,
        description=(
            "How many periods of the customer's model to forecast, in its own unit: days of "
            "a daily model, hours of an hourly one (GET /customers/{customer_id}/model says "
            f"which). At most the model's max_period: {period_limits()}"
        ),
    ),
]
Quantiles = Annotated[
    str | None,
    Query(
        description=(
            f"Comma-separated quantiles to add to each point, each between 0 and 1 "
            f"(exclusive), at most {MAX_QUANTILES} of them; sorted and repeats dropped. "
            "Drawn from the same seeded uncertainty samples as the interval."
        ),
        examples=[QUANTILES_EXAMPLE],
    ),
]


@functools.cache
def _registry() -> ModelRegistry:
    return ModelRegistry(dynamodb_table(settings().registry_table))


@functools.cache
def _live_models() -> LiveModelCache:
    """The forecast route's lookups, remembered briefly by this warm environment; the
    model route reads the registry every time."""
    return LiveModelCache(_registry(), settings().live_model_cache_seconds)


@functools.cache
def _endpoint() -> ForecastEndpoint:
    return ForecastEndpoint(runtime_client(), settings().endpoint_name)


def _only_query_parameters(*known: str) -> Any:
    """Route middleware: a query parameter the route does not take is a mistake to report,
    not to ignore (``?periods=30`` would otherwise quietly forecast 7 days)."""

    def middleware(router: APIGatewayRestResolver, next_middleware: NextMiddleware) -> Response:
        unknown = sorted(set(router.current_event.query_string_parameters or {}) - set(known))
        if unknown:
            takes = f"takes only {', '.join(map(repr, known))}" if known else "takes none"
            raise InvalidRequestError(
                f"unknown query parameter{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(map(repr, unknown))}: this route {takes}"
            )
        return next_middleware(router)

    return middleware


@app.get(
    "/customers/<customer_id>/forecast",
    summary="A customer's forecast",
    description=(
        "The next `period` periods after the customer's history, from its live model, in "
        "the model's own unit: days of a daily model, hours of an hourly one (the answer's "
        "`frequency` and `period_unit` say which; a period past the model's longest "
        f"forecast, {period_limits()}, is refused). Its family's point forecast and 80 % "
        "interval (the answer's `model_kind` names the family), with the model's version, "
        "training time and last day of data; with `quantiles`, those quantiles of the same "
        "uncertainty samples at each point. The same request always gets the same answer. "
        "A warm function remembers a customer's live model for `LIVE_MODEL_CACHE_SECONDS` "
        "(30 s by default), so for that long after a promotion it may answer from the "
        "previous model (named in the answer); `Cache-Control: no-cache` asks for the model "
        "live now. " + CLIPPING_NOTE
    ),
    tags=["forecasts"],
    responses=_documented("The forecast", 400, 403, 404, 413, 429, 502, 503),
    middlewares=[_only_query_parameters("period", QUANTILES_PARAMETER)],
)
def get_forecast(
    customer_id: CustomerId, period: Period = DEFAULT_PERIOD, quantiles: Quantiles = None
) -> CustomerForecast:
    logger.append_keys(customer_id=customer_id, period=period)
    asked = parse_quantiles(quantiles) if quantiles is not None else ()
    if asked:
        logger.append_keys(quantiles=asked)
    live_models = _live_models()
    if _no_cache(app.current_event.get_header_value("Cache-Control", default_value="")):
        # The client asks for the model live now (fleetcast's CLI always does): not one
        # this warm environment read before a promotion.
        live_models.forget(customer_id)
    started = time.perf_counter()
    forecast = customer_forecast(customer_id, period, live_models, _endpoint(), asked)
    metrics.add_metric(
        name="ForecastLatency",
        unit=MetricUnit.Milliseconds,
        value=(time.perf_counter() - started) * 1000,
    )
    return forecast


def _no_cache(cache_control: str | None) -> bool:
    """Whether a request's Cache-Control asks for no cached answer (RFC 9111: ``no-cache``
    among its directives)."""
    directives = (part.strip().lower() for part in (cache_control or "").split(","))
    return "no-cache" in directives


@app.get(
    "/customers/<customer_id>/model",
    summary="A customer's live model",
    description="The model the forecast comes from: version, run, TargetModel, training "
    "time, data range, frequency (the unit of its periods) and longest forecast, and "
    "holdout metrics.",
    tags=["models"],
    responses=_documented("The live model", 400, 403, 404, 413, 429, 503),
    middlewares=[_only_query_parameters()],
)
def get_model(customer_id: CustomerId) -> CustomerModel:
    logger.append_keys(customer_id=customer_id)
    return customer_model(customer_id, _registry())


# ---------------------------------------------------------------- errors, in one place


@app.exception_handler([ForecastError, RegistryUnavailableError, RequestValidationError])
def error_response(error: Exception) -> Response[str]:
    if isinstance(error, RequestValidationError):
        status, code, message = 400, "InvalidRequest", _describe(error.errors())
    else:
        status, code = next(v for k, v in ERROR_STATUS.items() if isinstance(error, k))
        message = str(error)
    headers: dict[str, str] = {}
    if isinstance(error, (EndpointUnavailableError, RegistryUnavailableError)):
        headers["Retry-After"] = str(error.retry_after_seconds)
    log = logger.warning if status >= 500 else logger.info
    log("request failed", extra={"status": status, "error": code, "reason": message})
    return _json(status, ErrorBody(error=code, message=message), headers)


@app.not_found
def no_such_route(error: Exception) -> Response[str]:
    # API Gateway matched one of the template's routes, whose {customer_id} takes any
    # segment; Powertools' route patterns take fewer characters (no newline, no CJK ...),
    # so such an id ends here, and is the caller's mistake to report, not a missing route.
    customer_id = (app.current_event.path_parameters or {}).get("customer_id")
    if customer_id is not None and not is_valid_customer_id(customer_id):
        return error_response(InvalidRequestError(str(InvalidCustomerIdError(customer_id))))
    # API Gateway only forwards the template's routes; this answers direct invocations.
    path = app.current_event.path
    body = ErrorBody(error="NotFound", message=f"no route for {path}")
    return _json(404, body, {})


@app.exception_handler(Exception)
def unexpected_error(error: Exception) -> Response[str]:
    logger.exception("unexpected error")
    body = ErrorBody(
        error="InternalError",
        message="unexpected error; the function's log has the details of this request",
    )
    return _json(500, body, {})


def _json(status: int, body: BaseModel, headers: dict[str, str]) -> Response[str]:
    return Response(
        status_code=status,
        content_type=content_types.APPLICATION_JSON,
        body=body.model_dump_json(),
        headers=headers,
    )


def _describe(errors: Any) -> str:
    """Pydantic's validation errors as one sentence per parameter."""
    problems = []
    for problem in errors:
        location = problem.get("loc", ())
        name = str(location[-1]) if location else "request"
        if name == "customer_id":
            problems.append(str(InvalidCustomerIdError(problem.get("input"))))
        elif name == "period":
            problems.append(
                f"period must be a whole number of the customer's model's periods from "
                f"{MIN_PERIOD} to its longest forecast ({period_limits()}), "
                f"not {problem.get('input')!r}"
            )
        elif name == QUANTILES_PARAMETER:
            problems.append(
                f"{QUANTILES_PARAMETER} must be given once, as comma-separated numbers "
                f"between 0 and 1, e.g. {QUANTILES_PARAMETER}={QUANTILES_EXAMPLE}"
            )
        else:
            where = f"{location[0]} parameter " if len(location) > 1 else ""
            problems.append(f"{where}{name!r}: {problem.get('msg', 'invalid')}")
    return "; ".join(problems) or "invalid request"


def openapi_document() -> str:
    """The API's OpenAPI document (``make openapi`` writes it to docs/openapi.json).

    Powertools documents request validation errors as 422; this API answers them 400
    (:func:`error_response`), so the 422 responses and the schemas only they use go.
    The handler takes ``quantiles`` as text and reads it itself (:func:`parse_quantiles`);
    the document says what that accepts (``QUANTILES_SCHEMA``): an array of numbers in
    (0, 1), comma-separated, which Powertools has no way to declare.
    """
    document = json.loads(app.get_openapi_json_schema())
    for operations in document["paths"].values():
        for operation in operations.values():
            operation["responses"].pop("422", None)
            for parameter in operation.get("parameters", []):
                if parameter["name"] == QUANTILES_PARAMETER:
                    described = {k: parameter["schema"][k] for k in ("title", "description")}
                    parameter.update(QUANTILES_SCHEMA)
                    parameter["schema"] = described | QUANTILES_SCHEMA["schema"]
    schemas = document["components"]["schemas"]
    used: set[str] = set()
    pending = [document["paths"]]
    while pending:
        text = json.dumps(pending.pop())
        for name in re.findall(r'"#/components/schemas/([^"]+)"', text):
            if name not in used:
                used.add(name)
                pending.append(schemas[name])
    document["components"]["schemas"] = {k: v for k, v in schemas.items() if k in used}
    return json.dumps(document, indent=2) + "\n"


@logger.inject_lambda_context(
    correlation_id_path=correlation_paths.API_GATEWAY_REST, clear_state=True
)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
