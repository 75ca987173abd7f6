"""The SageMaker runtime's InvokeEndpoint errors, as AWS names them (code, HTTP status)."""

from __future__ import annotations

from typing import Any


class RuntimeServiceError(Exception):
    """An InvokeEndpoint error: the AWS error code, HTTP status and modeled fields."""

    code = "InternalFailure"
    status = 500

    def __init__(self, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        self.fields = fields


class ValidationError(RuntimeServiceError):
    code = "ValidationError"
    status = 400


class ModelError(RuntimeServiceError):
    """The container answered 4xx or 5xx; ``OriginalStatusCode``/``OriginalMessage`` say how."""

    code = "ModelError"
    status = 424


class ModelNotReadyException(RuntimeServiceError):
    code = "ModelNotReadyException"
    status = 429


class ServiceUnavailable(RuntimeServiceError):
    code = "ServiceUnavailable"
    status = 503


class ContainerUnavailableError(Exception):
    """The container does not answer: not started yet, restarting, or dead."""
