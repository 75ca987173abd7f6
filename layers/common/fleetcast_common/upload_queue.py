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

Upload order is the order uploads reach this queue. S3 gives no order finer than whole
seconds between different keys and EventBridge may deliver out of order, so an atomic
counter numbers each upload when its event first arrives, and the number leads its run id
(:func:`fleetcast_contracts.ids.run_id_for_upload`): the queue, the jobs and the registry's
"versions only go forward" all follow it. Between two uploads of the same key, S3's
``sequencer`` decides: an upload older than one already queued for its key was replaced
in S3, and is reported as superseded rather than processed after the newer one.

Items (partition key ``queue``, sort key ``entry``):

- ``waiting`` / ``{run_id}``: an upload not yet started, with its :class:`Upload`;
- ``lease`` / ``processing``: the run whose job may run now, and when the lease was taken;
- ``counter`` / ``uploads``: the last sequence number given;
- ``arrival`` / ``{upload identity}``: the run id an upload was given, so a repeated event
  gets the same one;
- ``object`` / ``{bucket and key identity}``: the newest upload of that key seen so far
  (its padded sequencer and run id);
- ``not-processed`` / ``{run_id}``: an upload taken off the queue without a run, with its
  :class:`NotProcessed` (why, and the newer run that superseded it), which ``fleetcast
  status`` lists beside the runs;
- ``lost`` / ``{run_id}``: a run whose job a local stack lost when it was killed (started
  after its last snapshot), with its :class:`LostRun`, also listed by ``fleetcast status``.

Arrival and object items carry ``expires_at`` (DynamoDB TTL): a repeated or out-of-order
event comes within hours, not weeks.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.conditions import Attr, Key
from pydantic import BaseModel

from fleetcast_common.jobs import Upload
from fleetcast_contracts.errors import error_code
from fleetcast_contracts.ids import (
    object_identity,
    run_id_for_upload,
    sequencer_order,
    upload_identity,
)

WAITING = "waiting"
LEASE = "lease"
PROCESSING = "processing"
COUNTER = "counter"
UPLOADS = "uploads"
ARRIVAL = "arrival"
OBJECT = "object"
NOT_PROCESSED = "not-processed"
LOST = "lost"
# How long arrival and object records are kept (DynamoDB TTL on ``expires_at``).
ARRIVAL_RECORD_LIFETIME = timedelta(days=14)
# How long a lease may stand without its job existing before it is taken over: far longer
# than a function needs between taking the lease and creating the job.
UNSTARTED_LEASE_GRACE = timedelta(minutes=5)
ENDED_STATUSES = frozenset({"Completed", "Failed", "Stopped"})
_CONDITION_FAILED = "ConditionalCheckFailedException"


class WaitingUpload(BaseModel):
    run_id: str
    upload: Upload


class Arrival(BaseModel):
    """Where an upload stands in the queue's order."""

    run_id: str
    # The run of a newer upload of the same key (by S3's sequencer) that reached the queue
    # first: this one was replaced in S3 and must not be processed after it.
    superseded_by: str | None = None


class NotProcessed(BaseModel):
    """An upload that left the queue without a run: ``superseded`` (a newer upload of its
    key reached the queue first) or ``replaced`` (the version its event named was gone
    when its turn came)."""

    run_id: str
    upload: Upload
    outcome: str  # pipeline.Outcome's "superseded" or "replaced"
    reason: str
    superseded_by: str | None = None
    recorded_at: datetime


class LostRun(BaseModel):
    """A run whose job was lost with the local stack that ran it (killed after the job
    started and before a snapshot held it): what ``fleetcast status`` says of it."""

    run_id: str
    job_name: str
    reason: str
    recorded_at: datetime


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

    def arrive(self, upload: Upload, now: datetime) -> Arrival:
        """Number the upload on its first event (later events of the same upload get the
        same run id) and check it against the newest upload of its key."""
        identity = upload_identity(upload.bucket, upload.key, upload.revision)
        run_id = self._run_id_at(identity)
        if run_id is None:
            run_id = run_id_for_upload(self._next_sequence(), upload.uploaded_at)
            try:
                self._table.put_item(
                    Item={
                        "queue": ARRIVAL,
                        "entry": identity,
                        "run_id": run_id,
                        "expires_at": _expiry(now),
                    },
                    ConditionExpression=Attr("queue").not_exists(),
                )
            except Exception as error:
                if error_code(error) != _CONDITION_FAILED:
                    raise
                # The same upload's other event got its number first (this one is unused).
                run_id = self._run_id_at(identity)
                assert run_id is not None
        if upload.sequencer is None:
            return Arrival(run_id=run_id)
        return Arrival(run_id=run_id, superseded_by=self._claim_object(upload, run_id, now))

    def run_id_of(self, upload: Upload) -> str | None:
        """The run id the queue gave ``upload``; None before its first event."""
        return self._run_id_at(upload_identity(upload.bucket, upload.key, upload.revision))

    def _run_id_at(self, identity: str) -> str | None:
        found = self._table.get_item(
            Key={"queue": ARRIVAL, "entry": identity}, ConsistentRead=True
        ).get("Item")
        return str(found["run_id"]) if found else None

    def _next_sequence(self) -> int:
        updated = self._table.update_item(
            Key={"queue": COUNTER, "entry": UPLOADS},
            UpdateExpression="ADD #last :one",
            ExpressionAttributeNames={"#last": "last"},
            ExpressionAttributeValues={":one": 1},
            ReturnValues="UPDATED_NEW",
        )
        return int(updated["Attributes"]["last"])

    def _claim_object(self, upload: Upload, run_id: str, now: datetime) -> str | None:
        """Record ``upload`` as its key's newest; the newer upload's run id if it is not."""
        assert upload.sequencer is not None
        key = {"queue": OBJECT, "entry": object_identity(upload.bucket, upload.key)}
        order = sequencer_order(upload.sequencer)
        try:
            self._table.update_item(
                Key=key,
                UpdateExpression="SET #order = :order, #run = :run_id, #expires = :expires",
                # Equal sequencers of different uploads do not happen on AWS; moto gives
                # every event the same one, and then arrival order decides.
                ConditionExpression=Attr("queue").not_exists()
                | Attr("sequencer").lte(order)
                | Attr("run_id").eq(run_id),
                ExpressionAttributeNames={
                    "#order": "sequencer",
                    "#run": "run_id",
                    "#expires": "expires_at",
                },
                ExpressionAttributeValues={
                    ":order": order,
                    ":run_id": run_id,
                    ":expires": _expiry(now),
                },
            )
        except Exception as error:
            if error_code(error) != _CONDITION_FAILED:
                raise
            newer = self._table.get_item(Key=key, ConsistentRead=True)["Item"]
            return str(newer["run_id"])
        return None

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
        # Run ids sort in arrival order, so the first is the oldest.
        page = self._table.query(
            KeyConditionExpression=Key("queue").eq(WAITING), Limit=1, ConsistentRead=True
        )
        items = page.get("Items", [])
        return WaitingUpload.model_validate(items[0]) if items else None

    def waiting(self) -> list[WaitingUpload]:
        return [WaitingUpload.model_validate(item) for item in self._items(WAITING)]

    def record_not_processed(self, record: NotProcessed) -> None:
        """Keep an upload that leaves the queue without a run, for ``fleetcast status``
        (kept as long as runs are listed: no expiry). A repeated event keeps the first."""
        try:
            self._table.put_item(
                Item={
                    "queue": NOT_PROCESSED,
                    "entry": record.run_id,
                    **record.model_dump(mode="json", exclude_none=True),
                },
                ConditionExpression=Attr("queue").not_exists(),
            )
        except Exception as error:
            if error_code(error) != _CONDITION_FAILED:
                raise

    def not_processed(self) -> list[NotProcessed]:
        return [NotProcessed.model_validate(item) for item in self._items(NOT_PROCESSED)]

    def record_lost(self, lost: LostRun) -> None:
        self._table.put_item(
            Item={"queue": LOST, "entry": lost.run_id, **lost.model_dump(mode="json")}
        )

    def lost_runs(self) -> list[LostRun]:
        return [LostRun.model_validate(item) for item in self._items(LOST)]

    def _items(self, partition: str) -> list[dict[str, Any]]:
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("queue").eq(partition),
            "ConsistentRead": True,
        }
        found: list[dict[str, Any]] = []
        while True:
            page = self._table.query(**query)
            found += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return found
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def is_waiting(self, run_id: str) -> bool:
        found = self._table.get_item(Key={"queue": WAITING, "entry": run_id}, ConsistentRead=True)
        return "Item" in found

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


def _expiry(now: datetime) -> int:
    return int((now + ARRIVAL_RECORD_LIFETIME).timestamp())


def _time(lease: Lease) -> str:
    return lease.taken_at.astimezone(UTC).isoformat()
