"""A REST API stage's answers: API Gateway's checks in its order, then the function's
proxy event (payload format 1.0) and its answer.
"""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from fleetcast.embedded.api.models import ApiKeys, UsagePlan
from fleetcast.embedded.api.server import ApiServer, GatewayAnswer, gateway_error, handler_for
from fleetcast.embedded.api.urls import ApiRoute, resource_path_of
from fleetcast.embedded.gateway import ServingThread, bind_preferred
from fleetcast.embedded.info import DEFAULT_API_PORT
from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.template import ACCOUNT_ID, REGION, LocalTemplate

log = logging.getLogger("fleetcast.embedded.api")

HOST = "127.0.0.1"
DEFAULT_PORT = DEFAULT_API_PORT
API_KEY_HEADER = "x-api-key"


class LocalRestApi:
    """One REST API stage: routes, keys and usage plan, in front of the functions."""

    def __init__(
        self,
        name: str,
        api_id: str,
        stage: str,
        routes: list[ApiRoute],
        keys: ApiKeys,
        usage_plan: UsagePlan | None,
        port: int | None = None,
    ) -> None:
        """``port`` None: 3000, or any free port when another program has it."""
        self.name = name
        self.api_id = api_id
        self.stage = stage
        self.routes = routes
        self.keys = keys
        self.usage_plan = usage_plan
        self._server, self.port_notice = bind_preferred(
            port,
            DEFAULT_PORT,
            lambda bound: ApiServer((HOST, bound), handler_for(self.handle)),
            f"the API {name}",
        )
        self._serving = ServingThread(self._server, f"api-{name}")

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/{self.stage}"

    def start(self) -> None:
        self._serving.start()

    def stop(self) -> None:
        self._serving.stop()

    def handle(
        self, method: str, target: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
    ) -> GatewayAnswer:
        request_id = str(uuid.uuid4())
        split = urlsplit(target)
        stage_prefix = f"/{self.stage}"
        path = unquote(split.path)
        matched: tuple[ApiRoute, dict[str, str]] | None = None
        if path == stage_prefix or path.startswith(stage_prefix + "/"):
            resource_path = path[len(stage_prefix) :] or "/"
            for route in self.routes:
                parameters = route.path_parameters(resource_path)
                if parameters is not None and route.method in (method, "ANY"):
                    matched = (route, parameters)
                    break
        if matched is None:
            return gateway_error(
                403,
                "Missing Authentication Token",
                "MissingAuthenticationTokenException",
                request_id,
            )
        route, path_parameters = matched
        header_map = {name.lower(): value for name, value in headers}
        key_value = header_map.get(API_KEY_HEADER)
        key_id = self.keys.key_id(key_value)
        if route.api_key_required:
            if key_id is None:
                return gateway_error(403, "Forbidden", "ForbiddenException", request_id)
            if self.usage_plan is not None:
                refused = self.usage_plan.admit(key_id)
                if refused is not None:
                    code = (
                        "TooManyRequestsException"
                        if refused == "Too Many Requests"
                        else "LimitExceededException"
                    )
                    return gateway_error(429, refused, code, request_id)
        event = proxy_event(
            route=route,
            path=resource_path_of(path, stage_prefix),
            method=method,
            query=split.query,
            headers=headers,
            body=body,
            path_parameters=path_parameters,
            stage=self.stage,
            api_id=self.api_id,
            request_id=request_id,
            source_ip=source_ip,
            api_key=(key_value, key_id) if key_value and key_id else None,
        )
        try:
            result = route.function.invoke(event)
            return _function_answer(result, request_id)
        except Exception:
            log.exception("%s %s: the function failed", method, path)
            return gateway_error(
                502, "Internal server error", "InternalServerErrorException", request_id
            )

    @classmethod
    def from_template(
        cls,
        template: LocalTemplate,
        logical_id: str,
        functions: Mapping[str, LocalFunction],
        apigateway: Any,
        port: int | None,
    ) -> tuple[LocalRestApi, str]:
        """Create the API, its usage plan and key in moto; return the API and the key value."""
        properties = template.resolve(template.resources[logical_id].get("Properties", {}))
        name = str(properties.get("Name") or template.physical_name(logical_id))
        stage = str(properties["StageName"])
        auth = properties.get("Auth", {})
        default_key_required = str(auth.get("ApiKeyRequired", False)).lower() == "true"
        api_id = apigateway.create_rest_api(
            name=name, description=properties.get("Description", "")
        )["id"]

        routes = []
        for function_id, resource in template.resources_of_type(
            "AWS::Serverless::Function"
        ).items():
            for event in resource["Properties"].get("Events", {}).values():
                if event.get("Type") != "Api":
                    continue
                event_properties = event["Properties"]
                if event_properties.get("RestApiId") != {"Ref": logical_id}:
                    continue
                key_required = event_properties.get("Auth", {}).get(
                    "ApiKeyRequired", default_key_required
                )
                routes.append(
                    ApiRoute.create(
                        str(event_properties["Method"]),
                        str(template.resolve(event_properties["Path"])),
                        functions[function_id],
                        str(key_required).lower() == "true",
                    )
                )

        plan_properties = auth.get("UsagePlan", {})
        usage_plan = None
        key_value = ""
        if plan_properties.get("CreateUsagePlan", "NONE") != "NONE":
            throttle = plan_properties.get("Throttle", {})
            quota = plan_properties.get("Quota", {})
            usage_plan = UsagePlan(
                rate=float(throttle["RateLimit"]) if "RateLimit" in throttle else None,
                burst=int(throttle["BurstLimit"]) if "BurstLimit" in throttle else None,
                quota=int(quota["Limit"]) if "Limit" in quota else None,
                quota_period=str(quota.get("Period", "DAY")),
            )
            plan_request: dict[str, Any] = {
                "name": str(plan_properties.get("UsagePlanName", f"{logical_id}UsagePlan")),
                "apiStages": [{"apiId": api_id, "stage": stage}],
            }
            if usage_plan.rate is not None and usage_plan.burst is not None:
                plan_request["throttle"] = {
                    "rateLimit": usage_plan.rate,
                    "burstLimit": usage_plan.burst,
                }
            if usage_plan.quota is not None:
                plan_request["quota"] = {
                    "limit": usage_plan.quota,
                    "period": usage_plan.quota_period,
                }
            plan_id = apigateway.create_usage_plan(**plan_request)["id"]
            # SAM names the key it creates <Api logical id>ApiKey.
            key = apigateway.create_api_key(name=f"{logical_id}ApiKey", enabled=True)
            apigateway.create_usage_plan_key(
                usagePlanId=plan_id, keyId=key["id"], keyType="API_KEY"
            )
            key_value = str(key["value"])
        api = cls(name, api_id, stage, routes, ApiKeys(apigateway, api_id, stage), usage_plan, port)
        return api, key_value


def _single_and_multi(
    pairs: list[tuple[str, str]],
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """Headers or query parameters as the proxy event gives them twice: each name's last
    value, and all of its values."""
    single: dict[str, str] = {}
    multi: dict[str, list[str]] = {}
    for name, value in pairs:
        single[name] = value
        multi.setdefault(name, []).append(value)
    return single, multi


def _event_body(body: bytes) -> tuple[str | None, bool]:
    """The body as the event's text, base64 where it is not UTF-8; whether it is."""
    if not body:
        return None, False
    try:
        return body.decode(), False
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), True


def proxy_event(
    *,
    route: ApiRoute,
    path: str,
    method: str,
    query: str,
    headers: list[tuple[str, str]],
    body: bytes,
    path_parameters: dict[str, str],
    stage: str,
    api_id: str,
    request_id: str,
    source_ip: str,
    api_key: tuple[str, str] | None,
) -> dict[str, Any]:
    """The REST API proxy integration event (payload format 1.0) for one request."""
    single_headers, multi_headers = _single_and_multi(headers)
    single_query, multi_query = _single_and_multi(parse_qsl(query, keep_blank_values=True))
    text_body, is_base64 = _event_body(body)
    now = datetime.now(UTC)
    domain = f"{api_id}.execute-api.{REGION}.amazonaws.com"
    user_agent = next((v for k, v in headers if k.lower() == "user-agent"), None)
    return {
        "resource": route.resource,
        "path": path,
        "httpMethod": method,
        "headers": single_headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": single_query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": path_parameters or None,
        "stageVariables": None,
        "requestContext": {
            "resourceId": route.resource,
            "resourcePath": route.resource,
            "httpMethod": method,
            "extendedRequestId": request_id,
            "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "path": f"/{stage}{path}",
            "accountId": ACCOUNT_ID,
            "protocol": "HTTP/1.1",
            "stage": stage,
            "domainPrefix": api_id,
            "requestTimeEpoch": int(now.timestamp() * 1000),
            "requestId": request_id,
            "identity": {
                "cognitoIdentityPoolId": None,
                "accountId": None,
                "cognitoIdentityId": None,
                "caller": None,
                "sourceIp": source_ip,
                "principalOrgId": None,
                "accessKey": None,
                "cognitoAuthenticationType": None,
                "cognitoAuthenticationProvider": None,
                "userArn": None,
                "userAgent": user_agent,
                "user": None,
                "apiKey": api_key[0] if api_key else None,
                "apiKeyId": api_key[1] if api_key else None,
            },
            "domainName": domain,
            "apiId": api_id,
        },
        "body": text_body,
        "isBase64Encoded": is_base64,
    }


def _function_answer(result: Any, request_id: str) -> GatewayAnswer:
    if not isinstance(result, dict) or "statusCode" not in result:
        raise ValueError(f"the function returned no statusCode: {str(result)[:200]}")
    headers: list[tuple[str, str]] = []
    for name, values in (result.get("multiValueHeaders") or {}).items():
        headers.extend((name, str(v)) for v in values)
    named = {name.lower() for name, _ in headers}
    headers.extend(
        (name, str(value))
        for name, value in (result.get("headers") or {}).items()
        if name.lower() not in named
    )
    body = result.get("body") or ""
    payload = base64.b64decode(body) if result.get("isBase64Encoded") else str(body).encode()
    headers.append(("x-amzn-RequestId", request_id))
    return GatewayAnswer(int(result["statusCode"]), headers, payload)
