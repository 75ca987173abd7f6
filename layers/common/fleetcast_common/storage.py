"""S3 access for the pipeline functions: the only module that calls S3 for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def any_object_under(s3: Any, bucket: str, prefix: str) -> bool:
    listing = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return bool(listing.get("KeyCount", 0))


def keys_under(s3: Any, bucket: str, prefix: str) -> Iterator[str]:
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for entry in page.get("Contents", []):
            yield entry["Key"]


def read_json(s3: Any, bucket: str, key: str) -> Any:
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def read_text(s3: Any, bucket: str, key: str) -> str:
    body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body.decode()


def read_bytes(s3: Any, bucket: str, key: str) -> bytes:
    body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def write_text(s3: Any, bucket: str, key: str, text: str) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode())


def copy(s3: Any, bucket: str, source_key: str, target_key: str) -> None:
    s3.copy_object(Bucket=bucket, Key=target_key, CopySource={"Bucket": bucket, "Key": source_key})
