"""Run ids are never handed out twice, whatever a crash takes back.

The upload queue numbers each upload from a counter item in DynamoDB, and the number
leads the run id (``fleetcast_common.upload_queue``). A snapshot holds the counter as it
was when it was taken; a stack that died after handing out more numbers would give them
again after a restore (issue 25: ``q0000000011`` handed out twice). So the local stack
writes each number the counter hands out to a file of the state folder as it is handed
out, before the upload's run exists anywhere, and at start sets the counter to at least
the highest run number that file, any job, job folder, S3 key or DynamoDB item holds.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from fleetcast.embedded.moto_patches.dynamodb import observe_updates
from fleetcast_common.upload_queue import COUNTER, UPLOADS
from fleetcast_contracts.files import write_whole

HANDED_OUT_FILE = "run-counter"
# The sequence number inside a run id (fleetcast_contracts.ids.RUN_ID_PATTERN).
_SEQUENCE = re.compile(r"q([0-9]{10})-[0-9]{8}t[0-9]{6}")
_COUNTER_KEY = {"queue": {"S": COUNTER}, "entry": {"S": UPLOADS}}

# Upload-queue table name -> what stops its recording.
_recording: dict[str, Callable[[], None]] = {}
_lock = threading.Lock()


def record_handed_out(table_name: str, path: Path) -> None:
    """Write each number ``table_name``'s upload counter hands out to ``path``."""

    def record(updated_table: str, key: dict[str, Any], item: Any) -> None:
        if updated_table == table_name and key == _COUNTER_KEY and "last" in item.attrs:
            # Told under moto's one-at-a-time DynamoDB writes: two numbers are never
            # written out of order.
            write_whole(path, str(item.attrs["last"].value))

    with _lock:
        stop_before = _recording.pop(table_name, None)
        if stop_before is not None:
            stop_before()
        _recording[table_name] = observe_updates(record)


def stop_recording(table_name: str) -> None:
    with _lock:
        stop = _recording.pop(table_name, None)
    if stop is not None:
        stop()


def highest_in(texts: Iterable[str]) -> int:
    """The highest run number any of ``texts`` holds (0: none)."""
    return max(
        (int(found) for text in texts for found in _SEQUENCE.findall(text)),
        default=0,
    )


def handed_out(path: Path) -> int:
    try:
        return int(path.read_text().strip() or 0)
    except FileNotFoundError:
        return 0


def kept_texts(s3: Any, dynamodb: Any, jobs: Iterable[str], job_folders: Path) -> Iterable[str]:
    """Every S3 key, DynamoDB string value, job name and job folder name: where a run id
    may be (moto's backends, read in this process)."""
    for bucket in s3.buckets.values():
        yield from bucket.keys.keys()
    for table in dynamodb.tables.values():
        for item in table.all_items():
            for value in item.attrs.values():
                if value.type == "S":
                    yield str(value.value)
    yield from jobs
    if job_folders.is_dir():
        yield from (folder.name for folder in job_folders.iterdir())


def raise_counter(dynamodb_client: Any, table_name: str, floor: int) -> int | None:
    """Set the counter to ``floor`` if it is below; the value it had then (None: kept)."""
    current = dynamodb_client.get_item(
        TableName=table_name, Key=_COUNTER_KEY, ConsistentRead=True
    ).get("Item")
    before = int(current["last"]["N"]) if current and "last" in current else 0
    if before >= floor:
        return None
    dynamodb_client.update_item(
        TableName=table_name,
        Key=_COUNTER_KEY,
        UpdateExpression="SET #last = :floor",
        ExpressionAttributeNames={"#last": "last"},
        ExpressionAttributeValues={":floor": {"N": str(floor)}},
    )
    return before
