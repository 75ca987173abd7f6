"""What IAM authorises for an S3 request (path-style, as clients address the local stack).

S3's actions are not its operation names (ListObjectsV2 is ``s3:ListBucket``, HeadObject
``s3:GetObject``, CopyObject both ``s3:GetObject`` on the source and ``s3:PutObject`` on
the target): the table is the S3 User Guide's "Required permissions for Amazon S3 API
operations". Only the condition keys fleetcast's policies can use are supplied
(``s3:prefix``, ``s3:delimiter``, ``s3:max-keys``, ``s3:VersionId``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote
from xml.etree import ElementTree

from fleetcast.embedded.iam.policy import Request

# Sub-resources (query parameters) that name a bucket's configuration, by method: the
# action is the method's verb and the sub-resource's IAM name.
_BUCKET_CONFIG = {
    "versioning": ("GetBucketVersioning", "PutBucketVersioning", None),
    "location": ("GetBucketLocation", None, None),
    "encryption": (
        "GetEncryptionConfiguration",
        "PutEncryptionConfiguration",
        "PutEncryptionConfiguration",
    ),
    "notification": ("GetBucketNotification", "PutBucketNotification", None),
    "publicAccessBlock": (
        "GetBucketPublicAccessBlock",
        "PutBucketPublicAccessBlock",
        "PutBucketPublicAccessBlock",
    ),
    "policy": ("GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy"),
    "tagging": ("GetBucketTagging", "PutBucketTagging", "PutBucketTagging"),
    "lifecycle": (
        "GetLifecycleConfiguration",
        "PutLifecycleConfiguration",
        "PutLifecycleConfiguration",
    ),
    "acl": ("GetBucketAcl", "PutBucketAcl", None),
    "ownershipControls": (
        "GetBucketOwnershipControls",
        "PutBucketOwnershipControls",
        "PutBucketOwnershipControls",
    ),
    "cors": ("GetBucketCORS", "PutBucketCORS", "PutBucketCORS"),
    "logging": ("GetBucketLogging", "PutBucketLogging", None),
    "uploads": ("ListBucketMultipartUploads", None, None),
    "versions": ("ListBucketVersions", None, None),
}
_OBJECT_CONFIG = {
    "tagging": ("GetObjectTagging", "PutObjectTagging", "DeleteObjectTagging"),
    "acl": ("GetObjectAcl", "PutObjectAcl", None),
    "retention": ("GetObjectRetention", "PutObjectRetention", None),
    "legal-hold": ("GetObjectLegalHold", "PutObjectLegalHold", None),
}
_VERBS = {"GET": 0, "HEAD": 0, "PUT": 1, "DELETE": 2}


@dataclass(frozen=True)
class S3Call:
    operation: str
    requests: list[Request]
    # GetObject and HeadObject of a key: what S3 answers when the key does not exist
    # depends on whether the caller may list the bucket (see :func:`missing_key_listing`).
    read_key: tuple[str, str] | None = None


def missing_key_listing(bucket: str, key: str) -> Request:
    """The listing S3 checks before it answers a read of a key that does not exist: 404
    NoSuchKey to a caller allowed s3:ListBucket on the bucket, else 403 AccessDenied (S3
    API Reference, GetObject and HeadObject: "If you don't have the s3:ListBucket
    permission, Amazon S3 returns an HTTP status code 403"). A grant scoped by s3:prefix
    is taken to cover the keys under that prefix, as this stack's roles assume: the
    check's condition context is not documented."""
    return Request("s3:ListBucket", bucket_arn(bucket), {"s3:prefix": key})


def bucket_arn(bucket: str) -> str:
    return f"arn:aws:s3:::{bucket}"


def object_arn(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


def s3_call(
    method: str, path: str, query_string: str, headers: Mapping[str, str], body: bytes | None
) -> S3Call:
    """The operation and the authorisations of an S3 request. ``headers`` by lower-case
    name; ``body`` is read only for DeleteObjects (None: not read)."""
    query = {
        name: values[-1] for name, values in parse_qs(query_string, keep_blank_values=True).items()
    }
    bucket, _, key = unquote(path.lstrip("/")).partition("/")
    if not bucket:
        return S3Call("ListBuckets", [Request("s3:ListAllMyBuckets", "*")])
    if not key:
        return _bucket_call(method, bucket, query, body)
    return _object_call(method, bucket, key, query, headers)


def _listing_context(query: Mapping[str, str]) -> dict[str, str]:
    # A listing without a prefix is a listing of the whole bucket: s3:prefix is "".
    context = {"s3:prefix": query.get("prefix", "")}
    for name in ("delimiter", "max-keys"):
        if name in query:
            context[f"s3:{name}"] = query[name]
    return context


def _bucket_call(method: str, bucket: str, query: Mapping[str, str], body: bytes | None) -> S3Call:
    arn = bucket_arn(bucket)
    if method == "POST" and "delete" in query:
        keys = _keys_to_delete(body or b"")
        requests = [
            Request(
                "s3:DeleteObjectVersion" if version else "s3:DeleteObject",
                object_arn(bucket, key),
                {"s3:VersionId": version} if version else {},
            )
            for key, version in keys
        ]
        return S3Call(
            "DeleteObjects", requests or [Request("s3:DeleteObject", object_arn(bucket, "*"))]
        )
    for name, actions in _BUCKET_CONFIG.items():
        if name in query and method in _VERBS and actions[_VERBS[method]]:
            action = str(actions[_VERBS[method]])
            context = _listing_context(query) if name in ("versions", "uploads") else {}
            return S3Call(action, [Request(f"s3:{action}", arn, context)])
    if method in ("GET",):
        operation = "ListObjectsV2" if query.get("list-type") == "2" else "ListObjects"
        return S3Call(operation, [Request("s3:ListBucket", arn, _listing_context(query))])
    if method == "HEAD":
        return S3Call("HeadBucket", [Request("s3:ListBucket", arn)])
    if method == "PUT":
        return S3Call("CreateBucket", [Request("s3:CreateBucket", arn)])
    if method == "DELETE":
        return S3Call("DeleteBucket", [Request("s3:DeleteBucket", arn)])
    return S3Call(f"{method} bucket", [Request(f"s3:{method.title()}Bucket", arn)])


def _keys_to_delete(body: bytes) -> list[tuple[str, str | None]]:
    try:
        root = ElementTree.fromstring(body)  # noqa: S314 - our own clients' request body
    except ElementTree.ParseError:
        return []
    keys = []
    for element in root.iter():
        if element.tag.rsplit("}", 1)[-1] != "Object":
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: child.text or "" for child in element}
        if "Key" in fields:
            keys.append((fields["Key"], fields.get("VersionId")))
    return keys


def _copy_source(header: str) -> tuple[str, str, str | None] | None:
    """``bucket/key[?versionId=...]`` of an ``x-amz-copy-source`` header."""
    source, _, version_query = header.partition("?")
    bucket, _, key = unquote(source.lstrip("/")).partition("/")
    if not key:
        return None
    match = re.search(r"(?:^|&)versionId=([^&]+)", version_query)
    return bucket, key, unquote(match.group(1)) if match else None


def _read(bucket: str, key: str, version: str | None) -> Request:
    if version and version != "null":
        return Request("s3:GetObjectVersion", object_arn(bucket, key), {"s3:VersionId": version})
    return Request("s3:GetObject", object_arn(bucket, key))


def _object_call(
    method: str, bucket: str, key: str, query: Mapping[str, str], headers: Mapping[str, str]
) -> S3Call:
    arn = object_arn(bucket, key)
    version = query.get("versionId")
    for name, actions in _OBJECT_CONFIG.items():
        if name in query and method in _VERBS and actions[_VERBS[method]]:
            action = str(actions[_VERBS[method]])
            if version and version != "null" and name == "tagging":
                # A version's tags: s3:PutObjectVersionTagging and the like.
                action = action.replace("ObjectTagging", "ObjectVersionTagging")
            return S3Call(action, [Request(f"s3:{action}", arn)])
    # An object written with tags (x-amz-tagging) needs s3:PutObjectTagging as well.
    tagging = [Request("s3:PutObjectTagging", arn)] if "x-amz-tagging" in headers else []
    if method in ("GET", "HEAD"):
        if "uploadId" in query:
            return S3Call("ListParts", [Request("s3:ListMultipartUploadParts", arn)])
        return S3Call(
            "GetObject" if method == "GET" else "HeadObject",
            [_read(bucket, key, version)],
            # (a read of a version by its id is left to moto: its key may be deleted)
            read_key=None if version and version != "null" else (bucket, key),
        )
    if method == "PUT":
        source = _copy_source(headers.get("x-amz-copy-source", ""))
        part = "uploadId" in query
        write = Request("s3:PutObject", arn)
        if source is None:
            return S3Call("UploadPart" if part else "PutObject", [write, *tagging])
        return S3Call("UploadPartCopy" if part else "CopyObject", [_read(*source), write, *tagging])
    if method == "POST":
        if "uploads" in query:
            return S3Call("CreateMultipartUpload", [Request("s3:PutObject", arn), *tagging])
        if "uploadId" in query:
            return S3Call("CompleteMultipartUpload", [Request("s3:PutObject", arn)])
        if "restore" in query:
            return S3Call("RestoreObject", [Request("s3:RestoreObject", arn)])
        return S3Call("PostObject", [Request("s3:PutObject", arn)])
    if method == "DELETE":
        if "uploadId" in query:
            return S3Call("AbortMultipartUpload", [Request("s3:AbortMultipartUpload", arn)])
        if version and version != "null":
            return S3Call(
                "DeleteObject",
                [Request("s3:DeleteObjectVersion", arn, {"s3:VersionId": version})],
            )
        return S3Call("DeleteObject", [Request("s3:DeleteObject", arn)])
    return S3Call(f"{method} object", [Request(f"s3:{method.title()}Object", arn)])
