"""One processing job at a time, in upload order: the only module that touches the
upload-queue table.

A processing job reads the stored history of every customer its upload touches and writes
it back merged (SageMaker uploads a job's outputs when it ends). Two jobs running at once
would each merge into the history they read, and the one ending last would overwrite the
other's readings. So uploads wait in this table, and a lease lets one job run:

- start-processing records each upload as waiting, then dispatches;
- dispatching takes the lease for the oldest waiting upload (a conditional write) and
  starts its job; the others wait;
- when a processing job ends (Completed, Failed or Stopped), start-processing releases its
  lease and dispatches the next upload.

A lease whose job has ended, or was never created (a function that died between taking
the lease and creating the job), is taken over, so a lost event cannot block the queue.

Items (partition key ``queue``, sort key ``entry``):

- ``waiting`` / ``{run_id}``: an upload not yet started, with its :class:`Upload`;
- ``lease`` / ``processing``: the run whose job may run now, and when the lease was taken.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Attr, Key
from pydantic import BaseModel

from fleetcast_common.contracts.errors import error_code
from fleetcast_common.jobs import Upload

WAITING = "waiting"
LEASE = "lease"
PROCESSING = "processing"
# How long a lease may stand without its job existing before it is taken over: far longer
# than a function needs between taking the lease and creating the job.
UNSTARTED_LEASE_GRACE = timedelta(minutes=5)
ENDED_STATUSES = frozenset({"Completed", "Failed", "Stopped"})
_CONDITION_FAILED = "ConditionalCheckFailedException"


class WaitingUpload(BaseModel):
    run_id: str
    upload: Upload


class Lease(BaseModel):
    run_id: str
    job_name: str
    taken_at: datetime

    def is_stale(self, job_status: str | None, now: datetime) -> bool:
        """Whether the lease's job (whose status is ``job_status``, None when it does not
        exist) has ended, or was never created within the grace period."""
        if job_status is None:
            return now - self.taken_at > UNSTARTED_LEASE_GRACE
        return job_status in ENDED_STATUSES


class UploadQueue:
    def __init__(self, table: Any) -> None:
        self._table = table

    def add(self, waiting: WaitingUpload) -> None:
        """Record an upload as waiting; a repeated event leaves the first record as it is."""
        try:
            self._table.put_item(
                Item={"queue": WAITING, "entry": waiting.run_id, **waiting.model_dump(mode="json")},
                ConditionExpression=Attr("queue").not_exists(),
            )
        except Exception as error:
            if error_code(error) != _CONDITION_FAILED:
                raise

    def oldest_waiting(self) -> WaitingUpload | None:
        # Run ids sort by upload time, so the first is the oldest.
        page = self._table.query(
            KeyConditionExpression=Key("queue").eq(WAITING), Limit=1, ConsistentRead=True
        )
        items = page.get("Items", [])
        return WaitingUpload.model_validate(items[0]) if items else None

    def waiting(self) -> list[WaitingUpload]:
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("queue").eq(WAITING),
            "ConsistentRead": True,
        }
        found: list[WaitingUpload] = []
        while True:
            page = self._table.query(**query)
            found += [WaitingUpload.model_validate(item) for item in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return found
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def remove(self, run_id: str) -> None:
        self._table.delete_item(Key={"queue": WAITING, "entry": run_id})

    def lease(self) -> Lease | None:
        found = self._table.get_item(
            Key={"queue": LEASE, "entry": PROCESSING}, ConsistentRead=True
        ).get("Item")
        return Lease.model_validate(found) if found else None

    def take_lease(self, lease: Lease, replacing: Lease | None) -> bool:
        """Take the lease if it is free (``replacing`` None) or still ``replacing``'s."""
        condition = (
            Attr("queue").not_exists()
            if replacing is None
            else Attr("run_id").eq(replacing.run_id) & Attr("taken_at").eq(_time(replacing))
        )
        try:
            self._table.put_item(
                Item={"queue": LEASE, "entry": PROCESSING, **_lease_item(lease)},
                ConditionExpression=condition,
            )
        except Exception as error:
            if error_code(error) == _CONDITION_FAILED:
                return False
            raise
        return True

    def release_lease(self, run_id: str) -> bool:
        """Free the lease if ``run_id`` holds it; False if it does not (a repeated event)."""
        try:
            self._table.delete_item(
                Key={"queue": LEASE, "entry": PROCESSING},
                ConditionExpression=Attr("run_id").eq(run_id),
            )
        except Exception as error:
            if error_code(error) == _CONDITION_FAILED:
                return False
            raise
        return True


def _lease_item(lease: Lease) -> dict[str, str]:
    return {"run_id": lease.run_id, "job_name": lease.job_name, "taken_at": _time(lease)}


def _time(lease: Lease) -> str:
    return lease.taken_at.astimezone(UTC).isoformat()
