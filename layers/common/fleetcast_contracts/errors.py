"""The AWS error code a botocore error carries: what code branches on, never the message."""

from __future__ import annotations


def error_code(error: BaseException) -> str | None:
    """The ``Error.Code`` of a botocore ``ClientError`` (or any error carrying an AWS
    error response), else None."""
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return str(code) if code is not None else None
    return None
