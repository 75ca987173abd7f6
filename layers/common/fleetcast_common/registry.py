"""The model registry in DynamoDB: the only module that touches its table.

Per customer (partition key ``customer_id``) the sort key ``record`` holds:

- ``LIVE``: the version the API serves;
- ``MODEL#{run_id}``: every model ever trained for the customer, live or not.

Registration's progress per run lives in the same table under the partition
``RUN#{run_id}`` (no customer id contains ``#``): ``REGISTRATION`` holds the run's number
of chunks and when it was registered, ``CHUNK#{chunk_id}`` each chunk done with its
outcomes, ``FAILED#{chunk_id}`` a chunk's last failed delivery (why, and how many
deliveries have failed: at the chunks queue's maxReceiveCount it is dead-lettered). The run's totals are kept on its record, so its progress is one read: a chunk
is counted by one conditional UpdateItem that adds its counts and its number to the
record unless the record already holds the number, idempotent under redelivery.

Versions are numbered per customer by the LIVE record's conditional update, which only
moves forward in run order (run ids sort in the order uploads reached the upload queue):
an older or repeated training event can never replace a newer model.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as EndpointUnreachableError
from pydantic import BaseModel, ValidationError

# The records are read from here too (ModelStatus only for its callers).
from fleetcast_common.registry_records import (
    HeldBackModel,
    LiveModel,
    ModelRecord,
    from_item,
    stored,
    to_item,
)
from fleetcast_common.registry_records import ModelStatus as ModelStatus
from fleetcast_contracts.errors import error_code

LIVE = "LIVE"
MODEL_PREFIX = "MODEL#"
RUN_PARTITION_PREFIX = "RUN#"
RUN_RECORD = "REGISTRATION"
CHUNK_PREFIX = "CHUNK#"
FAILED_CHUNK_PREFIX = "FAILED#"
# On a run's record: the numbers of the chunks whose counts its totals hold (a number
# set, a few bytes a chunk: 20,000 chunks, 10M customers at 500 a chunk, are ~100 KB of
# DynamoDB's 400 KB an item).
COUNTED_CHUNKS = "counted_chunks"
# BatchGetItem reads at most 100 keys a request; two per customer (LIVE and MODEL#run).
_CUSTOMERS_PER_BATCH_GET = 50
# TransactWriteItems takes at most 100 actions.
_PUTS_PER_TRANSACTION = 100
# Why a cancelled transaction's action failed when its customer's LIVE record changed
# since it was read (or is being changed by a concurrent transaction).
_DECIDE_AGAIN = frozenset({"ConditionalCheckFailed", "TransactionConflict"})


class CustomerState(BaseModel):
    """What registration needs to know of a customer before deciding: its live model and
    this run's record, if an earlier delivery already decided."""

    live: LiveModel | None = None
    decided: ModelRecord | None = None
    # Why one of its records cannot be read (a malformed item): the customer is not
    # registered, and the chunk's other customers are.
    unreadable: str | None = None


class FailedChunk(BaseModel):
    """A registration chunk's last failed delivery, kept for ``fleetcast status`` (the
    dead-letter queue keeps the chunk but not why it failed)."""

    chunk_id: str
    number: int
    reason: str
    # SQS's ApproximateReceiveCount at that delivery.
    deliveries: int
    failed_at: datetime


class ChunkCounts(BaseModel):
    """What one registration chunk did, added to its run's record once."""

    trained: int = 0
    registered: int = 0
    rejected: int = 0
    superseded: int = 0
    repeated: int = 0
    failed_training: int = 0
    recovered: int = 0
    lost: int = 0
    # The chunk's models with a MODEL record, decided by this delivery or an earlier one,
    # and how many of them were made live: what ``fleetcast status`` shows, read from the
    # run's record rather than by counting MODEL records.
    models_decided: int = 0
    models_live: int = 0


class RunRegistration(ChunkCounts):
    """``RUN#{run_id}`` / ``REGISTRATION``: a run's registration, chunk by chunk."""

    run_id: str
    training_job: str
    chunks_total: int
    chunks_done: int = 0
    started_at: datetime
    registered_at: datetime | None = None
    # The numbers of the chunks counted.
    counted_chunks: frozenset[int] = frozenset()

    @property
    def complete(self) -> bool:
        return self.registered_at is not None


class RegistryUnavailableError(Exception):
    """The registry cannot be read just now (throttled, failing or unreachable, after
    botocore's retries): worth asking again shortly."""

    retry_after_seconds = 2


# DynamoDB's answers that say "not now" rather than "never".
_UNAVAILABLE_CODES = frozenset(
    {
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "RequestLimitExceeded",
        "InternalServerError",
        "ServiceUnavailable",
    }
)


def _next_version(seen: LiveModel | None) -> int:
    """The version a promotion gives the customer's model, over the LIVE record read."""
    return (seen.model_version if seen else 0) + 1


class ModelRegistry:
    def __init__(self, table: Any) -> None:
        self._table = table

    def record(self, record: ModelRecord) -> None:
        """Write the MODEL record with its decision. Idempotent: a repeated event writes
        the same content."""
        item = {"record": MODEL_PREFIX + record.run_id, **stored(record)}
        self._table.put_item(Item=to_item(item))

    def promote(self, record: ModelRecord) -> int | None:
        """Make ``record`` the customer's live model if its run is newer than the live one.

        Returns its new version number, or None when the live model is from this run
        already (a repeated event) or from a newer one.
        """
        now = datetime.now(UTC).isoformat()
        dumped = stored(record, exclude={"status", "model_version", "customer_id"})
        # DynamoDB stores no nulls: a field the new model lacks (a backtest, for a model
        # from before backtests) is removed, so the LIVE record never keeps an older one's.
        fields = {k: v for k, v in dumped.items() if v is not None}
        cleared = "".join(f", #{k}" for k, v in dumped.items() if v is None)
        fields["updated_at"] = now
        names = {f"#{k}": k for k in fields}
        values = to_item({f":{k}": v for k, v in fields.items()})
        assignments = ", ".join(f"#{k} = :{k}" for k in fields)
        try:
            response = self._table.update_item(
                Key={"customer_id": record.customer_id, "record": LIVE},
                # A newer model live drops the note of an older one held back.
                UpdateExpression=(
                    f"SET {assignments}, #v = if_not_exists(#v, :zero) + :one "
                    f"REMOVE held_back{cleared}"
                ),
                ConditionExpression="attribute_not_exists(#run_id) OR #run_id < :run_id",
                ExpressionAttributeNames={
                    **names,
                    **{f"#{k}": k for k, v in dumped.items() if v is None},
                    "#v": "model_version",
                },
                ExpressionAttributeValues={**values, ":zero": 0, ":one": 1},
                ReturnValues="UPDATED_NEW",
            )
        except Exception as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return None
            raise
        return int(response["Attributes"]["model_version"])

    def promote_from(self, record: ModelRecord, seen: LiveModel | None) -> int | None:
        """:meth:`promote_many` for one customer."""
        return self.promote_many([(record, seen)])[0]

    def promote_many(
        self, promotions: list[tuple[ModelRecord, LiveModel | None]]
    ) -> list[int | None]:
        """Make each ``record`` its customer's live model if the LIVE record is still
        ``seen`` (read just before) and older than this run: a conditional Put of the whole
        LIVE record each, whose new version is known beforehand so that the MODEL records
        can be batched; up to 100 of them to a TransactWriteItems request.

        Returns each new version, or None where the LIVE record changed since it was read
        (another run, or another delivery of this one): read again and decide again. A
        transaction is all or nothing, so the Puts whose condition held are sent again
        without those whose condition failed.
        """
        versions: list[int | None] = [None] * len(promotions)
        client = self._table.meta.client
        for start in range(0, len(promotions), _PUTS_PER_TRANSACTION):
            indexes = range(start, min(start + _PUTS_PER_TRANSACTION, len(promotions)))
            puts = {index: self._live_put(*promotions[index]) for index in indexes}
            pending = list(indexes)
            while pending:
                try:
                    client.transact_write_items(TransactItems=[puts[i] for i in pending])
                except ClientError as error:
                    if error_code(error) != "TransactionCanceledException":
                        raise
                    reasons = error.response.get("CancellationReasons") or []
                    codes = [reason.get("Code", "None") for reason in reasons]
                    if set(codes) - {"None", *_DECIDE_AGAIN} or len(codes) != len(pending):
                        raise
                    pending = [
                        index
                        for index, code in zip(pending, codes, strict=True)
                        if code not in _DECIDE_AGAIN
                    ]
                    continue
                for index in pending:
                    versions[index] = _next_version(promotions[index][1])
                pending = []
        return versions

    def _live_put(self, record: ModelRecord, seen: LiveModel | None) -> dict[str, Any]:
        """The conditional Put of :meth:`promote_many` (values as the table resource's
        client takes them, which serializes them). (A Put of
        the whole LIVE record rather than an Update setting each field: the same record,
        and moto parses a SET of twenty fields for seven times as long.)"""
        live = stored(record, exclude={"status", "model_version"})
        live.update(
            record=LIVE,
            updated_at=datetime.now(UTC).isoformat(),
            model_version=_next_version(seen),
            previous_model_s3_uri=seen.model_s3_uri if seen is not None else None,
        )
        values: dict[str, Any] = {":run_id": record.run_id}
        condition = "(attribute_not_exists(#run_id) OR #run_id < :run_id) AND " + (
            "attribute_not_exists(#model_version)"
            if seen is None
            else "#model_version = :seen_version"
        )
        if seen is not None:
            values[":seen_version"] = seen.model_version
        return {
            "Put": {
                "TableName": self._table.name,
                "Item": to_item(live),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {
                    "#run_id": "run_id",
                    "#model_version": "model_version",
                },
                "ExpressionAttributeValues": values,
            }
        }

    def hold_back(self, record: ModelRecord, reason: str) -> bool:
        """Note on the customer's LIVE record that ``record`` was not made live, and why
        (:class:`HeldBackModel`). False, noting nothing, when the customer has no live
        model, or the live model or the model already noted is from this run or a newer
        one (a redelivery, or runs registering out of order)."""
        held = HeldBackModel(
            run_id=record.run_id,
            status=record.status,
            trained_at=record.trained_at,
            data_end=record.data_end,
            reason=reason,
        )
        try:
            self._table.update_item(
                Key={"customer_id": record.customer_id, "record": LIVE},
                UpdateExpression="SET #held = :held",
                ConditionExpression=(
                    "attribute_exists(#version) AND #run_id < :run_id AND "
                    "(attribute_not_exists(#held) OR #held.#run_id < :run_id)"
                ),
                ExpressionAttributeNames={
                    "#held": "held_back",
                    "#version": "model_version",
                    "#run_id": "run_id",
                },
                ExpressionAttributeValues={
                    ":held": to_item(held.model_dump(mode="json")),
                    ":run_id": record.run_id,
                },
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def record_many(self, records: list[ModelRecord]) -> None:
        """Write MODEL records once their decision is made (the promotion's condition was
        on the LIVE record), 25 to a BatchWriteItem request. Idempotent like :meth:`record`."""
        with self._table.batch_writer() as batch:
            for record in records:
                item = {"record": MODEL_PREFIX + record.run_id, **stored(record)}
                batch.put_item(Item=to_item(item))

    def states(self, customer_ids: list[str], run_id: str) -> dict[str, CustomerState]:
        """Each customer's LIVE record and this run's MODEL record, by BatchGetItem."""
        states = {customer_id: CustomerState() for customer_id in customer_ids}
        client = self._table.meta.client
        for start in range(0, len(customer_ids), _CUSTOMERS_PER_BATCH_GET):
            keys = [
                {"customer_id": customer_id, "record": record}
                for customer_id in customer_ids[start : start + _CUSTOMERS_PER_BATCH_GET]
                for record in (LIVE, MODEL_PREFIX + run_id)
            ]
            request: dict[str, Any] = {self._table.name: {"Keys": keys, "ConsistentRead": True}}
            while request:
                answer = client.batch_get_item(RequestItems=request)
                for item in answer.get("Responses", {}).get(self._table.name, []):
                    state = states[str(item["customer_id"])]
                    values = from_item(item)
                    try:
                        if item["record"] == LIVE:
                            state.live = LiveModel.model_validate(values)
                        else:
                            state.decided = ModelRecord.model_validate(values)
                    except ValidationError as error:
                        state.unreadable = (
                            f"its {item['record']} record in the registry is malformed: "
                            f"{error.error_count()} errors, first "
                            f"{'.'.join(map(str, error.errors()[0]['loc']))}: "
                            f"{error.errors()[0]['msg']}"
                        )
                request = answer.get("UnprocessedKeys") or {}
        return states

    # -- registration progress per run ---------------------------------------------------

    @staticmethod
    def _run_key(run_id: str, record: str) -> dict[str, str]:
        return {"customer_id": RUN_PARTITION_PREFIX + run_id, "record": record}

    def start_run(self, run_id: str, training_job: str, chunks_total: int, lost: int) -> None:
        """Create (or, for a repeated event, keep) the run's record with its chunk count.
        Counters already added by chunks are kept."""
        self._table.update_item(
            Key=self._run_key(run_id, RUN_RECORD),
            UpdateExpression=(
                "SET run_id = :run_id, training_job = :job, chunks_total = :total, "
                "started_at = if_not_exists(started_at, :now), lost_at_start = :lost"
            ),
            ExpressionAttributeValues={
                ":run_id": run_id,
                ":job": training_job,
                ":total": chunks_total,
                ":now": datetime.now(UTC).isoformat(),
                ":lost": lost,
            },
        )

    def finish_chunk(
        self,
        run_id: str,
        chunk_id: str,
        counts: ChunkCounts,
        notes: Any,
        number: int,
    ) -> bool:
        """Record a chunk done, with its outcomes, and count it in its run exactly once.
        False when it was counted before.

        The chunk's record is written first (the same record on every delivery), then one
        conditional UpdateItem of the run's record adds the chunk's counts to its totals
        and the chunk's ``number`` to the set of chunks counted, unless the set has it: so
        the run's progress is one read, whatever its chunk count."""
        record = {
            **self._run_key(run_id, CHUNK_PREFIX + chunk_id),
            "counts": counts.model_dump(),
            "notes": notes,
            "finished_at": datetime.now(UTC).isoformat(),
        }
        self._table.put_item(Item=to_item(record))
        # The run's totals: each count the chunk kept (None where it did not), one chunk.
        added: dict[str, Any] = {
            name: value for name, value in counts.model_dump().items() if value is not None
        }
        added |= {"chunks_done": 1, COUNTED_CHUNKS: {number}}
        try:
            self._table.update_item(
                Key=self._run_key(run_id, RUN_RECORD),
                UpdateExpression="ADD " + ", ".join(f"#{n} :{n}" for n in added),
                ConditionExpression=f"NOT contains(#{COUNTED_CHUNKS}, :number)",
                ExpressionAttributeNames={f"#{n}": n for n in added},
                ExpressionAttributeValues={f":{n}": v for n, v in added.items()}
                | {":number": number},
            )
        except ClientError as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def record_chunk_failure(self, run_id: str, failure: FailedChunk) -> None:
        """Keep a chunk's failed delivery (the last one's replaces the one before)."""
        self._table.put_item(
            Item=to_item(
                {
                    **self._run_key(run_id, FAILED_CHUNK_PREFIX + failure.chunk_id),
                    **failure.model_dump(mode="json"),
                }
            )
        )

    def failed_chunks(self, run_id: str) -> list[FailedChunk]:
        """The run's chunks whose last delivery failed, by number (one Query: few)."""
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("customer_id").eq(RUN_PARTITION_PREFIX + run_id)
            & Key("record").begins_with(FAILED_CHUNK_PREFIX),
            "ConsistentRead": True,
        }
        found: list[FailedChunk] = []
        while True:
            page = self._table.query(**query)
            found += [FailedChunk.model_validate(from_item(i)) for i in page.get("Items", [])]
            if "LastEvaluatedKey" not in page:
                return sorted(found, key=lambda failure: failure.number)
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def forget_chunk_failure(self, run_id: str, chunk_id: str) -> None:
        """A re-driven chunk's failure: its next delivery tells afresh."""
        self._table.delete_item(Key=self._run_key(run_id, FAILED_CHUNK_PREFIX + chunk_id))

    def mark_registered_if_complete(self, run_id: str) -> bool:
        """Set the run's ``registered_at`` once every chunk is recorded; True for the one
        call that set it."""
        run = self.run(run_id)
        if run is None or run.complete or run.chunks_done < run.chunks_total:
            return False
        try:
            self._table.update_item(
                Key=self._run_key(run_id, RUN_RECORD),
                UpdateExpression="SET registered_at = :now",
                ConditionExpression=(
                    "attribute_exists(chunks_total) AND attribute_not_exists(registered_at)"
                ),
                ExpressionAttributeValues={":now": datetime.now(UTC).isoformat()},
            )
        except Exception as error:
            if error_code(error) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def run(self, run_id: str) -> RunRegistration | None:
        """The run's registration: its record, with its chunks' outcomes added up."""
        item = self._table.get_item(Key=self._run_key(run_id, RUN_RECORD), ConsistentRead=True).get(
            "Item"
        )
        # Only start_run gives the record its fields; until then the run has not started
        # registering.
        if not item or "chunks_total" not in item:
            return None
        values = from_item(item)
        # Each chunk added its counts to the record as it finished (finish_chunk).
        totals = {name: values.pop(name, 0) for name in ChunkCounts.model_fields}
        chunks_done = values.pop("chunks_done", 0)
        values["counted_chunks"] = {int(n) for n in values.pop(COUNTED_CHUNKS, set())}
        totals["lost"] += values.pop("lost_at_start", 0)
        return RunRegistration.model_validate({**values, **totals, "chunks_done": chunks_done})

    def live(self, customer_id: str) -> LiveModel | None:
        try:
            found = self._table.get_item(Key={"customer_id": customer_id, "record": LIVE})
        except (EndpointUnreachableError, HTTPClientError) as error:
            raise RegistryUnavailableError("the model registry cannot be reached") from error
        except ClientError as error:
            if error_code(error) in _UNAVAILABLE_CODES:
                raise RegistryUnavailableError(
                    f"the model registry is busy or failing ({error_code(error)})"
                ) from error
            raise
        item = found.get("Item")
        return LiveModel.model_validate(from_item(item)) if item else None

    def model(self, customer_id: str, run_id: str) -> ModelRecord | None:
        key = {"customer_id": customer_id, "record": MODEL_PREFIX + run_id}
        item = self._table.get_item(Key=key).get("Item")
        return ModelRecord.model_validate(from_item(item)) if item else None

    def models(self, customer_id: str) -> list[ModelRecord]:
        """Every recorded model of a customer, oldest run first."""
        from boto3.dynamodb.conditions import Key

        records: list[ModelRecord] = []
        query: dict[str, Any] = {
            "KeyConditionExpression": Key("customer_id").eq(customer_id)
            & Key("record").begins_with(MODEL_PREFIX)
        }
        while True:
            page = self._table.query(**query)
            records.extend(ModelRecord.model_validate(from_item(i)) for i in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return records
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]
