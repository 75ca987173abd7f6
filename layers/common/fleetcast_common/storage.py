"""S3 access for the pipeline functions: the only module that calls S3 for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from fleetcast_contracts import layout
from fleetcast_contracts.errors import error_code

# How S3 answers a GET of a key that does not exist.
MISSING = ("NoSuchKey", "404")
# Without s3:ListBucket, S3 answers a missing key with AccessDenied instead.
MISSING_WITHOUT_LIST = (*MISSING, "AccessDenied", "403")


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


def read_bytes_if_exists(
    s3: Any, bucket: str, key: str, missing: tuple[str, ...] = MISSING
) -> bytes | None:
    """The object's bytes, or None where S3 answers with one of the ``missing`` codes."""
    try:
        return read_bytes(s3, bucket, key)
    except Exception as error:
        if error_code(error) in missing:
            return None
        raise


def read_text_if_exists(
    s3: Any, bucket: str, key: str, missing: tuple[str, ...] = MISSING
) -> str | None:
    """The object's text, or None where S3 answers with one of the ``missing`` codes."""
    body = read_bytes_if_exists(s3, bucket, key, missing)
    return None if body is None else body.decode()


def write_text(s3: Any, bucket: str, key: str, text: str) -> None:
    s3.put_object(Bucket=bucket, Key=key, Body=text.encode())


def copy(s3: Any, bucket: str, source_key: str, target_key: str) -> None:
    s3.copy_object(Bucket=bucket, Key=target_key, CopySource={"Bucket": bucket, "Key": source_key})


def tag_for_retention(s3: Any, bucket: str, key: str, retention: str) -> bool:
    """Tag the object for the bucket's lifecycle rule of ``retention``; False when it is
    gone already (nothing to expire)."""
    try:
        s3.put_object_tagging(
            Bucket=bucket,
            Key=key,
            Tagging={"TagSet": [{"Key": layout.RETENTION_TAG, "Value": retention}]},
        )
    except Exception as error:
        if error_code(error) in MISSING:
            return False
        raise
    return True
