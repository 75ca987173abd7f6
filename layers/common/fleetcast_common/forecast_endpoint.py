"""The multi-model endpoint, seen from the forecast API: the only module that calls the
SageMaker runtime.

SageMaker's errors become the domain's by their error code (never their message):
a model that is loading, a throttled or unavailable endpoint, or a connection that
fails are worth a retry (:class:`EndpointUnavailableError`); anything else the endpoint
answers is a failure to report (:class:`EndpointFailedError`).
"""

from __future__ import annotations

import functools
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)
from pydantic import ValidationError

from fleetcast_common.forecasting import (
    EndpointFailedError,
    EndpointUnavailableError,
    NoEndpointError,
)
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.inference import EndpointForecast, InvokeRequest

# Few, quick retries inside the function's time: API Gateway gives up on a REST API's
# integration after 29 s ("Integration timeout: 50 milliseconds - 29 seconds", API Gateway
# quotas), and the caller is told when to come back (Retry-After) rather than kept
# waiting. Worst case two attempts of 1 s to connect and 10 s to read, and the standard
# mode's backoff between them (at most 1 s before the first retry: rand(0,1) x 2**0 s):
# 23 s, leaving the function's 29 s room for the registry lookup and the answer
# (tests/unit/test_timeouts_and_limits.py). A model's own answer comes in well under a
# second; one that has not answered in 10 s would not answer within API Gateway's time.
RUNTIME_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 2},
    connect_timeout=1,
    read_timeout=10,
    max_pool_connections=16,
)

# Seconds a caller should wait before retrying, by why the endpoint could not answer.
RETRY_AFTER_SECONDS = {
    # A multi-model endpoint still downloading or loading the target model.
    "ModelNotReadyException": 1,
    "ThrottlingException": 1,
    "ServiceUnavailable": 5,
    "InternalFailure": 5,
    "InternalDependencyException": 5,
}
UNREACHABLE_RETRY_AFTER_SECONDS = 10
_SHOWN_MESSAGE_CHARS = 300
_UNREACHABLE = (
    EndpointConnectionError,
    ConnectionClosedError,
    ConnectTimeoutError,
    ReadTimeoutError,
)


@functools.cache
def runtime_client() -> Any:
    """A ``sagemaker-runtime`` client, created on first use (see :mod:`fleetcast_common.aws`)."""
    return boto3.session.Session().client("sagemaker-runtime", config=RUNTIME_CONFIG)


class ForecastEndpoint:
    def __init__(self, runtime: Any, endpoint_name: str) -> None:
        self._runtime = runtime
        self.endpoint_name = endpoint_name

    def forecast(
        self, target_model: str, period: int, quantiles: tuple[float, ...] = ()
    ) -> EndpointForecast:
        """The model's forecast for the next ``period`` periods, with ``quantiles`` when
        any are given (the body without them is the one the container always took)."""
        if not self.endpoint_name:
            raise NoEndpointError()
        request = InvokeRequest(period=period, quantiles=quantiles)
        try:
            response = self._runtime.invoke_endpoint(
                EndpointName=self.endpoint_name,
                TargetModel=target_model,
                ContentType="application/json",
                Accept="application/json",
                Body=request.body(),
            )
            body = response["Body"].read()
        except ClientError as error:
            raise _domain_error(error, self.endpoint_name) from error
        except _UNREACHABLE as error:
            raise EndpointUnavailableError(
                f"the forecast endpoint {self.endpoint_name} cannot be reached; try again shortly",
                UNREACHABLE_RETRY_AFTER_SECONDS,
            ) from error
        try:
            return EndpointForecast.model_validate_json(body)
        except ValidationError as error:
            raise EndpointFailedError(
                f"the forecast endpoint {self.endpoint_name} answered with something that is "
                f"not a forecast ({error.error_count()} problems)"
            ) from error


def _domain_error(error: ClientError, endpoint_name: str) -> Exception:
    code = error_code(error) or "Unknown"
    if code in RETRY_AFTER_SECONDS:
        return EndpointUnavailableError(
            f"the forecast endpoint {endpoint_name} is not ready ({code}); try again shortly",
            RETRY_AFTER_SECONDS[code],
        )
    if code == "ModelError":
        status = error.response.get("OriginalStatusCode", "?")
        original = str(error.response.get("OriginalMessage", ""))[:_SHOWN_MESSAGE_CHARS]
        return EndpointFailedError(
            f"the forecast endpoint's model failed (status {status}): {original}".rstrip(": ")
        )
    # ValidationError and the rest: a missing endpoint or model archive, a role that
    # cannot read it. The deployment needs fixing; the caller cannot.
    return EndpointFailedError(
        f"the forecast endpoint {endpoint_name} refused the request ({code})"
    )
