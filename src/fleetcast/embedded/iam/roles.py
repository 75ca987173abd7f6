"""Each role of template.yaml as SAM makes it: its inline policies and the AWS managed
policies attached, resolved for the local stack.

SAM gives every function without a ``Role`` a role of its own (``<Function>Role``), with
the function's ``Policies`` (inline statements, SAM policy templates expanded), the
managed policies it adds (AWSLambdaBasicExecutionRole, AWSXrayWriteOnlyAccess for
``Tracing: Active``, ...) and a policy for the dead-letter queue. Rather than redo that,
the template is translated by SAM itself (:mod:`.sam_translate`, in the SAM CLI's own
environment); the translation is kept in the cache folder under a digest of the
template, its parameters and the translator's version, as the template's own reading is.
The managed policies' documents come from moto's copy of AWS's.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetcast.embedded.template import ACCOUNT_ID, LocalTemplate, cache_folder
from fleetcast_contracts.files import write_whole

SAM_PYTHON_ENV = "FLEETCAST_SAM_PYTHON"
_TRANSLATE = Path(__file__).with_name("sam_translate.py")


@dataclass(frozen=True)
class Role:
    logical_id: str
    name: str
    assume_role_policy: Mapping[str, Any]
    # Inline policies by name, resolved.
    inline_policies: Mapping[str, Mapping[str, Any]]
    managed_policy_arns: tuple[str, ...]

    @property
    def arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT_ID}:role/{self.name}"

    def documents(self) -> list[Mapping[str, Any]]:
        """Every policy document that decides what the role may do."""
        managed = [managed_policy_document(arn) for arn in self.managed_policy_arns]
        return [*self.inline_policies.values(), *managed]


@dataclass(frozen=True)
class TemplateRoles:
    roles: Mapping[str, Role]  # by logical id
    # Each function's role, by the function's logical id.
    function_roles: Mapping[str, str]

    def by_arn(self, arn: str) -> Role | None:
        return next((r for r in self.roles.values() if r.arn == arn), None)

    def of_function(self, function_logical_id: str) -> Role:
        return self.roles[self.function_roles[function_logical_id]]


@functools.cache
def _aws_managed_policies() -> dict[str, Any]:
    from moto.iam.aws_managed_policies import aws_managed_policies_data

    policies: dict[str, Any] = json.loads(aws_managed_policies_data)
    return policies


def managed_policy_document(arn: str) -> Mapping[str, Any]:
    """The default version of an AWS managed policy (``arn:aws:iam::aws:policy/...``)."""
    name = arn.rsplit("/", 1)[-1]
    if not arn.startswith("arn:aws:iam::aws:policy/") or name not in _aws_managed_policies():
        raise LookupError(f"the local stack knows no AWS managed policy {arn}")
    document: Mapping[str, Any] = _aws_managed_policies()[name]["Document"]
    return document


def sam_python(root: Path) -> Path:
    configured = os.environ.get(SAM_PYTHON_ENV)
    return Path(configured) if configured else root / ".venv-sam" / "bin" / "python"


def _translator_version(python: Path) -> str:
    """The installed aws-sam-translator's dist-info name (its version), without running it."""
    found = sorted(python.parent.parent.glob("lib/python*/site-packages/aws_sam_translator-*"))
    return found[-1].name if found else str(python)


def translate(template: LocalTemplate, cache: Path | None = None) -> dict[str, Any]:
    """The roles and functions of SAM's translation of ``template`` (cached)."""
    python = sam_python(template.path.parent)
    if not python.is_file():
        raise FileNotFoundError(
            f"SAM's translator runs from {python}, which is missing: `make up` (or `make "
            f"install`) creates it (or set {SAM_PYTHON_ENV}); `fleetcast up --no-iam` runs "
            "without IAM"
        )
    request = {"template": template.body, "parameters": template.parameters}
    text = json.dumps(request, sort_keys=True)
    digest = hashlib.sha256(f"{_translator_version(python)}\n{text}".encode()).hexdigest()
    folder = cache if cache is not None else cache_folder()
    kept = folder / f"sam-roles-{digest}.json"
    with contextlib.suppress(OSError, ValueError):
        translated: dict[str, Any] = json.loads(kept.read_text())
        return translated
    done = subprocess.run(
        [str(python), str(_TRANSLATE)],
        input=text,
        capture_output=True,
        text=True,
        check=False,
        env={"AWS_DEFAULT_REGION": "us-east-1", "PATH": os.environ.get("PATH", "")},
        timeout=120,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"SAM could not translate {template.path}: {done.stderr.strip()[-2000:]}"
        )
    translated = json.loads(done.stdout)
    with contextlib.suppress(OSError):
        write_whole(kept, done.stdout, shared=True)
    return translated


def template_roles(template: LocalTemplate, cache: Path | None = None) -> TemplateRoles:
    resources: dict[str, Any] = translate(template, cache)["Resources"]
    roles = {}
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        properties = resource.get("Properties", {})
        name = (
            template.physical_name(logical_id)
            if logical_id in template.resources
            else f"{template.stack_name}-{logical_id}"[:64]
        )
        roles[logical_id] = Role(
            logical_id=logical_id,
            name=name,
            assume_role_policy=template.resolve(properties.get("AssumeRolePolicyDocument", {})),
            inline_policies={
                str(policy["PolicyName"]): template.resolve(policy["PolicyDocument"])
                for policy in properties.get("Policies", [])
            },
            managed_policy_arns=tuple(template.resolve(properties.get("ManagedPolicyArns", []))),
        )
    function_roles = {}
    for logical_id, resource in resources.items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        role = resource.get("Properties", {}).get("Role")
        if not (isinstance(role, dict) and "Fn::GetAtt" in role):
            raise ValueError(
                f"{logical_id}: the local stack needs the function's role from the template "
                f"(SAM's own, or Role: !GetAtt <role>.Arn), not {role!r}"
            )
        function_roles[logical_id] = str(role["Fn::GetAtt"][0])
    return TemplateRoles(roles, function_roles)
