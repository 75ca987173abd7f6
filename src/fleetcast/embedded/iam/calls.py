"""An AWS API request as IAM sees it: who signed it, which operation it is (from botocore's
service models, as the SDKs build requests), and the action, resource ARN and condition
keys of each authorisation it needs.

The resource ARNs and condition keys are worked out for the operations fleetcast's
functions, jobs and endpoint call (and the condition keys its policies use: ``s3:prefix``,
``dynamodb:LeadingKeys``, ``iam:PassedToService``, ``ses:FromAddress``, ``ses:Recipients``,
``cloudwatch:namespace``). Any other operation is authorised on ``*``: a policy that
names resources then does not allow it, and the denial says which resource it wanted.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email import message_from_bytes
from email.utils import getaddresses, parseaddr
from typing import Any
from urllib.parse import parse_qs, unquote

import botocore.session
from botocore.parsers import BaseCBORParser

from fleetcast.embedded.iam.policy import Request
from fleetcast.embedded.iam.s3_calls import s3_call

# The services whose models are indexed: what fleetcast, its CLI, the AWS CLI tour and
# the SageMaker SDK example call.
SERVICES = (
    "s3",
    "dynamodb",
    "sqs",
    "sagemaker",
    "sagemaker-runtime",
    "ses",
    "sesv2",
    "cloudwatch",
    "ce",
    "events",
    "iam",
    "sts",
    "glue",
    "apigateway",
    "logs",
    "lambda",
    "sns",
    "xray",
)
# IAM's service prefix where it is not the signing name.
_IAM_PREFIX = {"monitoring": "cloudwatch"}
# Operations that need no permission at all.
_UNAUTHORISED = {("sts", "GetCallerIdentity")}


@dataclass(frozen=True)
class Call:
    """One request: the service (botocore's name), operation, protocol and the
    authorisations it needs."""

    service: str
    operation: str
    protocol: str
    requests: list[Request] = field(default_factory=list)
    # (bucket, key) of an S3 GetObject or HeadObject: S3 answers a missing key 403 to a
    # caller that may not list the bucket.
    read_key: tuple[str, str] | None = None


@dataclass(frozen=True)
class Resolver:
    """What the derivation needs to know of the account's state (moto's, in process)."""

    region: str
    account_id: str
    # A table's partition key attribute (dynamodb:LeadingKeys), None if unknown.
    hash_key: Callable[[str], str | None] = lambda table: None
    # The verified SES identities: addresses and domains.
    verified_identities: Callable[[], set[str]] = set
    # A new account's SES is in the sandbox: it authorises each recipient's identity too.
    ses_sandbox: bool = True


@dataclass(frozen=True)
class Signature:
    access_key: str
    service: str  # the signing name of the credential scope


def signature(headers: Mapping[str, str], query_string: str) -> Signature | None:
    """The access key and signing name of a SigV4 request (header or presigned URL)."""
    credential = re.search(r"Credential=([^,\s]+)", headers.get("authorization", ""))
    scope = credential.group(1) if credential else None
    if scope is None:
        presigned = parse_qs(query_string).get("X-Amz-Credential")
        scope = unquote(presigned[0]) if presigned else None
    if scope is None:
        return None
    parts = scope.split("/")
    if len(parts) != 5:
        return None
    return Signature(access_key=parts[0], service=parts[3])


# -- finding the operation ---------------------------------------------------------------


@dataclass(frozen=True)
class _RestOperation:
    service: str
    name: str
    method: str
    path: re.Pattern[str]


@dataclass(frozen=True)
class _Models:
    by_target_prefix: dict[str, str]
    by_signing_name: dict[str, list[str]]
    rest: dict[str, list[_RestOperation]]
    protocols: dict[str, str]


def _uri_pattern(request_uri: str) -> re.Pattern[str]:
    path = request_uri.split("?", 1)[0]
    regex = ""
    for piece in re.split(r"(\{[^}]+\})", path):
        if piece.startswith("{"):
            regex += ".+" if piece.endswith("+}") else "[^/]+"
        else:
            regex += re.escape(piece)
    return re.compile(regex)


@functools.cache
def _models() -> _Models:
    session = botocore.session.get_session()
    by_target: dict[str, str] = {}
    by_signing: dict[str, list[str]] = {}
    rest: dict[str, list[_RestOperation]] = {}
    protocols: dict[str, str] = {}
    for name in SERVICES:
        model = session.get_service_model(name)
        protocols[name] = model.protocol
        by_signing.setdefault(model.signing_name, []).append(name)
        if model.metadata.get("targetPrefix"):
            by_target[model.metadata["targetPrefix"]] = name
        if model.protocol in ("rest-json", "rest-xml"):
            rest[name] = [
                _RestOperation(
                    name,
                    operation,
                    model.operation_model(operation).http["method"],
                    _uri_pattern(model.operation_model(operation).http["requestUri"]),
                )
                for operation in model.operation_names
            ]
    return _Models(by_target, by_signing, rest, protocols)


def identify(
    signing_name: str, method: str, path: str, headers: Mapping[str, str], body: bytes
) -> tuple[str, str, str, dict[str, Any]]:
    """(service, operation, protocol, parameters) of a request, parameters as far as the
    resource and condition keys need them."""
    models = _models()
    target = headers.get("x-amz-target", "")
    if "." in target:
        prefix, operation = target.rsplit(".", 1)
        service = models.by_target_prefix.get(prefix, signing_name)
        return service, operation, "json", _json(body)
    cbor = re.fullmatch(r"/service/[^/]+/operation/([^/]+)", path)
    if cbor:
        service = models.by_signing_name.get(signing_name, [signing_name])[0]
        return service, cbor.group(1), "smithy-rpc-v2-cbor", _cbor(body)
    form = headers.get("content-type", "").startswith("application/x-www-form-urlencoded")
    if form and method == "POST":
        parameters = {k: v[-1] for k, v in parse_qs(body.decode(errors="replace")).items()}
        if "Action" in parameters:
            candidates = models.by_signing_name.get(signing_name, [signing_name])
            service = next((s for s in candidates if models.protocols[s] == "query"), candidates[0])
            return service, parameters["Action"], "query", parameters
    for service in models.by_signing_name.get(signing_name, []):
        for rest in models.rest.get(service, []):
            if rest.method == method and rest.path.fullmatch(path):
                return (
                    service,
                    rest.name,
                    models.protocols[service],
                    {"path": path, **_json(body)},
                )
    return signing_name, "Unknown", "json", {}


def _json(body: bytes) -> dict[str, Any]:
    try:
        parsed = json.loads(body or b"{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _cbor(body: bytes) -> dict[str, Any]:
    if not body:
        return {}
    try:
        parsed = BaseCBORParser().parse_data_item(io.BufferedReader(io.BytesIO(body)))
    except Exception:  # a body the derivation cannot read is authorised without it
        return {}
    return parsed if isinstance(parsed, dict) else {}


# -- the authorisations ------------------------------------------------------------------


def describe(
    signing_name: str,
    method: str,
    path: str,
    query_string: str,
    headers: Mapping[str, str],
    read_body: Callable[[], bytes],
    resolver: Resolver,
) -> Call:
    """The call a request is, with the authorisations it needs. ``read_body`` is called
    only when the body is needed (never for an S3 object's bytes)."""
    if signing_name == "s3":
        needs_body = method == "POST" and "delete" in parse_qs(query_string, keep_blank_values=True)
        found = s3_call(method, path, query_string, headers, read_body() if needs_body else None)
        return Call("s3", found.operation, "rest-xml", found.requests, found.read_key)
    service, operation, protocol, parameters = identify(
        signing_name, method, path, headers, read_body()
    )
    if (service, operation) in _UNAUTHORISED:
        return Call(service, operation, protocol, [])
    prefix = _IAM_PREFIX.get(signing_name, signing_name)
    derive = _DERIVATIONS.get(service, _anywhere)
    return Call(service, operation, protocol, derive(prefix, operation, parameters, resolver))


def _anywhere(prefix: str, operation: str, _: dict[str, Any], __: Resolver) -> list[Request]:
    return [Request(f"{prefix}:{operation}", "*")]


def _arn(resolver: Resolver, service: str, resource: str) -> str:
    return f"arn:aws:{service}:{resolver.region}:{resolver.account_id}:{resource}"


def _leading_keys(table: str, keys: list[dict[str, Any]], resolver: Resolver) -> dict[str, Any]:
    attribute = resolver.hash_key(table)
    if attribute is None:
        return {}
    values = []
    for key in keys:
        typed = key.get(attribute)
        if isinstance(typed, dict) and typed:
            values.append(str(next(iter(typed.values()))))
    return {"dynamodb:LeadingKeys": values} if values else {}


def _query_leading_keys(parameters: dict[str, Any], resolver: Resolver) -> dict[str, Any]:
    table = str(parameters.get("TableName", ""))
    attribute = resolver.hash_key(table)
    if attribute is None:
        return {}
    if "KeyConditions" in parameters:
        condition = parameters["KeyConditions"].get(attribute, {})
        values = condition.get("AttributeValueList", [])
        return _leading_keys(table, [{attribute: values[0]}], resolver) if values else {}
    names = parameters.get("ExpressionAttributeNames", {})
    values = parameters.get("ExpressionAttributeValues", {})
    for name, placeholder in re.findall(
        r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)", parameters.get("KeyConditionExpression", "")
    ):
        if names.get(name, name) == attribute and placeholder in values:
            return _leading_keys(table, [{attribute: values[placeholder]}], resolver)
    return {}


_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _dynamodb(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    def table_arn(table: str, index: str | None = None) -> str:
        return _arn(resolver, "dynamodb", f"table/{table}" + (f"/index/{index}" if index else ""))

    if operation in ("BatchGetItem", "BatchWriteItem"):
        requests = []
        for table, entry in parameters.get("RequestItems", {}).items():
            if operation == "BatchGetItem":
                keys = entry.get("Keys", [])
            else:
                keys = [
                    (
                        w.get("PutRequest", {}).get("Item")
                        or w.get("DeleteRequest", {}).get("Key")
                        or {}
                    )
                    for w in entry
                ]
            requests.append(
                Request(
                    f"{prefix}:{operation}", table_arn(table), _leading_keys(table, keys, resolver)
                )
            )
        return requests
    if operation in ("TransactWriteItems", "TransactGetItems"):
        # No action of their own: each item is authorised as its own operation.
        requests = []
        for item in parameters.get("TransactItems", []):
            for kind, details in item.items():
                table = str(details.get("TableName", ""))
                key = details.get("Item") or details.get("Key") or {}
                requests.append(
                    Request(
                        f"{prefix}:{_TRANSACT_ACTIONS.get(kind, kind)}",
                        table_arn(table),
                        _leading_keys(table, [key], resolver),
                    )
                )
        return requests
    table = parameters.get("TableName")
    if not table:
        return [Request(f"{prefix}:{operation}", "*")]
    context: dict[str, Any] = {}
    if operation in ("GetItem", "PutItem", "UpdateItem", "DeleteItem"):
        key = parameters.get("Key") or parameters.get("Item") or {}
        context = _leading_keys(str(table), [key], resolver)
    elif operation == "Query":
        context = _query_leading_keys(parameters, resolver)
    return [
        Request(
            f"{prefix}:{operation}", table_arn(str(table), parameters.get("IndexName")), context
        )
    ]


def _sqs(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    # The batch operations are authorised as their single-message actions.
    action = f"{prefix}:{operation.removesuffix('Batch')}"
    url = parameters.get("QueueUrl")
    name = str(url).rstrip("/").rsplit("/", 1)[-1] if url else parameters.get("QueueName")
    return [Request(action, _arn(resolver, "sqs", str(name)) if name else "*")]


def _kebab(noun: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "-", noun).lower()


def _sagemaker(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    verb = re.match(r"[A-Z][a-z]+", operation)
    noun = operation[verb.end() :] if verb else operation
    if operation in ("InvokeEndpoint", "InvokeEndpointAsync"):
        match = re.search(r"/endpoints/([^/]+)/", parameters.get("path", ""))
        endpoint = unquote(match.group(1)) if match else "*"
        return [
            Request(
                f"{prefix}:{operation}", _arn(resolver, "sagemaker", f"endpoint/{endpoint.lower()}")
            )
        ]
    if operation in ("AddTags", "DeleteTags", "ListTags"):
        return [Request(f"{prefix}:{operation}", str(parameters.get("ResourceArn", "*")))]
    name = parameters.get(f"{noun}Name")
    # SageMaker lower-cases the names in its ARNs.
    resource = _arn(resolver, "sagemaker", f"{_kebab(noun)}/{str(name).lower()}") if name else "*"
    requests = [Request(f"{prefix}:{operation}", resource)]
    if operation.startswith("Create"):
        for field_name in ("RoleArn", "ExecutionRoleArn"):
            if field_name in parameters:
                requests.append(
                    Request(
                        "iam:PassRole",
                        str(parameters[field_name]),
                        {"iam:PassedToService": "sagemaker.amazonaws.com"},
                    )
                )
        if parameters.get("Tags"):
            requests.append(Request(f"{prefix}:AddTags", resource))
    return requests


def _identity(address: str, verified: set[str]) -> str:
    """The SES identity an address is authorised against: the address itself when it is
    verified, else its verified domain (SES prefers the address identity)."""
    domain = address.rpartition("@")[2]
    if address not in verified and domain in verified:
        return domain
    return address


def _ses(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    if operation not in ("SendRawEmail", "SendEmail"):
        address = (
            parameters.get("EmailAddress") or parameters.get("Identity") or parameters.get("Domain")
        )
        resource = _arn(resolver, "ses", f"identity/{address}") if address else "*"
        return [Request(f"{prefix}:{operation}", resource)]
    sender, recipients = _addresses(parameters)
    verified = resolver.verified_identities()
    context: dict[str, Any] = {
        "ses:FromAddress": sender,
        "ses:Recipients": recipients,
        "ses:ApiVersion": "1",
    }
    identities = [_identity(sender, verified)]
    if resolver.ses_sandbox:
        # In the sandbox SES authorises the sending against each recipient's identity too
        # ("not authorized to perform ses:SendRawEmail on resource ...identity/<recipient>").
        identities += [_identity(r, verified) for r in recipients]
    return [
        Request(f"{prefix}:{operation}", _arn(resolver, "ses", f"identity/{identity}"), context)
        for identity in dict.fromkeys(identities)
    ]


def _addresses(parameters: dict[str, Any]) -> tuple[str, list[str]]:
    """The sender and recipients of a v1 SendEmail/SendRawEmail query request: its
    ``Source`` and ``Destinations``, else the raw message's headers."""
    recipients = [
        v for k, v in parameters.items() if re.fullmatch(r"Destinations?\.member\.\d+", k)
    ]
    recipients += [
        v
        for k, v in parameters.items()
        if re.fullmatch(r"Destination\.(To|Cc|Bcc)Addresses\.member\.\d+", k)
    ]
    sender = parameters.get("Source", "")
    raw = parameters.get("RawMessage.Data")
    if raw and (not sender or not recipients):
        message = message_from_bytes(base64.b64decode(raw))
        sender = sender or str(message.get("From", ""))
        if not recipients:
            fields = [str(message.get(h, "")) for h in ("To", "Cc", "Bcc")]
            recipients = [address for _, address in getaddresses(fields) if address]
    return parseaddr(sender)[1], [parseaddr(r)[1] for r in recipients]


def _events(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    if operation == "PutEvents":
        buses = {str(e.get("EventBusName") or "default") for e in parameters.get("Entries", [])}
        return [
            Request(f"{prefix}:PutEvents", _arn(resolver, "events", f"event-bus/{bus}"))
            for bus in sorted(buses or {"default"})
        ]
    rule = parameters.get("Name") or parameters.get("Rule")
    return [
        Request(f"{prefix}:{operation}", _arn(resolver, "events", f"rule/{rule}") if rule else "*")
    ]


def _cloudwatch(
    prefix: str, operation: str, parameters: dict[str, Any], _: Resolver
) -> list[Request]:
    context = (
        {"cloudwatch:namespace": str(parameters["Namespace"])} if "Namespace" in parameters else {}
    )
    return [Request(f"{prefix}:{operation}", "*", context)]


def _lambda(
    prefix: str, operation: str, parameters: dict[str, Any], resolver: Resolver
) -> list[Request]:
    action = "InvokeFunction" if operation == "Invoke" else operation
    match = re.search(r"/functions/([^/]+)", parameters.get("path", ""))
    name = unquote(match.group(1)) if match else None
    return [
        Request(f"{prefix}:{action}", _arn(resolver, "lambda", f"function:{name}") if name else "*")
    ]


_DERIVATIONS: dict[str, Callable[[str, str, dict[str, Any], Resolver], list[Request]]] = {
    "dynamodb": _dynamodb,
    "sqs": _sqs,
    "sagemaker": _sagemaker,
    "sagemaker-runtime": _sagemaker,
    "ses": _ses,
    "events": _events,
    "cloudwatch": _cloudwatch,
    "lambda": _lambda,
}
