"""S3 lifecycle expiration on the local stack: moto stores a bucket's lifecycle rules but
never acts on them, so what the template's rules expire would stay for ever locally and
nothing would show which objects AWS removes.

:func:`lifecycle_rules` turns a bucket's CloudFormation ``LifecycleConfiguration`` into
the API's (the stack puts it on each bucket it creates); :func:`expire` does what S3's
daily lifecycle run does with the rules' expirations, as of a given moment:

- ``Expiration.Days``: a current version whose age (from its LastModified) reached the
  days, and which the rule's filter (prefix, tags) matches, is expired: in a versioned
  bucket a delete marker is put over it (it becomes noncurrent), as S3 does;
- ``NoncurrentVersionExpiration.NoncurrentDays``: a noncurrent version that has been
  noncurrent that long (since the next version's LastModified), matching the filter by
  its own tags, is deleted for good.

S3 acts at midnight UTC after the day is reached and may take longer; the local stack
acts when asked (``LocalLifecycle`` once an hour), exactly at the day. Transitions,
``ExpiredObjectDeleteMarker`` and size filters are not emulated (fleetcast uses none).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

log = logging.getLogger("fleetcast.embedded.lifecycle")

# How often the running stack applies its buckets' rules (S3 does once a day).
RUN_EVERY_SECONDS = 3600


def lifecycle_rules(configuration: Mapping[str, Any]) -> list[dict[str, Any]]:
    """CloudFormation's ``LifecycleConfiguration`` as PutBucketLifecycleConfiguration's
    rules: its property names differ (``ExpirationInDays``, ``Prefix`` and
    ``TagFilters`` beside the rule rather than in a ``Filter``)."""
    rules = []
    for rule in configuration.get("Rules", []):
        tags = [{"Key": t["Key"], "Value": t["Value"]} for t in rule.get("TagFilters", [])]
        prefix = rule.get("Prefix", "")
        if tags and (prefix or len(tags) > 1):
            selection: dict[str, Any] = {"And": {"Prefix": prefix, "Tags": tags}}
        elif tags:
            selection = {"Tag": tags[0]}
        else:
            selection = {"Prefix": prefix}
        api: dict[str, Any] = {"ID": rule["Id"], "Status": rule["Status"], "Filter": selection}
        if "ExpirationInDays" in rule:
            api["Expiration"] = {"Days": int(rule["ExpirationInDays"])}
        if "NoncurrentVersionExpiration" in rule:
            api["NoncurrentVersionExpiration"] = {
                "NoncurrentDays": int(rule["NoncurrentVersionExpiration"]["NoncurrentDays"])
            }
        if "AbortIncompleteMultipartUpload" in rule:
            api["AbortIncompleteMultipartUpload"] = dict(rule["AbortIncompleteMultipartUpload"])
        rules.append(api)
    return rules


@dataclass(frozen=True)
class Expired:
    bucket: str
    key: str
    # None: the current version, now behind a delete marker; else the version deleted.
    version_id: str | None
    rule: str


@dataclass(frozen=True)
class _Filter:
    prefix: str
    tags: Mapping[str, str]

    @classmethod
    def of(cls, rule: Mapping[str, Any]) -> _Filter:
        selection = rule.get("Filter", {})
        if "And" in selection:
            both = selection["And"]
            tags = {t["Key"]: t["Value"] for t in both.get("Tags", [])}
            return cls(both.get("Prefix", ""), tags)
        if "Tag" in selection:
            return cls("", {selection["Tag"]["Key"]: selection["Tag"]["Value"]})
        return cls(selection.get("Prefix", rule.get("Prefix", "")), {})

    def matches(self, key: str, tags: Callable[[], Mapping[str, str]]) -> bool:
        if not key.startswith(self.prefix):
            return False
        if not self.tags:
            return True
        held = tags()
        return all(held.get(name) == value for name, value in self.tags.items())


def expire(s3: Any, bucket: str, now: datetime) -> list[Expired]:
    """Apply the bucket's enabled expiration rules as of ``now``; what was expired."""
    try:
        rules = s3.get_bucket_lifecycle_configuration(Bucket=bucket)["Rules"]
    except Exception as error:
        if "NoSuchLifecycleConfiguration" in str(error):
            return []
        raise
    rules = [r for r in rules if r.get("Status") == "Enabled"]
    if not rules:
        return []
    expired: list[Expired] = []
    for key, versions in _versions_by_key(s3, bucket):
        expired += _expire_key(s3, bucket, key, versions, rules, now)
    return expired


def _versions_by_key(s3: Any, bucket: str) -> Iterable[tuple[str, list[dict[str, Any]]]]:
    """Each key's versions and delete markers, newest first."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket):
        for version in page.get("Versions", []):
            by_key.setdefault(version["Key"], []).append(version)
        for marker in page.get("DeleteMarkers", []):
            by_key.setdefault(marker["Key"], []).append({**marker, "DeleteMarker": True})
    for key, versions in by_key.items():
        # The latest first (a delete marker and the version it hid can share a second).
        versions.sort(key=lambda v: (bool(v.get("IsLatest")), v["LastModified"]), reverse=True)
        yield key, versions


def _expire_key(
    s3: Any,
    bucket: str,
    key: str,
    versions: list[dict[str, Any]],
    rules: list[dict[str, Any]],
    now: datetime,
) -> list[Expired]:
    expired = []
    for index, version in enumerate(versions):
        if version.get("DeleteMarker"):
            continue
        version_id = version.get("VersionId")

        def tags(version_id: str | None = version_id) -> dict[str, str]:
            request = {"Bucket": bucket, "Key": key}
            if version_id and version_id != "null":
                request["VersionId"] = version_id
            tag_set = s3.get_object_tagging(**request).get("TagSet", [])
            return {t["Key"]: t["Value"] for t in tag_set}

        for rule in rules:
            # Due first (a listing tells), then the filter: its tags cost a request each.
            due = _due(rule, version, versions[index - 1] if index else None, now)
            if due is None or not _Filter.of(rule).matches(key, tags):
                continue
            if due == "current":
                s3.delete_object(Bucket=bucket, Key=key)
                expired.append(Expired(bucket, key, None, rule["ID"]))
            else:
                s3.delete_object(Bucket=bucket, Key=key, VersionId=version_id)
                expired.append(Expired(bucket, key, version_id, rule["ID"]))
            break
    return expired


def _due(
    rule: Mapping[str, Any],
    version: Mapping[str, Any],
    newer: Mapping[str, Any] | None,
    now: datetime,
) -> str | None:
    """Whether the rule's expiration is due for the version: "current" (expire the key),
    "noncurrent" (delete the version), or None."""
    if version.get("IsLatest"):
        days = rule.get("Expiration", {}).get("Days")
        if days is not None and version["LastModified"] + timedelta(days=days) <= now:
            return "current"
        return None
    noncurrent = rule.get("NoncurrentVersionExpiration")
    if noncurrent is None or newer is None:
        return None
    # Noncurrent since the next version (or delete marker) was made.
    if newer["LastModified"] + timedelta(days=noncurrent["NoncurrentDays"]) <= now:
        return "noncurrent"
    return None


class LocalLifecycle:
    """The running stack's buckets' rules, applied once an hour (and at :meth:`run`)."""

    def __init__(self, s3: Any, buckets: list[str], now: Callable[[], datetime]) -> None:
        self._s3 = s3
        self._buckets = buckets
        self._now = now
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="s3-lifecycle", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def run(self, now: datetime | None = None) -> list[Expired]:
        moment = now or self._now()
        expired = [e for bucket in self._buckets for e in expire(self._s3, bucket, moment)]
        for item in expired:
            log.info("lifecycle rule %s expired s3://%s/%s", item.rule, item.bucket, item.key)
        return expired

    def _loop(self) -> None:
        while not self._stopped.wait(RUN_EVERY_SECONDS):
            try:
                self.run()
            except Exception:
                log.exception("applying the buckets' lifecycle rules failed; next hour again")
