"""IAM on the local stack: every role of template.yaml (as SAM makes it) exists in moto,
each function, job and endpoint calls with credentials of its own role (issued by moto's
STS ``AssumeRole``, as Lambda and SageMaker obtain theirs), and the gateway allows a
request only if the caller's policies allow every authorisation it needs
(:mod:`.calls`, :mod:`.policy`). A request not allowed is answered as AWS answers it
(:mod:`.errors`) and logged with its action, resource and role.

The CLI, the tests and the stack's own set-up call as the account's administrator (the
access key ``testing``, which AdministratorAccess governs). What the emulated services do
in process rather than through requests (a job's inputs downloaded, its checkpoints and
outputs written) is authorised here against the job's execution role, as SageMaker's
copies are on AWS. Signatures are not verified: the access key names the caller.
"""

from __future__ import annotations

import collections
import io
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import ClientError

from fleetcast.embedded.iam import calls, errors
from fleetcast.embedded.iam.policy import Decision, Evaluation, Request, allows_everything, evaluate
from fleetcast.embedded.iam.roles import (
    Role,
    TemplateRoles,
    managed_policy_document,
    template_roles,
)
from fleetcast.embedded.iam.s3_calls import missing_key_listing, object_arn
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer
from fleetcast.embedded.template import ACCOUNT_ID, REGION, LocalTemplate

log = logging.getLogger("fleetcast.embedded.iam")

ADMIN_ACCESS_KEY = "testing"
ADMIN_ARN = f"arn:aws:iam::{ACCOUNT_ID}:user/fleetcast-local-admin"
# Lambda and SageMaker hold role sessions for hours; the local stack's last as long.
SESSION_SECONDS = 43200
# The session names AWS's services use: Lambda the function's name, SageMaker "SageMaker".
SAGEMAKER_SESSION = "SageMaker"
_WSGI_HEADERS = {"CONTENT_TYPE": "content-type", "CONTENT_LENGTH": "content-length"}


@dataclass(frozen=True)
class Principal:
    arn: str
    role: Role | None
    documents: tuple[Any, ...]
    unrestricted: bool

    @property
    def name(self) -> str:
        return self.role.name if self.role else self.arn


@dataclass(frozen=True)
class Denial:
    """A request refused (what the log says, for tests and ``fleetcast status``)."""

    principal: str
    role: str
    action: str
    resource: str
    operation: str
    explicit: bool


class LocalIam:
    def __init__(
        self,
        template: LocalTemplate,
        enforce: bool = True,
        ses_sandbox: bool = True,
        log_path: Path | None = None,
    ) -> None:
        self.enforce = enforce
        # Each refusal is also a line here (the stack's logs/iam.log), beside the
        # functions' own logs, which show the error the caller got.
        self._log_path = log_path
        self.roles: TemplateRoles = template_roles(template)
        admin_documents = (managed_policy_document("arn:aws:iam::aws:policy/AdministratorAccess"),)
        self._principals = {
            ADMIN_ACCESS_KEY: Principal(ADMIN_ARN, None, admin_documents, unrestricted=True)
        }
        self._credentials: dict[str, dict[str, str]] = {}  # by role ARN
        self._lock = threading.Lock()
        self._transfers: dict[str, S3Transfer] = {}
        self.denials: collections.deque[Denial] = collections.deque(maxlen=1000)
        self.resolver = calls.Resolver(
            region=REGION,
            account_id=ACCOUNT_ID,
            hash_key=_hash_key,
            verified_identities=_verified_identities,
            ses_sandbox=ses_sandbox,
        )

    # -- roles and credentials ------------------------------------------------------------

    def create_roles(self, iam: Any, sts: Any) -> None:
        """Create every role in moto (inline policies included, so ``aws iam`` shows them)
        and take a session of each, as the services that use them would."""
        for role in self.roles.roles.values():
            try:
                iam.create_role(
                    RoleName=role.name, AssumeRolePolicyDocument=_json(role.assume_role_policy)
                )
            except ClientError as error:
                # moto keeps one AWS per process: a second stack in it finds the roles.
                if error.response["Error"]["Code"] != "EntityAlreadyExists":
                    raise
            for name, document in role.inline_policies.items():
                iam.put_role_policy(
                    RoleName=role.name, PolicyName=name, PolicyDocument=_json(document)
                )
        for logical_id, role_id in self.roles.function_roles.items():
            self._assume(sts, self.roles.roles[role_id], logical_id)
        for role in self.roles.roles.values():
            if role.arn not in self._credentials:
                self._assume(sts, role, SAGEMAKER_SESSION)

    def _assume(self, sts: Any, role: Role, session_name: str) -> None:
        issued = sts.assume_role(
            RoleArn=role.arn, RoleSessionName=session_name[:64], DurationSeconds=SESSION_SECONDS
        )["Credentials"]
        session_arn = f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{role.name}/{session_name[:64]}"
        documents = tuple(role.documents())
        self._principals[issued["AccessKeyId"]] = Principal(
            session_arn, role, documents, allows_everything(documents)
        )
        self._credentials.setdefault(
            role.arn,
            {
                "AWS_ACCESS_KEY_ID": issued["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": issued["SecretAccessKey"],
                "AWS_SESSION_TOKEN": issued["SessionToken"],
            },
        )

    def credentials(self, role_arn: str) -> dict[str, str]:
        """The role's credentials as the standard environment variables."""
        try:
            return dict(self._credentials[role_arn])
        except KeyError:
            raise LookupError(f"template.yaml has no role {role_arn}") from None

    def function_credentials(self, function_logical_id: str) -> dict[str, str]:
        return self.credentials(self.roles.of_function(function_logical_id).arn)

    def client(self, role_arn: str, service: str, endpoint_url: str) -> Any:
        """A client of ``service`` that calls as the role."""
        credentials = self.credentials(role_arn)
        return boto3.session.Session(
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials["AWS_SESSION_TOKEN"],
            region_name=REGION,
        ).client(
            service,
            endpoint_url=endpoint_url,
            config=Config(retries={"mode": "standard"}, max_pool_connections=32),
        )

    # -- the in-process copies of the emulated services ---------------------------------

    def job_transfer(
        self,
        role_arn: str,
        endpoint_url: str,
        put_object: Callable[[str, str, bytes], None],
        download_object: Callable[[str, str, Path], None],
    ) -> S3Transfer:
        """What a SageMaker job's S3 inputs, outputs and checkpoints move through: requests
        signed as its execution role, and in-process copies authorised as that role."""
        with self._lock:
            if role_arn not in self._transfers:
                principal = self._principal_of_role(role_arn)

                def put(bucket: str, key: str, body: bytes) -> None:
                    self.check(
                        principal, Request("s3:PutObject", object_arn(bucket, key)), "PutObject"
                    )
                    put_object(bucket, key, body)

                def download(bucket: str, key: str, target: Path) -> None:
                    self.check(
                        principal, Request("s3:GetObject", object_arn(bucket, key)), "GetObject"
                    )
                    download_object(bucket, key, target)

                self._transfers[role_arn] = S3Transfer(
                    self.client(role_arn, "s3", endpoint_url), put, download
                )
            return self._transfers[role_arn]

    def _principal_of_role(self, role_arn: str) -> Principal:
        for principal in self._principals.values():
            if principal.role is not None and principal.role.arn == role_arn:
                return principal
        # SageMaker fails such a job: it cannot assume the role.
        raise LookupError(
            f"SageMaker could not assume the role {role_arn}: the local stack has only "
            "template.yaml's roles"
        )

    def check(self, principal: Principal, request: Request, operation: str) -> None:
        """Raise AccessDenied as botocore would if ``principal`` may not make ``request``."""
        evaluation = self._evaluate(principal, request, operation)
        if evaluation is not None:
            message = errors.denial_message(
                principal.arn,
                request.action,
                request.resource,
                evaluation.decision is Decision.EXPLICIT_DENY,
            )
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": message}}, operation)

    def _evaluate(
        self, principal: Principal, request: Request, operation: str
    ) -> Evaluation | None:
        """None when allowed; the evaluation (logged) when denied."""
        if not self.enforce or principal.unrestricted:
            return None
        evaluation = evaluate(principal.documents, request)
        if evaluation.allowed:
            return None
        denial = Denial(
            principal.arn,
            principal.name,
            request.action,
            request.resource,
            operation,
            evaluation.decision is Decision.EXPLICIT_DENY,
        )
        self.denials.append(denial)
        line = (
            f"AccessDenied ({evaluation.decision.value}): role {principal.name} may not "
            f"{request.action} on {request.resource} ({operation}; context {dict(request.context)})"
        )
        log.warning("%s", line)
        if self._log_path is not None:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock, self._log_path.open("a") as out:
                out.write(f"{datetime.now(UTC).isoformat()} {line}\n")
        return evaluation

    def _assumed_session(self, access_key: str) -> Principal | None:
        """A session someone took with ``sts:AssumeRole`` (``aws sts assume-role``), as on
        AWS: its role's policies decide what it may do. A template role by its policies
        as SAM makes them; a role made in the stack (``aws iam create-role``) by the
        policies moto holds for it. None when moto issued no such key."""
        from moto.sts.models import sts_backends

        assumed = sts_backends[ACCOUNT_ID]["aws"].get_assumed_role_from_access_key(access_key)
        if assumed is None:
            return None
        role = self.roles.by_arn(assumed.role_arn)
        documents = tuple(role.documents()) if role else _moto_role_documents(assumed.role_arn)
        role_name = assumed.role_arn.rsplit("/", 1)[-1]
        principal = Principal(
            f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/{role_name}/{assumed.session_name}",
            role,
            documents,
            allows_everything(documents),
        )
        if role is not None:  # a template role's policies never change while it runs
            with self._lock:
                self._principals[access_key] = principal
        return principal

    # -- the gateway's check ----------------------------------------------------------------

    def guard(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """``app`` behind the check: the WSGI application the gateway serves."""

        def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            refusal = self._refusal(environ, start_response)
            return refusal if refusal is not None else app(environ, start_response)

        return guarded

    def _refusal(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes] | None:
        path = str(environ.get("PATH_INFO", ""))
        if path.startswith("/moto-api"):
            return None  # moto's own API (the stack's set-up), not AWS's
        headers = {
            _WSGI_HEADERS.get(k) or k[5:].replace("_", "-").lower(): str(v)
            for k, v in environ.items()
            if k.startswith("HTTP_") or k in _WSGI_HEADERS
        }
        query_string = str(environ.get("QUERY_STRING", ""))
        method = str(environ.get("REQUEST_METHOD", "GET"))
        signed = calls.signature(headers, query_string)
        principal = self._principals.get(signed.access_key) if signed else None
        if principal is None and signed is not None:
            principal = self._assumed_session(signed.access_key)
        if principal is not None and (principal.unrestricted or not self.enforce):
            return None
        # The path as sent (PATH_INFO is decoded, as latin-1): S3 keys are read from it.
        raw_path = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or path).split("?", 1)[
            0
        ]
        call = calls.describe(
            signed.service if signed else "s3",
            method,
            raw_path,
            query_string,
            headers,
            lambda: _read_body(environ),
            self.resolver,
        )
        if principal is None:
            if not self.enforce:
                return None
            who = f"access key {signed.access_key}" if signed else "an unsigned request"
            log.warning(
                "refused %s %s from %s: not a credential of this stack",
                call.service,
                call.operation,
                who,
            )
            code = "InvalidAccessKeyId" if call.service == "s3" else "InvalidClientTokenId"
            message = "The security token included in the request is invalid."
            return errors.error_response(
                start_response, call.service, call.protocol, method, message, code
            )
        for request in call.requests:
            evaluation = self._evaluate(principal, request, f"{call.service}:{call.operation}")
            if evaluation is not None:
                message = errors.denial_message(
                    principal.arn,
                    request.action,
                    request.resource,
                    evaluation.decision is Decision.EXPLICIT_DENY,
                )
                return errors.error_response(
                    start_response, call.service, call.protocol, method, message
                )
        if call.read_key is not None and not _object_exists(*call.read_key):
            # S3 tells a missing key (404) only to a caller that may list the bucket.
            listing = missing_key_listing(*call.read_key)
            if self._evaluate(principal, listing, f"s3:{call.operation} of a missing key"):
                return errors.error_response(
                    start_response, "s3", call.protocol, method, "Access Denied"
                )
        return None


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)  # moto (or a route) reads it again
    return body


def _json(document: Any) -> str:
    return json.dumps(document)


def _moto_role_documents(role_arn: str) -> tuple[Any, ...]:
    """The inline and attached policies of a role made in moto (none if it is gone)."""
    from moto.iam.exceptions import NotFoundException
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[ACCOUNT_ID]["aws"].get_role_by_arn(role_arn)
    except NotFoundException:  # deleted since the session was taken
        return ()
    inline = [json.loads(document) for document in role.policies.values()]
    attached = []
    for policy in role.managed_policies.values():
        (default,) = (v for v in policy.versions if v.is_default)
        document = default.document
        attached.append(json.loads(document) if isinstance(document, str) else document)
    return (*inline, *attached)


def _object_exists(bucket: str, key: str) -> bool:
    """Whether the key's current version is an object (a missing bucket counts as found:
    moto answers NoSuchBucket, as S3 does)."""
    from moto.s3.exceptions import MissingBucket
    from moto.s3.models import s3_backends

    try:
        return s3_backends[ACCOUNT_ID]["aws"].get_object(bucket, key) is not None
    except MissingBucket:
        return True


def _hash_key(table: str) -> str | None:
    from moto.dynamodb.models import dynamodb_backends

    found = dynamodb_backends[ACCOUNT_ID][REGION].tables.get(table)
    return found.hash_key_attr if found is not None else None


def _verified_identities() -> set[str]:
    from moto.ses.models import ses_backends

    return set(ses_backends[ACCOUNT_ID][REGION].email_identities)
