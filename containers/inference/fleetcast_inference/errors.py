"""What can go wrong, each with the HTTP status and error code the container answers with.

``app.dispatch`` is the one place these become responses; the message is the
``message`` field of the JSON error body, so it says what to fix.
"""

from __future__ import annotations


class InferenceError(Exception):
    status: int = 500
    code: str = "InternalFailure"


class BadRequestError(InferenceError):
    status = 400
    code = "BadRequest"


class InvalidArtifactError(InferenceError):
    """The artifact exists but is not a fleetcast model archive the container can read."""

    status = 400
    code = "InvalidArtifact"


class UnsupportedModelError(InvalidArtifactError):
    """A well-formed Prophet model using a feature a period-only request cannot feed
    (logistic growth needs a cap per date, extra regressors need their future values)."""

    code = "UnsupportedModel"


class ArtifactNotFoundError(InferenceError):
    status = 404
    code = "ArtifactNotFound"


class ModelNotLoadedError(InferenceError):
    status = 404
    code = "ModelNotFound"


class RouteNotFoundError(InferenceError):
    status = 404
    code = "NotFound"


class MethodNotAllowedError(InferenceError):
    status = 405
    code = "MethodNotAllowed"


class ModelAlreadyLoadedError(InferenceError):
    status = 409
    code = "ModelAlreadyLoaded"


class PayloadTooLargeError(InferenceError):
    status = 413
    code = "PayloadTooLarge"


class InsufficientMemoryError(InferenceError):
    """Loading would pass the memory budget: the platform unloads idle models and retries."""

    status = 507
    code = "InsufficientMemory"
