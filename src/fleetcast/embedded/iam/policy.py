"""IAM's evaluation of identity-based policies, as AWS documents it.

"Policy evaluation logic" (IAM User Guide): a request is denied by an explicit ``Deny``
that applies, else allowed by an ``Allow`` that applies, else implicitly denied. A
statement applies when its ``Action`` (or ``NotAction``) matches the action, its
``Resource`` (or ``NotResource``) matches the resource ARN, and every condition holds;
a condition that does not hold makes the statement not apply, whatever its effect (an
unmet condition never denies by itself, which moto 5.2.5's own access control gets wrong).

Pure: no AWS calls. The request context (action, resource, condition keys) comes from
:mod:`fleetcast.embedded.iam.calls`.
"""

from __future__ import annotations

import enum
import functools
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

# A request context value: condition keys are single-valued (a string, a bool as
# "true"/"false") or multivalued (a list: dynamodb:LeadingKeys, ses:Recipients).
ContextValue = str | Sequence[str]


@dataclass(frozen=True)
class Request:
    """One authorisation IAM makes for an API call (a call may need several: CopyObject
    reads one object and writes another)."""

    action: str
    resource: str
    context: Mapping[str, ContextValue] = field(default_factory=dict)

    def value(self, key: str) -> list[str] | None:
        """The key's values (condition key names are not case sensitive); None if absent."""
        for name, found in self.context.items():
            if name.lower() == key.lower():
                return [found] if isinstance(found, str) else list(found)
        return None


class Decision(enum.Enum):
    ALLOW = "allow"
    EXPLICIT_DENY = "explicit deny"
    IMPLICIT_DENY = "implicit deny"


@dataclass(frozen=True)
class Evaluation:
    decision: Decision
    # The statement that decided (the deny, or an allow); None for an implicit deny.
    statement: Mapping[str, Any] | None = None

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW


def evaluate(documents: Iterable[Mapping[str, Any]], request: Request) -> Evaluation:
    """The decision of these policy documents (one principal's) for ``request``."""
    allowing = None
    for document in documents:
        for statement in _statements(document):
            if not _applies(statement, request):
                continue
            if statement.get("Effect") == "Deny":
                return Evaluation(Decision.EXPLICIT_DENY, statement)
            if statement.get("Effect") == "Allow" and allowing is None:
                allowing = statement
    if allowing is not None:
        return Evaluation(Decision.ALLOW, allowing)
    return Evaluation(Decision.IMPLICIT_DENY)


def allows_everything(documents: Iterable[Mapping[str, Any]]) -> bool:
    """True for AdministratorAccess and the like: an unconditional Allow of ``*`` on
    ``*``, and no Deny (the gateway then need not work out what a request is)."""
    statements = [s for d in documents for s in _statements(d)]
    return not any(s.get("Effect") == "Deny" for s in statements) and any(
        s.get("Effect") == "Allow"
        and "*" in _listed(s.get("Action"))
        and "*" in _listed(s.get("Resource"))
        and not s.get("Condition")
        for s in statements
    )


def _statements(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statement = document.get("Statement", [])
    return [statement] if isinstance(statement, Mapping) else list(statement)


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _applies(statement: Mapping[str, Any], request: Request) -> bool:
    if "Action" in statement:
        if not any(action_matches(p, request.action) for p in _listed(statement["Action"])):
            return False
    elif "NotAction" in statement:
        if any(action_matches(p, request.action) for p in _listed(statement["NotAction"])):
            return False
    else:
        return False
    if "Resource" in statement:
        if not any(resource_matches(p, request.resource) for p in _listed(statement["Resource"])):
            return False
    elif "NotResource" in statement:
        if any(resource_matches(p, request.resource) for p in _listed(statement["NotResource"])):
            return False
    else:
        return False
    return conditions_hold(statement.get("Condition", {}), request)


# -- matching ------------------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def _action_pattern(pattern: str) -> re.Pattern[str]:
    return re.compile(
        "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern),
        re.IGNORECASE | re.DOTALL,
    )


def action_matches(pattern: str, action: str) -> bool:
    """Actions match without regard to case; ``*`` and ``?`` are wildcards."""
    return _action_pattern(pattern).fullmatch(action) is not None


@functools.lru_cache(maxsize=4096)
def _resource_pattern(pattern: str) -> re.Pattern[str]:
    # IAM: wildcards match within an ARN segment (the parts between colons), except that
    # a ``*`` that ends a segment may match beyond the colons.
    parts = []
    for index, char in enumerate(pattern):
        if char == "*":
            ends_segment = index + 1 == len(pattern) or pattern[index + 1] == ":"
            parts.append(".*" if ends_segment else "[^:]*")
        elif char == "?":
            parts.append("[^:]")
        else:
            parts.append(re.escape(char))
    return re.compile("".join(parts), re.DOTALL)


def resource_matches(pattern: str, resource: str) -> bool:
    """Resource ARNs match case sensitively; ``*`` alone matches every resource."""
    if pattern == "*":
        return True
    return _resource_pattern(pattern).fullmatch(resource) is not None


def _like(pattern: str, value: str, ignore_case: bool = False) -> bool:
    # StringLike and ArnLike: ``*`` and ``?`` anywhere, across colons (it is a string
    # comparison, not an ARN one) for StringLike.
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.fullmatch(regex, value, flags) is not None


def _arn_like(pattern: str, value: str) -> bool:
    """ArnLike: each of the six colon-separated parts matched on its own."""
    pattern_parts, value_parts = pattern.split(":", 5), value.split(":", 5)
    if len(pattern_parts) != 6 or len(value_parts) != 6:
        return False
    return all(_like(p, v) for p, v in zip(pattern_parts, value_parts, strict=True))


# -- conditions ----------------------------------------------------------------------------


def _to_bool(value: str) -> bool | None:
    lowered = value.lower()
    return True if lowered == "true" else False if lowered == "false" else None


def _to_number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def _to_date(value: str) -> datetime | None:
    try:
        if re.fullmatch(r"\d+", value):
            return datetime.fromtimestamp(int(value), UTC)
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _compare(kind: str, policy: str, value: str) -> bool:
    """A positive comparison of one policy value with one request value."""
    if kind == "StringEquals":
        return policy == value
    if kind == "StringEqualsIgnoreCase":
        return policy.lower() == value.lower()
    if kind == "StringLike":
        return _like(policy, value)
    if kind in ("ArnEquals", "ArnLike"):
        return _arn_like(policy, value)
    if kind == "Bool":
        wanted, found = _to_bool(policy), _to_bool(value)
        return wanted is not None and wanted == found
    if kind.startswith("Numeric"):
        left, right = _to_number(value), _to_number(policy)
        return left is not None and right is not None and _ordered(kind[7:], left, right)
    if kind.startswith("Date"):
        when, limit = _to_date(value), _to_date(policy)
        return when is not None and limit is not None and _ordered(kind[4:], when, limit)
    if kind == "IpAddress":
        try:
            return ipaddress.ip_address(value) in ipaddress.ip_network(policy, strict=False)
        except ValueError:
            return False
    raise ValueError(f"condition operator {kind!r} is not supported by the local stack")


def _ordered(relation: str, left: Any, right: Any) -> bool:
    return {
        "Equals": left == right,
        "LessThan": left < right,
        "LessThanEquals": left <= right,
        "GreaterThan": left > right,
        "GreaterThanEquals": left >= right,
    }[relation]


# Negated operators: the positive comparison, negated (and true for an absent key).
_NEGATED = {
    "StringNotEquals": "StringEquals",
    "StringNotEqualsIgnoreCase": "StringEqualsIgnoreCase",
    "StringNotLike": "StringLike",
    "ArnNotEquals": "ArnEquals",
    "ArnNotLike": "ArnLike",
    "NumericNotEquals": "NumericEquals",
    "DateNotEquals": "DateEquals",
    "NotIpAddress": "IpAddress",
}


def conditions_hold(condition: Mapping[str, Any], request: Request) -> bool:
    """Every operator's every key holds (AND); a key holds if any policy value matches
    (OR), as the IAM User Guide's "Creating a condition with multiple keys or values"
    describes."""
    for operator, keys in condition.items():
        for key, policy_values in keys.items():
            if not _holds(operator, _listed(policy_values), request.value(key)):
                return False
    return True


def _holds(operator: str, policy_values: list[str], values: list[str] | None) -> bool:
    qualifier, _, kind = operator.rpartition(":")
    if_exists = kind.endswith("IfExists")
    kind = kind.removesuffix("IfExists")
    if kind == "Null":
        # Null: true means "the key is absent".
        absent = values is None or not values
        return any(_to_bool(p) == absent for p in policy_values)
    if values is None:
        if qualifier == "ForAllValues":
            return True  # AWS: ForAllValues holds for an absent key (an empty set)
        return if_exists or (kind in _NEGATED and qualifier != "ForAnyValue")
    positive = _NEGATED.get(kind, kind)
    negated = kind in _NEGATED

    def matches(value: str) -> bool:
        return any(_compare(positive, p, value) for p in policy_values)

    if qualifier == "ForAllValues":
        return all(matches(v) != negated for v in values)
    if qualifier == "ForAnyValue":
        return any(matches(v) != negated for v in values)
    if qualifier:
        raise ValueError(f"condition set operator {qualifier!r} is not one IAM has")
    # A single-valued operator: the key's value matches (negated: matches none).
    return not any(matches(v) for v in values) if negated else any(matches(v) for v in values)
