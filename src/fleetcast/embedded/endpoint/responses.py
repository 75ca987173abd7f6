"""The SageMaker runtime API on the local stack's gateway: parse InvokeEndpoint, call the
endpoint, render its answer or its error as AWS does."""

from __future__ import annotations

import http.client
import json
import logging
import re
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import unquote

from fleetcast.embedded.endpoint.exceptions import RuntimeServiceError, ValidationError
from fleetcast.embedded.endpoint.models import LocalEndpoint

log = logging.getLogger("fleetcast.embedded.endpoint")

INVOCATIONS = re.compile(r"^/endpoints/(?P<name>[^/]+)/invocations$")


StartResponse = Callable[..., Any]


class EndpointRuntime:
    """``POST /endpoints/{EndpointName}/invocations`` for the local stack's gateway."""

    def __init__(
        self,
        sagemaker: Any,
        account_id: str,
        region: str,
        existence_ttl: float = 2.0,
    ) -> None:
        self._sagemaker = sagemaker
        self.account_id = account_id
        self.region = region
        self.endpoints: dict[str, LocalEndpoint] = {}
        self._existence_ttl = existence_ttl
        self._seen: dict[str, float] = {}

    def add(self, endpoint: LocalEndpoint) -> None:
        self.endpoints[endpoint.name] = endpoint

    @staticmethod
    def matches(environ: dict[str, Any]) -> bool:
        return environ.get("REQUEST_METHOD") == "POST" and bool(
            INVOCATIONS.match(environ.get("PATH_INFO", ""))
        )

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request_id = str(uuid.uuid4())
        try:
            match = INVOCATIONS.match(environ.get("PATH_INFO", ""))
            assert match is not None
            endpoint = self._endpoint(unquote(match["name"]))
            target_model = environ.get("HTTP_X_AMZN_SAGEMAKER_TARGET_MODEL")
            if not target_model:
                raise ValidationError(
                    f"Request {request_id} is missing a target model header: {endpoint.name} is "
                    "a multi-model endpoint; pass TargetModel."
                )
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(length) if length else b""
            answer = endpoint.invoke(
                target_model, body, environ.get("CONTENT_TYPE"), environ.get("HTTP_ACCEPT")
            )
        except RuntimeServiceError as error:
            log.info("InvokeEndpoint %s: %s", error.code, error.message)
            payload = json.dumps({"message": error.message, **error.fields}).encode()
            start_response(
                f"{error.status} {http.client.responses.get(error.status, 'Error')}",
                [
                    ("Content-Type", "application/json"),
                    ("Content-Length", str(len(payload))),
                    ("x-amzn-ErrorType", error.code),
                    ("x-amzn-RequestId", request_id),
                ],
            )
            return [payload]
        start_response(
            "200 OK",
            [
                ("Content-Type", answer.content_type),
                ("Content-Length", str(len(answer.body))),
                ("x-Amzn-Invoked-Production-Variant", endpoint.variant_name),
                ("x-amzn-RequestId", request_id),
            ],
        )
        return [answer.body]

    def _endpoint(self, name: str) -> LocalEndpoint:
        endpoint = self.endpoints.get(name)
        if endpoint is None or not self._exists(name):
            raise ValidationError(f"Endpoint {name} of account {self.account_id} not found.")
        return endpoint

    def _exists(self, name: str) -> bool:
        """Whether the control plane (moto) still has the endpoint: a deleted one is gone."""
        seen = self._seen.get(name)
        if seen is not None and time.monotonic() - seen < self._existence_ttl:
            return True
        try:
            self._sagemaker.describe_endpoint(EndpointName=name)
        except Exception as error:
            if getattr(error, "response", {}).get("Error", {}).get("Code") == "ValidationException":
                self._seen.pop(name, None)
                return False
            raise
        self._seen[name] = time.monotonic()
        return True
