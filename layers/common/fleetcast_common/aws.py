"""boto3 clients, created lazily (the local stack and moto must be in place first) and once
per process, with botocore's own retry handling for throttling and 5xx errors.

Endpoints are never hard-coded: the standard ``AWS_ENDPOINT_URL`` and
``AWS_ENDPOINT_URL_<SERVICE>`` variables switch between AWS and the local stack.
"""

from __future__ import annotations

import functools
from typing import Any

import boto3
from botocore.config import Config

# Adaptive mode adds client-side rate limiting on top of exponential back-off with jitter.
RETRY_CONFIG = Config(retries={"mode": "adaptive", "max_attempts": 8}, max_pool_connections=32)


@functools.cache
def client(service: str) -> Any:
    return boto3.session.Session().client(service, config=RETRY_CONFIG)


@functools.cache
def dynamodb_table(name: str) -> Any:
    return boto3.session.Session().resource("dynamodb", config=RETRY_CONFIG).Table(name)
