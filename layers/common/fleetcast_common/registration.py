"""Registering a finished training job's models, fanned out in bounded chunks.

The training job writes each model archive once, under its final key (see
``layout.checkpoint_prefix``): registration copies nothing. When the job ends, the
register-models function (the coordinator) reads the instances' manifests and splits
them into chunks of at most ``chunk_size`` customers (:func:`plan_registration`); each
chunk is an SQS message, and the register-chunk function registers one
(:func:`register_chunk`): for each customer it records the model and promotes it to live
unless it is worse than seasonal naive or a newer run is live already
(:mod:`fleetcast_common.promotion`, where the conditional write on the customer's LIVE
record decides).

A job that failed (a crashed or killed instance, a spot interruption, a timeout) is
registered too: its finished instances' manifests say what they trained, and an archive
of an instance that left no manifest is used only once it has been re-read and checked
(it is this customer's and this run's): such archives make chunks of their own. Every
customer that was sent to the job and got neither is *lost*, with the reason, in the
run's registration record (:func:`registration_key`), written by the coordinator.

The run's progress (chunks done of total, and what they did) is a record in the
registry table, counted once per chunk whatever the redeliveries; the run is registered
when the last chunk is counted.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from pydantic import BaseModel, Field

from fleetcast_common import storage
from fleetcast_common.processing_report import customers_sent
from fleetcast_common.promotion import CustomerRegistration, decide_all, model_record
from fleetcast_common.registry import (
    ChunkCounts,
    CustomerState,
    ModelRecord,
    ModelRegistry,
    ModelStatus,
)
from fleetcast_contracts import layout
from fleetcast_contracts.model_archive import read_archive
from fleetcast_contracts.training import (
    MANIFEST_PAGE_SIZE,
    host_of_manifest,
    is_manifest_name,
    manifest_page_name,
    manifest_summary_name,
)
from fleetcast_contracts.training_manifest import (
    CustomerOutcome,
    CustomerResult,
    ManifestPage,
    ManifestSummary,
    TrainingManifest,
)

# Registration is I/O bound: a few small requests per customer.
PARALLEL_REQUESTS = 16
REGISTRATION_FILE = "registration.json"


def registration_key(run_id: str) -> str:
    """The run's registration record: the :class:`RegistrationPlan` its coordinator wrote."""
    return layout.run_prefix(run_id) + REGISTRATION_FILE


class LostCustomer(BaseModel):
    """A customer sent to the training job that has no model from it and no manifest
    entry saying why: its instance failed, or its archive is unusable."""

    customer_id: str
    reason: str


class RegistrationChunk(BaseModel):
    """One bounded piece of a run's registration: an SQS message's body.

    Either a slice ``[start, stop)`` of one instance's manifest, or (for a failed job)
    customers whose archives no manifest listed.
    """

    run_id: str
    training_job: str
    chunk_id: str
    manifest_key: str | None = None
    start: int = 0
    stop: int = 0
    unlisted: list[str] = Field(default_factory=list)
    # Its place in the run's plan, by which the run's record counts it once.
    number: int

    @property
    def size(self) -> int:
        return len(self.unlisted) if self.manifest_key is None else self.stop - self.start


class RegistrationPlan(BaseModel):
    """The run's registration record, written by the coordinator before any chunk runs."""

    run_id: str
    training_job: str
    hosts_reporting: int
    chunks: int
    chunk_size: int
    customers_to_register: int = Field(
        default=0, description="trained customers in the manifests, plus unlisted archives"
    )
    job_failure: str | None = Field(
        default=None, description="why the training job failed or stopped, if it did"
    )
    failures: list[CustomerResult] = Field(description="customers the manifests say failed")
    lost: list[LostCustomer] = Field(default_factory=list)
    implausible_periods: int = Field(
        default=0,
        description="the trained customers' periods training left out of fitting as "
        "implausible (a meter's glitch), added up",
    )


class ChunkReport(BaseModel):
    """What one chunk did."""

    chunk_id: str
    counts: ChunkCounts
    first_delivery: bool = Field(description="False when an earlier delivery counted it")
    run_registered: bool = Field(description="this chunk was the run's last")
    failures: list[CustomerResult]
    lost: list[LostCustomer]
    customers: list[CustomerRegistration]


def chunk_slices(total: int, size: int) -> list[tuple[int, int]]:
    """``[start, stop)`` slices of at most ``size`` covering ``range(total)``; none for 0."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, got {size}")
    return [(start, min(start + size, total)) for start in range(0, total, size)]


def plan_chunks(
    run_id: str,
    training_job: str,
    manifest_sizes: dict[str, int],
    unlisted: list[str],
    size: int,
) -> list[RegistrationChunk]:
    """Chunks of at most ``size`` customers: slices of each manifest (by key), then the
    unlisted archives. Chunk ids are deterministic, so a repeated event plans the same."""
    slices: list[dict[str, Any]] = [
        {
            "chunk_id": f"{posixpath.basename(key)}:{start}-{stop}",
            "manifest_key": key,
            "start": start,
            "stop": stop,
        }
        for key, total in sorted(manifest_sizes.items())
        for start, stop in chunk_slices(total, size)
    ]
    ordered = sorted(unlisted)
    slices += [
        {"chunk_id": f"unlisted:{start}-{stop}", "unlisted": ordered[start:stop]}
        for start, stop in chunk_slices(len(ordered), size)
    ]
    return [
        RegistrationChunk(run_id=run_id, training_job=training_job, number=number, **fields)
        for number, fields in enumerate(slices)
    ]


def read_manifests(s3: Any, bucket: str, run_id: str) -> list[TrainingManifest]:
    return [_read_manifest(s3, bucket, key) for key in _manifest_keys(s3, bucket, run_id)]


def _manifest_keys(s3: Any, bucket: str, run_id: str) -> list[str]:
    """One listing of the manifests' own prefix: the run's archives are not listed."""
    return [
        key
        for key in storage.keys_under(s3, bucket, layout.manifest_prefix(run_id))
        if is_manifest_name(posixpath.basename(key))
    ]


def _read_manifest(s3: Any, bucket: str, key: str) -> TrainingManifest:
    return TrainingManifest.model_validate_json(storage.read_text(s3, bucket, key))


def _manifest_slice(
    s3: Any, bucket: str, key: str, start: int, stop: int, page_size: int = MANIFEST_PAGE_SIZE
) -> TrainingManifest:
    """Customers ``[start, stop)`` of the manifest at ``key``, read from the pages that
    cover them: a chunk's reads are bounded by its size, whatever the instance's shard."""
    pages = []
    for number in range(start // page_size, (stop - 1) // page_size + 1):
        name = partial(manifest_page_name, page=number)
        page = ManifestPage.model_validate_json(_beside_manifest(s3, bucket, key, name))
        if page.first != number * page_size:
            raise ManifestPartError(
                f"page {number} beside {key} starts at customer {page.first}, not at "
                f"{number * page_size}: the training job's pages do not match its manifest"
            )
        pages.append(page)
    customers = [customer for page in pages for customer in page.customers]
    offset = pages[0].first
    return pages[0].model_copy(update={"customers": customers[start - offset : stop - offset]})


class ManifestPartError(Exception):
    """A page or summary the training job writes beside each manifest is missing or does
    not match it: the chunk fails, is retried, then dead-lettered (an alarm)."""


def _beside_manifest(s3: Any, bucket: str, key: str, name_of: Callable[[str], str]) -> str:
    """The text of the file its instance wrote beside the manifest at ``key`` (named by
    ``name_of`` from the instance's host)."""
    prefix = key.removesuffix(posixpath.basename(key))
    beside = prefix + name_of(host_of_manifest(posixpath.basename(key)))
    # Only a missing key is "not written": register-chunk's role may list models/ (the
    # template grants s3:ListBucket there), so S3 answers 404; AccessDenied is a grant
    # missing, and fails as it is.
    text = storage.read_text_if_exists(s3, bucket, beside)
    if text is None:
        raise ManifestPartError(
            f"{beside} is missing: the training job writes it beside {key} before the "
            "manifest, so this run's checkpoints are incomplete"
        )
    return text


def _customers_in(keys: list[str], suffix: str) -> dict[str, str]:
    """``{customer_id: key}`` of the objects named ``{customer_id}{suffix}``."""
    found = {}
    for key in keys:
        customer_id = layout.customer_id_from_file_name(posixpath.basename(key), suffix)
        if customer_id is not None:
            found[customer_id] = key
    return found


def plan_registration(
    run_id: str,
    training_job: str,
    bucket: str,
    chunk_size: int,
    s3: Any,
    job_failure: str | None = None,
) -> tuple[RegistrationPlan, list[RegistrationChunk]]:
    """The coordinator's work: the run's chunks, and its record (failures, lost customers).

    A completed job's plan reads each manifest's summary (counts and failures: its work
    grows with instances and failures, not customers). A failed job's reads the manifests, and lists the run's
    archives (keys only, 1000 a request) and reads processing's summary to find the
    archives no manifest listed and the customers nothing was written for;
    ``job_failure`` is why it failed and becomes their reason.
    """
    keys = _manifest_keys(s3, bucket, run_id)
    unlisted: list[str] = []
    lost: list[LostCustomer] = []
    if job_failure is None:
        summaries = {key: _manifest_summary(s3, bucket, key) for key in keys}
    else:
        manifests = {key: _read_manifest(s3, bucket, key) for key in keys}
        summaries = {key: ManifestSummary.of(m) for key, m in manifests.items()}
        reported = {r.customer_id for m in manifests.values() for r in m.customers}
        archives = _customers_in(
            list(storage.keys_under(s3, bucket, layout.checkpoint_prefix(run_id))),
            layout.MODEL_ARCHIVE_SUFFIX,
        )
        unlisted = sorted(archives.keys() - reported)
        sent = set(customers_sent(s3, bucket, run_id))
        why = f"the training job failed before its model was written: {job_failure}"
        lost = [
            LostCustomer(customer_id=customer_id, reason=why)
            for customer_id in sorted(sent - reported - archives.keys())
        ]
    chunks = plan_chunks(
        run_id,
        training_job,
        {key: summary.customers for key, summary in summaries.items()},
        unlisted,
        chunk_size,
    )
    plan = RegistrationPlan(
        run_id=run_id,
        training_job=training_job,
        hosts_reporting=len(summaries),
        chunks=len(chunks),
        chunk_size=chunk_size,
        customers_to_register=len(unlisted) + sum(s.trained for s in summaries.values()),
        job_failure=job_failure,
        failures=[failure for s in summaries.values() for failure in s.failures],
        lost=lost,
        implausible_periods=sum(s.implausible_periods for s in summaries.values()),
    )
    return plan, chunks


def _manifest_summary(s3: Any, bucket: str, key: str) -> ManifestSummary:
    """The summary the instance wrote beside its manifest at ``key``."""
    return ManifestSummary.model_validate_json(
        _beside_manifest(s3, bucket, key, manifest_summary_name)
    )


def start_registration(
    plan: RegistrationPlan, s3: Any, bucket: str, registry: ModelRegistry
) -> bool:
    """Keep the plan and open the run's progress record before any chunk is sent. True
    when there is nothing to register, and the run is marked registered now."""
    write_registration_record(s3, bucket, plan)
    registry.start_run(plan.run_id, plan.training_job, plan.chunks, len(plan.lost))
    return plan.chunks == 0 and registry.mark_registered_if_complete(plan.run_id)


def _checked_archive(
    s3: Any, bucket: str, key: str, customer_id: str, run_id: str
) -> CustomerResult | LostCustomer:
    """An archive no manifest lists, as a trained result once it reads back whole and is
    this customer's model from this run; else why it cannot be used."""
    try:
        model_json, metadata = read_archive(storage.read_bytes(s3, bucket, key))
        if not isinstance(json.loads(model_json), dict):
            raise ValueError("its model is not a JSON object")
    except ValueError as error:
        return LostCustomer(
            customer_id=customer_id, reason=f"its checkpointed archive is unusable: {error}"
        )
    if (metadata.customer_id, metadata.run_id) != (customer_id, run_id):
        return LostCustomer(
            customer_id=customer_id,
            reason=(
                f"its checkpointed archive is customer {metadata.customer_id!r}'s model "
                f"from run {metadata.run_id}"
            ),
        )
    return CustomerResult(
        customer_id=customer_id,
        outcome=CustomerOutcome.TRAINED,
        rows=metadata.rows,
        metrics=metadata.metrics,
        metadata=metadata,
    )


def _chunk_results(
    chunk: RegistrationChunk, bucket: str, s3: Any
) -> tuple[list[CustomerResult], list[LostCustomer], set[str]]:
    """The chunk's customers as results (trained, failed, or recovered from a checked
    archive), the customers it found lost, and which results were recovered."""
    if chunk.manifest_key is not None:
        manifest = _manifest_slice(s3, bucket, chunk.manifest_key, chunk.start, chunk.stop)
        if manifest.run_id != chunk.run_id:
            raise ValueError(
                f"{chunk.manifest_key} is run {manifest.run_id}'s manifest, not {chunk.run_id}'s"
            )
        return manifest.customers, [], set()
    prefix = layout.checkpoint_prefix(chunk.run_id)
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        checked = list(
            pool.map(
                lambda customer_id: _checked_archive(
                    s3,
                    bucket,
                    prefix + f"{customer_id}{layout.MODEL_ARCHIVE_SUFFIX}",
                    customer_id,
                    chunk.run_id,
                ),
                chunk.unlisted,
            )
        )
    recovered = [c for c in checked if isinstance(c, CustomerResult)]
    lost = [c for c in checked if isinstance(c, LostCustomer)]
    return recovered, lost, {r.customer_id for r in recovered}


def register_chunk(
    chunk: RegistrationChunk,
    bucket: str,
    s3: Any,
    registry: ModelRegistry,
) -> ChunkReport:
    """Register one chunk: idempotent under redelivery (decisions already made stand, and
    the chunk is counted in its run once), bounded by the chunk's size."""
    results, lost, recovered = _chunk_results(chunk, bucket, s3)
    failures = [r for r in results if r.outcome is CustomerOutcome.FAILED]
    outcomes: list[CustomerRegistration] = []
    records: list[ModelRecord] = []
    trained = [r for r in results if r.outcome is not CustomerOutcome.FAILED]
    for result in trained:
        if result.metadata is None:
            outcomes.append(
                CustomerRegistration(
                    customer_id=result.customer_id, status=None, note="manifest has no metadata"
                )
            )
    decidable = [
        model_record(r, chunk.run_id, chunk.training_job, bucket)
        for r in trained
        if r.metadata is not None
    ]
    states = registry.states([r.customer_id for r in decidable], chunk.run_id)
    # A customer whose record cannot be read fails alone: the chunk registers the rest
    # (failing the chunk would leave them all unregistered, at every delivery).
    lost += [
        LostCustomer(customer_id=r.customer_id, reason=f"not registered: {problem}")
        for r in decidable
        if (problem := states[r.customer_id].unreadable)
    ]
    decidable = [r for r in decidable if not states[r.customer_id].unreadable]
    decided = decide_all(decidable, states, registry, chunk.run_id)
    for registration, unconditional in decided:
        outcomes.append(
            registration.model_copy(update={"recovered": registration.customer_id in recovered})
        )
        if unconditional is not None:
            records.append(unconditional)
        if registration.status is ModelStatus.REJECTED and unconditional is not None:
            # Before its MODEL record: a redelivery that finds none decides, and notes, again.
            registry.hold_back(unconditional, registration.note or "rejected")
    registry.record_many(records)
    _retire_archives(s3, bucket, _retired_archives(decided, states))

    counts = _chunk_counts(
        outcomes,
        trained=len(trained),
        failed=len(failures),
        recovered=len(recovered),
        lost=len(lost),
    )
    first = registry.finish_chunk(
        chunk.run_id,
        chunk.chunk_id,
        counts,
        {"lost": [c.model_dump() for c in lost]} if lost else {},
        chunk.number,
    )
    return ChunkReport(
        chunk_id=chunk.chunk_id,
        counts=counts,
        first_delivery=first,
        # Tried on every delivery: a delivery that stopped between the two still ends it.
        run_registered=registry.mark_registered_if_complete(chunk.run_id),
        failures=failures,
        lost=lost,
        customers=outcomes,
    )


def _chunk_counts(
    outcomes: list[CustomerRegistration], *, trained: int, failed: int, recovered: int, lost: int
) -> ChunkCounts:
    def count(status: ModelStatus) -> int:
        return sum(1 for o in outcomes if o.status is status)

    def now(status: ModelStatus) -> int:
        return sum(1 for o in outcomes if (o.status or o.earlier_status) is status)

    return ChunkCounts(
        trained=trained,
        registered=count(ModelStatus.LIVE),
        rejected=count(ModelStatus.REJECTED),
        superseded=count(ModelStatus.SUPERSEDED),
        repeated=sum(1 for o in outcomes if o.repeated),
        failed_training=failed,
        recovered=recovered,
        lost=lost,
        models_decided=sum(now(status) for status in ModelStatus),
        models_live=now(ModelStatus.LIVE),
    )


def uncounted_chunks(
    run_id: str, bucket: str, s3: Any, registry: ModelRegistry
) -> list[RegistrationChunk] | None:
    """The chunks of a run whose registration has started that its record has not
    counted, planned again from the run's own registration record (their ids and
    numbers are deterministic); every chunk counted but the run not marked registered (a
    delivery stopped in between): the last one, whose repeat marks it. None when they
    cannot be planned again (no record, or one the manifests no longer match)."""
    progress = registry.run(run_id)
    plan = read_registration_record(s3, bucket, run_id)
    if progress is None or plan is None or not plan.chunks:
        return None
    planned = plan_registration(
        run_id, plan.training_job, bucket, plan.chunk_size, s3, plan.job_failure
    )[1]
    if len(planned) != plan.chunks:
        return None
    missing = [c for c in planned if c.number not in progress.counted_chunks]
    return missing or planned[-1:]


def _retired_archives(
    decided: list[tuple[CustomerRegistration, ModelRecord | None]],
    states: dict[str, CustomerState],
) -> list[str]:
    """The archives this delivery's decisions leave the registry unable to serve or roll
    back to: each rejected or superseded model's (never live), and for each promotion the
    archive that was the previous live model until now (the new live model's previous is
    the one it replaced, which stays). ``states`` are the reads the promotions were
    decided on."""
    retired = []
    for registration, record in decided:
        if record is None or registration.status is None:
            continue  # decided by an earlier delivery, which retired what it had to
        if registration.status in (ModelStatus.REJECTED, ModelStatus.SUPERSEDED):
            retired.append(record.model_s3_uri)
        elif registration.status is ModelStatus.LIVE:
            replaced = states[registration.customer_id].live
            if replaced is not None and replaced.previous_model_s3_uri:
                retired.append(replaced.previous_model_s3_uri)
    return retired


def _retire_archives(s3: Any, bucket: str, uris: list[str]) -> None:
    """Tag each archive for the artifacts bucket's lifecycle rule, which expires it."""
    keys = []
    for uri in uris:
        archive_bucket, _, key = uri.removeprefix("s3://").partition("/")
        if archive_bucket == bucket and key.startswith(layout.MODELS_PREFIX):
            keys.append(key)
    with ThreadPoolExecutor(PARALLEL_REQUESTS) as pool:
        list(
            pool.map(
                lambda key: storage.tag_for_retention(
                    s3, bucket, key, layout.RETIRED_MODEL_RETENTION
                ),
                keys,
            )
        )


def write_registration_record(s3: Any, bucket: str, plan: RegistrationPlan) -> None:
    """Kept for ``fleetcast status``: a repeated event rewrites it with the same plan."""
    storage.write_text(s3, bucket, registration_key(plan.run_id), plan.model_dump_json(indent=1))


def read_registration_record(s3: Any, bucket: str, run_id: str) -> RegistrationPlan | None:
    text = storage.read_text_if_exists(s3, bucket, registration_key(run_id))
    return None if text is None else RegistrationPlan.model_validate_json(text)
