"""The SageMaker multi-model endpoint container contract, as fleetcast uses it.

Shared by the inference container, the local stack that hosts it, the forecast API and
the CLI. SageMaker starts the image with ``serve``, talks to it on port 8080 and puts
every model it asks the container to load under ``/opt/ml/models/<model_name>/model``;
the local stack points ``FLEETCAST_OPT_ML`` at a scratch folder instead and picks the
port with ``SAGEMAKER_BIND_TO_PORT``.
"""

from __future__ import annotations

import json

# SageMaker's load request names ``/opt/ml/models/<model_name>/model``; a url outside
# this folder is refused, so a load request cannot make the container read other files.
MODELS_DIR = "/opt/ml/models"

PORT_ENV = "SAGEMAKER_BIND_TO_PORT"
DEFAULT_PORT = 8080
BIND_HOST_ENV = "FLEETCAST_BIND_HOST"
DEFAULT_BIND_HOST = "0.0.0.0"  # noqa: S104 - SageMaker reaches the container from outside it
MULTI_MODEL_ENV = "SAGEMAKER_MULTI_MODEL"
MULTI_MODEL_LABEL = "com.amazonaws.sagemaker.capabilities.multi-models"

# Memory the loaded models (and the cached answers beside them) may use, in MiB; a
# load that would pass it is answered 507 so the platform unloads idle models first.
# Unset: DEFAULT_BUDGET_FRACTION of the container's memory limit.
MEMORY_BUDGET_ENV = "FLEETCAST_MEMORY_BUDGET_MB"
DEFAULT_BUDGET_FRACTION = 0.7
LOG_LEVEL_ENV = "FLEETCAST_LOG_LEVEL"

PING_PATH = "/ping"
MODELS_PATH = "/models"
INVOKE_SUFFIX = "/invoke"
# Single-model style route; the model is the one the header names.
INVOCATIONS_PATH = "/invocations"
# The InvokeEndpoint TargetModel, passed through by SageMaker (for logging: the path's
# model_name is the key the container loaded the model under).
TARGET_MODEL_HEADER = "X-Amzn-SageMaker-Target-Model"

# GET /models pagination: query parameters and response field.
LIST_LIMIT_PARAM = "limit"
LIST_TOKEN_PARAM = "next_page_token"  # noqa: S105 - a parameter name, not a secret
LIST_TOKEN_FIELD = "nextPageToken"  # noqa: S105 - a field name, not a secret
DEFAULT_LIST_LIMIT = 100
MAX_LIST_LIMIT = 1000

# Forecast horizon an invoke (and so the forecast API) may ask for, in the model's own
# periods.
MIN_PERIOD = 1
MAX_PERIOD = 365

# Every error the container answers is a JSON object with these two fields.
ERROR_CODE_FIELD = "error"
ERROR_MESSAGE_FIELD = "message"


def error_body(code: str, message: str) -> dict[str, str]:
    """The JSON error body the container answers with."""
    return {ERROR_CODE_FIELD: code, ERROR_MESSAGE_FIELD: message}


def error_body_code(body: bytes) -> str | None:
    """The error code of a container's JSON error body, else None (not JSON, or no code)."""
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    code = document.get(ERROR_CODE_FIELD) if isinstance(document, dict) else None
    return str(code) if code is not None else None
