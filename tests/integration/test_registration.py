"""Registering a training job's models, chunk by chunk: S3, DynamoDB and SQS on a moto
server. The coordinator's plan and each chunk run in this process; the SQS tests deliver
the chunks as Lambda's event source mapping would (fleetcast.embedded.queues)."""

import importlib.util
import io
import json
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.typing import LambdaContext
from model_helpers import chosen
from rich.console import Console
from shard_helpers import processing_summary_json
from template_helpers import load_template

from fleetcast.embedded.lifecycle import expire, lifecycle_rules
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.queues import event_source_mappings, failed_message_ids, sqs_event
from fleetcast.embedded.template import LocalTemplate
from fleetcast.status import RunStatus, customers_done, run_status
from fleetcast.status_table import status_table
from fleetcast_common.chunk_queue import MAX_RECEIVES, redrive_failed_chunks
from fleetcast_common.promotion import CustomerRegistration
from fleetcast_common.registration import (
    ChunkReport,
    LostCustomer,
    RegistrationPlan,
    plan_registration,
    read_registration_record,
    register_chunk,
    start_registration,
)
from fleetcast_common.registry import ModelRegistry, ModelStatus, RunRegistration
from fleetcast_common.registry_records import to_item
from fleetcast_contracts import layout
from fleetcast_contracts.model_archive import (
    Backtest,
    HoldoutMetrics,
    ModelMetadata,
    write_archive,
)
from fleetcast_contracts.stages import PROCESSING, TRAINING
from fleetcast_contracts.training import (
    MANIFEST_PAGE_SIZE,
    manifest_page_name,
    manifest_summary_name,
    progress_name,
)
from fleetcast_contracts.training_manifest import (
    CustomerOutcome,
    CustomerResult,
    ManifestSummary,
    TrainingManifest,
    TrainingProgress,
    manifest_pages,
)

ROOT = Path(__file__).resolve().parents[2]
RUN_1, RUN_2, RUN_0, RUN_3 = (
    "q0000000907-20261129t100000",
    "q0000000908-20261129t110000",
    "q0000000906-20261129t090000",
    "q0000000911-20261129t120000",
)
GOOD = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.03, mae=5.0, naive_smape=0.05, naive_mae=8.0
)
BAD = HoldoutMetrics(
    windows=2, holdout_days=7, smape=0.30, mae=50.0, naive_smape=0.05, naive_mae=8.0
)


@pytest.fixture
def world(registry_table: Any) -> dict[str, Any]:
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    return {
        "s3": s3,
        "bucket": bucket,
        "registry": ModelRegistry(registry_table),
        "registry_table": registry_table,
    }


def trained(
    s3: Any,
    bucket: str,
    run_id: str,
    outcomes: dict[str, HoldoutMetrics | None],
    hosts: int = 2,
    implausible: dict[str, int] | None = None,
) -> None:
    """What a finished training job leaves in its checkpoint prefix (``implausible``:
    trained customers' periods left out of fitting as implausible)."""
    results = []
    for customer_id, metrics in outcomes.items():
        if metrics is None:
            results.append(
                CustomerResult(
                    customer_id=customer_id, outcome=CustomerOutcome.FAILED, reason="only 3 rows"
                )
            )
            continue
        metadata = ModelMetadata(
            **chosen(),
            customer_id=customer_id,
            run_id=run_id,
            trained_at=datetime(2026, 11, 29, tzinfo=UTC),
            data_start=date(2024, 1, 1),
            data_end=date(2024, 6, 1),
            rows=150,
            metrics=metrics,
            library_versions={"prophet": "1.5.0"},
        )
        s3.put_object(
            Bucket=bucket,
            Key=layout.checkpoint_prefix(run_id) + f"{customer_id}.tar.gz",
            Body=b"archive",
        )
        results.append(
            CustomerResult(
                customer_id=customer_id,
                outcome=CustomerOutcome.TRAINED,
                metrics=metrics,
                metadata=metadata,
                implausible_periods=(implausible or {}).get(customer_id),
            )
        )
    host_names = [f"algo-{i + 1}" for i in range(hosts)]
    for index, host in enumerate(host_names):
        manifest = TrainingManifest(
            run_id=run_id, host=host, hosts=host_names, customers=results[index::hosts]
        )
        s3.put_object(
            Bucket=bucket,
            Key=layout.checkpoint_prefix(run_id) + f"manifest-{host}.json",
            Body=manifest.model_dump_json(),
        )
        # as the training job writes them beside its manifest
        summary = (manifest_summary_name(host), ManifestSummary.of(manifest))
        for name, page in [*manifest_pages(manifest), summary]:
            s3.put_object(
                Bucket=bucket,
                Key=layout.checkpoint_prefix(run_id) + name,
                Body=page.model_dump_json(),
            )


@dataclass
class Registered:
    """A run registered in this process: what the coordinator planned, what each chunk
    did, and the run's progress record."""

    plan: RegistrationPlan
    reports: list[ChunkReport]
    run: RunRegistration

    @property
    def customers(self) -> list[CustomerRegistration]:
        return [c for report in self.reports for c in report.customers]

    @property
    def lost(self) -> list[LostCustomer]:
        return sorted(
            self.plan.lost + [c for r in self.reports for c in r.lost], key=lambda c: c.customer_id
        )

    def count(self, field: str) -> int:
        """This delivery's count (the run record counts each chunk's first delivery)."""
        return sum(getattr(report.counts, field) for report in self.reports)


def register_run(
    s3: Any,
    bucket: str,
    registry: ModelRegistry,
    run_id: str,
    job_failure: str | None = None,
    chunk_size: int = 2,
) -> Registered:
    """What the coordinator and then every chunk's function do for one event."""
    job = f"fleetcast-t-{run_id}"
    plan, chunks = plan_registration(run_id, job, bucket, chunk_size, s3, job_failure)
    start_registration(plan, s3, bucket, registry)
    reports = [register_chunk(chunk, bucket, s3, registry) for chunk in chunks]
    run = registry.run(run_id)
    assert run is not None
    return Registered(plan, reports, run)


def register(world: dict[str, Any], run_id: str, job_failure: str | None = None) -> Registered:
    return register_run(world["s3"], world["bucket"], world["registry"], run_id, job_failure)


def _keys(world: dict[str, Any], prefix: str) -> list[str]:
    listed = world["s3"].list_objects_v2(Bucket=world["bucket"], Prefix=prefix)
    return sorted(o["Key"] for o in listed.get("Contents", []))


def test_trained_customers_go_live_where_training_wrote_them_and_nothing_is_copied(
    world: dict[str, Any],
) -> None:
    # Given a finished job: two customers trained, one failed
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD, "short": None})
    written = _keys(world, "")
    # When it is registered
    report = register(world, RUN_1)
    # Then both go live, at the keys the training job wrote, and the failure is reported
    assert (report.count("registered"), report.count("failed_training")) == (2, 1)
    assert report.plan.hosts_reporting == 2
    assert [f.customer_id for f in report.plan.failures] == ["short"]
    for customer_id in ("a", "b"):
        live = world["registry"].live(customer_id)
        assert live is not None and live.model_version == 1
        assert live.target_model == f"{RUN_1}/{customer_id}.tar.gz"
        assert layout.MODELS_PREFIX + live.target_model in written
    assert world["registry"].live("short") is None
    # And registration wrote no object but the run's record
    assert _keys(world, "") == sorted([*written, f"runs/{RUN_1}/registration.json"])


def test_the_run_is_registered_once_its_last_chunk_is_counted(world: dict[str, Any]) -> None:
    # Given a job of 7 customers on 2 instances, planned in chunks of at most 2
    customers = {f"c{i}": GOOD for i in range(7)}
    trained(world["s3"], world["bucket"], RUN_1, customers)
    plan, chunks = plan_registration(RUN_1, f"fleetcast-t-{RUN_1}", world["bucket"], 2, world["s3"])
    assert [c.size for c in chunks] == [2, 2, 2, 1]
    assert (plan.chunks, plan.customers_to_register) == (4, 7)
    assert not start_registration(plan, world["s3"], world["bucket"], world["registry"])
    # When every chunk but the last is registered, the run is not registered yet
    for chunk in chunks[:-1]:
        assert not register_chunk(
            chunk, world["bucket"], world["s3"], world["registry"]
        ).run_registered
    run = world["registry"].run(RUN_1)
    assert run is not None and (run.chunks_done, run.chunks_total, run.complete) == (3, 4, False)
    # Then the last chunk marks it registered, with every customer counted once
    last = register_chunk(chunks[-1], world["bucket"], world["s3"], world["registry"])
    assert last.run_registered
    run = world["registry"].run(RUN_1)
    assert run is not None and run.complete and (run.chunks_done, run.registered) == (4, 7)
    assert all(world["registry"].live(c) is not None for c in customers)


def test_a_redelivered_chunk_changes_nothing_and_is_counted_once(world: dict[str, Any]) -> None:
    # Given a run registered chunk by chunk
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD, "c": GOOD})
    plan, chunks = plan_registration(RUN_1, f"fleetcast-t-{RUN_1}", world["bucket"], 2, world["s3"])
    start_registration(plan, world["s3"], world["bucket"], world["registry"])
    first = [register_chunk(c, world["bucket"], world["s3"], world["registry"]) for c in chunks]
    # When SQS delivers one of its chunks again
    again = register_chunk(chunks[0], world["bucket"], world["s3"], world["registry"])
    # Then its customers are repeats, the chunk is not counted twice and no version moved
    assert all(r.first_delivery for r in first) and not again.first_delivery
    assert again.counts.repeated == chunks[0].size and again.counts.registered == 0
    run = world["registry"].run(RUN_1)
    assert run is not None and (run.chunks_done, run.registered, run.repeated) == (2, 3, 0)
    assert (run.models_decided, run.models_live) == (3, 3)
    for customer_id in ("a", "b", "c"):
        live = world["registry"].live(customer_id)
        assert live is not None and live.model_version == 1


def test_each_chunk_reads_only_the_manifest_pages_of_its_slice(world: dict[str, Any]) -> None:
    # Given an instance that trained more customers than a manifest page holds (one of
    # them failed)
    customers = [f"c{i:04d}" for i in range(MANIFEST_PAGE_SIZE + 10)]
    outcomes: dict[str, HoldoutMetrics | None] = {**dict.fromkeys(customers, GOOD), "c0007": None}
    trained(world["s3"], world["bucket"], RUN_1, outcomes, 1)
    # When its whole manifest is unreadable (a coordinator and chunks that read it would
    # fail)
    manifest_key = layout.checkpoint_prefix(RUN_1) + "manifest-algo-1.json"
    world["s3"].put_object(Bucket=world["bucket"], Key=manifest_key, Body=b"{not json")
    plan, chunks = plan_registration(
        RUN_1, f"fleetcast-t-{RUN_1}", world["bucket"], 100, world["s3"]
    )
    start_registration(plan, world["s3"], world["bucket"], world["registry"])
    # Then the coordinator planned from the summary, and every chunk registers its slice,
    # the one spanning two pages too, from the pages
    assert (plan.customers_to_register, [f.customer_id for f in plan.failures]) == (259, ["c0007"])
    assert [(c.start, c.stop) for c in chunks] == [(0, 100), (100, 200), (200, 260)]
    reports = [register_chunk(c, world["bucket"], world["s3"], world["registry"]) for c in chunks]
    assert [c.customer_id for r in reports for c in r.customers] == [
        c for c in customers if c != "c0007"
    ]
    run = world["registry"].run(RUN_1)
    assert run is not None and run.complete and run.registered == len(customers) - 1


def test_a_chunk_redelivered_after_its_decisions_still_counts_its_models(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a chunk whose first delivery decided every customer (c's model rejected,
    # being clearly worse than its live one), then stopped before the chunk was counted
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD, "c": GOOD})
    register(world, RUN_1)
    trained(world["s3"], world["bucket"], RUN_2, {"a": GOOD, "b": GOOD, "c": BAD}, hosts=1)
    plan, chunks = plan_registration(RUN_2, f"fleetcast-t-{RUN_2}", world["bucket"], 3, world["s3"])
    assert [chunk.size for chunk in chunks] == [3]
    start_registration(plan, world["s3"], world["bucket"], world["registry"])
    registry = world["registry"]

    def stopped(*args: Any, **kwargs: Any) -> bool:
        raise TimeoutError("the invocation timed out")

    with monkeypatch.context() as patched:
        patched.setattr(registry, "finish_chunk", stopped)
        with pytest.raises(TimeoutError):
            register_chunk(chunks[0], world["bucket"], world["s3"], registry)
    # When SQS delivers it again
    again = register_chunk(chunks[0], world["bucket"], world["s3"], registry)
    # Then this delivery decided nothing, but the run counts every model and what became
    # of it (what fleetcast status shows, read from the chunk records alone)
    assert again.first_delivery and again.counts.repeated == 3 and again.counts.registered == 0
    run = registry.run(RUN_2)
    assert run is not None and run.complete
    assert (run.models_decided, run.models_live) == (3, 2)


def test_a_repeated_event_registers_once(world: dict[str, Any]) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD})
    register(world, RUN_1)
    again = register(world, RUN_1)
    assert (again.count("registered"), again.count("repeated")) == (0, 1)
    assert (again.run.chunks_done, again.run.chunks_total, again.run.registered) == (1, 1, 1)
    live = world["registry"].live("a")
    assert live is not None and live.model_version == 1


def test_a_repeated_event_after_a_newer_run_went_live_changes_no_record(
    world: dict[str, Any],
) -> None:
    # Given run 1 registered, then run 2 for the same customers, one of whose run 1 model
    # would not pass the quality gate against a live model
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": BAD})
    trained(world["s3"], world["bucket"], RUN_2, {"a": GOOD, "b": GOOD})
    register(world, RUN_1)
    register(world, RUN_2)
    # When run 1's event is delivered again
    again = register(world, RUN_1)
    # Then it is a repeat: run 1 stays recorded as it was decided (a's went live, b's was
    # below the gate, first model or not)
    counts = tuple(again.count(f) for f in ("registered", "rejected", "superseded", "repeated"))
    assert counts == (0, 0, 0, 2)
    expected = {"a": (ModelStatus.LIVE, 1, 2), "b": (ModelStatus.REJECTED, None, 1)}
    for customer_id, (status, version, live_version) in expected.items():
        first = world["registry"].model(customer_id, RUN_1)
        assert first is not None
        assert (first.status, first.model_version) == (status, version)
        live = world["registry"].live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (RUN_2, live_version)


def test_a_clearly_worse_model_is_recorded_but_does_not_replace_the_live_one(
    world: dict[str, Any],
) -> None:
    # Given both customers live at version 1
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD})
    register(world, RUN_1)
    # When a new run makes a much worse model for a and a good one for b
    trained(world["s3"], world["bucket"], RUN_2, {"a": BAD, "b": GOOD})
    report = register(world, RUN_2)
    # Then a keeps version 1 (the worse model is recorded as rejected) and b moves to 2
    assert (report.count("registered"), report.count("rejected")) == (1, 1)
    assert (report.run.registered, report.run.rejected) == (1, 1)
    live_a, live_b = world["registry"].live("a"), world["registry"].live("b")
    assert live_a is not None and (live_a.model_version, live_a.run_id) == (1, RUN_1)
    assert live_b is not None and (live_b.model_version, live_b.run_id) == (2, RUN_2)
    rejected = world["registry"].model("a", RUN_2)
    assert rejected is not None and rejected.status is ModelStatus.REJECTED


def test_the_live_record_says_which_newer_model_was_held_back_until_one_goes_live(
    world: dict[str, Any],
) -> None:
    # Given a live at run 1, and run 2's much worse model of a rejected
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD})
    register(world, RUN_1)
    trained(world["s3"], world["bucket"], RUN_2, {"a": BAD, "b": GOOD})
    register(world, RUN_2)
    # Then a's live record names run 2's model and why it is not live; b's names none
    live_a, live_b = world["registry"].live("a"), world["registry"].live("b")
    assert live_a is not None and live_a.run_id == RUN_1
    assert live_a.held_back is not None
    assert (live_a.held_back.run_id, live_a.held_back.status) == (RUN_2, ModelStatus.REJECTED)
    assert "over seasonal naive's" in live_a.held_back.reason
    assert live_b is not None and live_b.held_back is None
    # And a redelivery of run 2, or an older run finishing late, leaves the note as it is
    register(world, RUN_2)
    trained(world["s3"], world["bucket"], RUN_0, {"a": BAD})
    register(world, RUN_0)
    assert world["registry"].live("a") == live_a
    # When a later run's model of a goes live
    trained(world["s3"], world["bucket"], RUN_3, {"a": GOOD})
    register(world, RUN_3)
    # Then the note is gone with the model it was about
    live = world["registry"].live("a")
    assert live is not None and (live.run_id, live.held_back) == (RUN_3, None)


def test_a_new_customers_first_model_below_the_gate_is_not_made_live(
    world: dict[str, Any],
) -> None:
    # Given a new customer whose first model is clearly worse than seasonal naive
    trained(world["s3"], world["bucket"], RUN_1, {"new": BAD})
    # When registered
    report = register(world, RUN_1)
    # Then it is recorded as rejected, like any model below the gate, and nothing is live
    assert (report.count("registered"), report.count("rejected")) == (0, 1)
    assert "seasonal naive" in (report.customers[0].note or "")
    assert world["registry"].live("new") is None


def test_a_backtested_model_is_gated_against_seasonal_naive_on_its_backtest(
    world: dict[str, Any],
) -> None:
    # Given backtested models on a series of mean level 100 (MAE 8 is WAPE 0.08): one
    # worse than seasonal naive by 2% of the level, one by 0.1% (equal within the gate's
    # 0.5%), and one as good
    def backtested(mae: float) -> HoldoutMetrics:
        return GOOD.model_copy(
            update={"windows": 3, "mae": mae, "wape": mae / 100, "naive_mae": 8.0}
        )

    models = {"worse": backtested(10.0), "level": backtested(8.1), "equal": backtested(8.0)}
    trained(world["s3"], world["bucket"], RUN_1, models)
    # When registered
    report = register(world, RUN_1)
    # Then only the one worse than naive by more than the tolerance is rejected: the
    # ratio of holdout-scored models does not apply
    assert (report.count("registered"), report.count("rejected")) == (2, 1)
    assert world["registry"].live("worse") is None
    assert world["registry"].live("level") is not None
    assert world["registry"].live("equal") is not None


def test_an_older_run_finishing_late_is_superseded(world: dict[str, Any]) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD})
    register(world, RUN_1)
    trained(world["s3"], world["bucket"], RUN_0, {"a": GOOD})
    report = register(world, RUN_0)
    assert report.count("superseded") == 1
    live = world["registry"].live("a")
    assert live is not None and live.run_id == RUN_1 and live.model_version == 1
    superseded = world["registry"].model("a", RUN_0)
    assert superseded is not None and superseded.status is ModelStatus.SUPERSEDED


RUN_4 = "q0000000912-20261129t130000"


def test_archives_the_registry_cannot_serve_or_roll_back_to_expire(
    world: dict[str, Any],
) -> None:
    # Issue 41: every run's archives were kept for ever. Given the artifacts bucket as the
    # template makes it (versioned, with its lifecycle rules)
    s3, bucket = world["s3"], world["bucket"]
    properties = load_template()["Resources"]["ArtifactsBucket"]["Properties"]
    s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    rules = lifecycle_rules(properties["LifecycleConfiguration"])
    s3.put_bucket_lifecycle_configuration(Bucket=bucket, LifecycleConfiguration={"Rules": rules})

    def archive(run_id: str, customer_id: str) -> str:
        return layout.checkpoint_prefix(run_id) + f"{customer_id}.tar.gz"

    # When a goes live three times (0, 1, then 3), run 2 finishes after run 3 (superseded,
    # a and b), and run 4's model for a is clearly worse (rejected)
    for run_id, outcomes in (
        (RUN_0, {"a": GOOD}),
        (RUN_1, {"a": GOOD}),
        (RUN_3, {"a": GOOD, "b": GOOD}),
        (RUN_2, {"a": GOOD, "b": GOOD}),
        (RUN_4, {"a": BAD}),
    ):
        trained(s3, bucket, run_id, outcomes)
        register(world, run_id)
    live = world["registry"].live("a")
    assert live is not None and (live.run_id, live.model_version) == (RUN_3, 3)
    # Then the live models and a's previous one (what it can be rolled back to) are kept
    assert live.previous_model_s3_uri == f"s3://{bucket}/{archive(RUN_1, 'a')}"
    kept = {archive(RUN_3, "a"), archive(RUN_3, "b"), archive(RUN_1, "a")}
    # And the rest are tagged retired: the one two promotions old, the superseded and the
    # rejected ones
    retired = {archive(RUN_0, "a"), archive(RUN_2, "a"), archive(RUN_2, "b"), archive(RUN_4, "a")}
    for key in kept | retired:
        tags = s3.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]
        expected = [{"Key": layout.RETENTION_TAG, "Value": layout.RETIRED_MODEL_RETENTION}]
        assert tags == (expected if key in retired else []), key
    # And the bucket's rule expires exactly those, once their days are up
    days = next(
        r["ExpirationInDays"]
        for r in properties["LifecycleConfiguration"]["Rules"]
        if r["Id"] == "ExpireRetiredModels"
    )
    now = datetime.now(UTC)
    assert expire(s3, bucket, now + timedelta(days=days - 1)) == []
    expired = expire(s3, bucket, now + timedelta(days=days, minutes=1))
    assert {e.key for e in expired} == retired
    assert {e.rule for e in expired} == {"ExpireRetiredModels"}
    listed = set(_keys(world, layout.MODELS_PREFIX))
    assert kept <= listed and not retired & listed
    # (manifests and pages are no archives: untouched)
    assert layout.checkpoint_prefix(RUN_0) + "manifest-algo-1.json" in listed


def test_a_promotion_decided_on_a_stale_read_is_refused(world: dict[str, Any]) -> None:
    # Given run 2 live for a, and run 1's record of a built as if nothing were live
    trained(world["s3"], world["bucket"], RUN_2, {"a": GOOD}, hosts=1)
    register(world, RUN_2)
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD}, hosts=1)
    registry: ModelRegistry = world["registry"]
    plan, (chunk,) = plan_registration(RUN_1, "job", world["bucket"], 5, world["s3"])
    start_registration(plan, world["s3"], world["bucket"], registry)
    live = registry.live("a")
    assert live is not None
    stale = live.model_copy(update={"run_id": RUN_0, "customer_id": "a"})
    record = registry.model("a", RUN_2)
    assert record is not None
    older = record.model_copy(update={"run_id": RUN_1, "model_version": None})
    # When it is promoted on the stale read (nothing live), or on the right version
    # Then the conditional update refuses both: the LIVE record stays run 2's
    assert registry.promote_from(older, None) is None
    assert registry.promote_from(older, stale) is None
    assert registry.model("a", RUN_1) is None
    after = registry.live("a")
    assert after is not None and (after.run_id, after.model_version) == (RUN_2, 1)
    # And registering the chunk properly decides superseded
    report = register_chunk(chunk, world["bucket"], world["s3"], registry)
    assert [c.status for c in report.customers] == [ModelStatus.SUPERSEDED]


def _archive(tmp_path: Path, customer_id: str, run_id: str) -> bytes:
    """A model archive as the training container writes it."""
    path = tmp_path / f"{customer_id}-{run_id}.tar.gz"
    metadata = ModelMetadata(
        **chosen(),
        customer_id=customer_id,
        run_id=run_id,
        trained_at=datetime(2026, 11, 29, tzinfo=UTC),
        data_start=date(2024, 1, 1),
        data_end=date(2024, 6, 1),
        rows=150,
        metrics=GOOD,
        library_versions={"prophet": "1.5.0"},
    )
    write_archive(path, '{"params": {}}', metadata)
    return path.read_bytes()


@pytest.fixture
def failed_job(world: dict[str, Any], tmp_path: Path) -> str:
    """A job whose first instance finished (a trained, short failed) and whose second
    was killed having checkpointed b, a truncated archive for c and, for d, an archive of
    another run; e was never reached."""
    s3, bucket = world["s3"], world["bucket"]
    trained(s3, bucket, RUN_1, {"a": GOOD, "short": None}, hosts=1)
    checkpoints = layout.checkpoint_prefix(RUN_1)
    s3.put_object(Bucket=bucket, Key=checkpoints + "b.tar.gz", Body=_archive(tmp_path, "b", RUN_1))
    whole = _archive(tmp_path, "c", RUN_1)
    s3.put_object(Bucket=bucket, Key=checkpoints + "c.tar.gz", Body=whole[: len(whole) // 2])
    s3.put_object(Bucket=bucket, Key=checkpoints + "d.tar.gz", Body=_archive(tmp_path, "d", RUN_0))
    # Processing's summary names the customers it sent to training.
    sent = processing_summary_json(["a", "short", "b", "c", "d", "e"])
    s3.put_object(Bucket=bucket, Key=layout.report_prefix(RUN_1) + "summary.json", Body=sent)
    return "AlgorithmError: killed by SIGKILL (host algo-2)"


def test_a_failed_job_registers_every_checked_model_and_names_the_customers_it_lost(
    world: dict[str, Any], failed_job: str
) -> None:
    # When the failed job's event is registered
    report = register(world, RUN_1, job_failure=failed_job)
    # Then the finished instance's model and the checked archive of the killed one go live
    assert (report.count("registered"), report.count("recovered")) == (2, 1)
    assert report.plan.job_failure == failed_job
    assert {c.customer_id: c.recovered for c in report.customers} == {"a": False, "b": True}
    for customer_id in ("a", "b"):
        live = world["registry"].live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (RUN_1, 1)
    # And the short customer failed with its reason, as before
    assert [f.customer_id for f in report.plan.failures] == ["short"]
    # And every other customer sent to the job is lost, with why
    lost = {c.customer_id: c.reason for c in report.lost}
    assert lost.keys() == {"c", "d", "e"}
    assert lost["c"].startswith("its checkpointed archive is unusable: ")
    assert lost["d"] == f"its checkpointed archive is customer 'd''s model from run {RUN_0}"
    assert lost["e"] == f"the training job failed before its model was written: {failed_job}"
    assert report.run.complete and report.run.lost == 3
    # And nothing unchecked reached the registry
    for customer_id in ("c", "d", "e", "short"):
        assert world["registry"].live(customer_id) is None
        assert world["registry"].models(customer_id) == []


def test_a_repeated_failed_job_event_registers_once_and_keeps_its_record(
    world: dict[str, Any], failed_job: str
) -> None:
    # Given a failed job registered once, its record kept
    first = register(world, RUN_1, job_failure=failed_job)
    # When the event is delivered again
    again = register(world, RUN_1, job_failure=failed_job)
    # Then nothing is registered twice and the versions stay
    assert (again.count("registered"), again.count("repeated"), again.count("recovered")) == (
        0,
        2,
        1,
    )
    assert again.run == first.run
    for customer_id in ("a", "b"):
        live = world["registry"].live(customer_id)
        assert live is not None and live.model_version == 1
    # And the run's record still names the same lost customers
    record = read_registration_record(world["s3"], world["bucket"], RUN_1)
    assert record is not None and record.lost == first.plan.lost
    assert read_registration_record(world["s3"], world["bucket"], RUN_2) is None


def test_a_failed_job_does_not_replace_a_newer_live_model(
    world: dict[str, Any], failed_job: str
) -> None:
    # Given run 2 live for b before run 1's failed job is registered
    trained(world["s3"], world["bucket"], RUN_2, {"b": GOOD}, hosts=1)
    register(world, RUN_2)
    # When the failed job's checked archive of b is registered
    report = register(world, RUN_1, job_failure=failed_job)
    # Then it is superseded, and run 2 stays live
    assert {c.customer_id: c.status for c in report.customers}["b"] is ModelStatus.SUPERSEDED
    live = world["registry"].live("b")
    assert live is not None and live.run_id == RUN_2


def test_a_job_that_wrote_nothing_is_registered_at_once_with_its_customers_lost(
    world: dict[str, Any],
) -> None:
    # Given a job that failed before any instance wrote a model or a manifest
    s3, bucket = world["s3"], world["bucket"]
    sent = processing_summary_json(["e"])
    s3.put_object(Bucket=bucket, Key=layout.report_prefix(RUN_1) + "summary.json", Body=sent)
    # When it is registered
    report = register(world, RUN_1, job_failure="CapacityError: no spot capacity")
    # Then there is no chunk to wait for: the run is registered, its customer lost
    assert report.plan.chunks == 0 and report.run.complete
    assert [c.customer_id for c in report.lost] == ["e"]
    assert report.run.lost == 1


# ---------------------------------------------------------------- through SQS


class _Context(LambdaContext):
    _function_name = "register-chunk"
    _memory_limit_in_mb = 512
    _invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:register-chunk"
    _aws_request_id = "11111111-2222-3333-4444-555555555555"


def _handler(function_dir: str) -> ModuleType:
    """functions/<dir>/app.py imported afresh: it reads its settings at import."""
    spec = importlib.util.spec_from_file_location(
        f"{function_dir}_app_{uuid.uuid4().hex[:6]}", ROOT / "functions" / function_dir / "app.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def queues(
    world: dict[str, Any], registry_table: Any, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """The chunks queue and its DLQ as template.yaml makes them (fresh names), and both
    registration functions' environment pointed at them."""
    template = LocalTemplate(ROOT / "template.yaml", parameter_overrides=LOCAL_IMAGE_PARAMETERS)
    sqs = boto3.client("sqs")
    suffix = uuid.uuid4().hex[:8]
    dlq = sqs.create_queue(QueueName=f"chunks-dlq-{suffix}")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    properties = template.resolve(template.resources["RegistrationChunksQueue"]["Properties"])
    redrive = {**properties["RedrivePolicy"], "deadLetterTargetArn": dlq_arn}
    queue = sqs.create_queue(
        QueueName=f"chunks-{suffix}",
        Attributes={
            "VisibilityTimeout": str(properties["VisibilityTimeout"]),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    for function in ("RegisterModelsFunction", "RegisterChunkFunction"):
        for name, value in template.function_environment(function).items():
            monkeypatch.setenv(name, value)
    monkeypatch.setenv("ARTIFACTS_BUCKET", world["bucket"])
    monkeypatch.setenv("REGISTRY_TABLE", registry_table.name)
    monkeypatch.setenv("REGISTRATION_QUEUE_URL", queue)
    monkeypatch.setenv("REGISTRATION_CHUNK_SIZE", "2")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    (mapping,) = event_source_mappings(template)
    return {"sqs": sqs, "queue": queue, "dlq": dlq, "mapping": mapping}


def _training_event(run_id: str, status: str = "Completed") -> dict[str, Any]:
    event: dict[str, Any] = json.loads(
        (ROOT / "events" / "training_job_completed.json").read_text()
    )
    event["detail"]["TrainingJobName"] = f"fleetcast-t-{run_id}"
    event["detail"]["TrainingJobStatus"] = status
    return event


def _deliver_all(queues: dict[str, Any], worker: ModuleType) -> int:
    """Receive and hand batches to the worker until the queue is empty, as the event
    source mapping does (a failed message is visible again at once); the receives."""
    sqs, queue, mapping = queues["sqs"], queues["queue"], queues["mapping"]
    for receives in range(100):
        messages = sqs.receive_message(
            QueueUrl=queue, MaxNumberOfMessages=mapping.batch_size, AttributeNames=["All"]
        ).get("Messages", [])
        if not messages:
            return receives
        try:
            answer = worker.lambda_handler(sqs_event(messages, "arn:chunks"), _Context())
            failed = failed_message_ids(answer, messages, mapping.report_batch_item_failures)
        except Exception:
            # Lambda: an invocation that raises fails its whole batch.
            failed = {m["MessageId"] for m in messages}
        for message in messages:
            if message["MessageId"] in failed:
                sqs.change_message_visibility(
                    QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
                )
            else:
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    raise AssertionError("the chunks queue did not empty in 100 receives")


def test_the_coordinator_queues_chunks_and_the_worker_registers_them(
    world: dict[str, Any], queues: dict[str, Any]
) -> None:
    # Given a finished job of 5 customers on 2 instances
    customers = [f"c{i}" for i in range(5)]
    trained(world["s3"], world["bucket"], RUN_1, dict.fromkeys(customers, GOOD))
    # When its event reaches the coordinator
    answer = _handler("register_models").lambda_handler(_training_event(RUN_1), _Context())
    # Then it queues chunks of at most 2 customers (3 from one manifest's 3, 2 from 2)
    assert answer["outcome"] == "queued" and answer["chunks"] == 3
    # And once they are delivered, every customer is live and the run is registered
    _deliver_all(queues, _handler("register_chunk"))
    run = world["registry"].run(RUN_1)
    assert run is not None and run.complete and (run.chunks_done, run.registered) == (3, 5)
    for customer_id in customers:
        live = world["registry"].live(customer_id)
        assert live is not None and live.run_id == RUN_1


def test_a_poisoned_chunk_is_retried_then_dead_lettered_while_the_others_finish(
    world: dict[str, Any], queues: dict[str, Any]
) -> None:
    # Given a finished job whose first manifest (its only page too) becomes unreadable
    # after the plan
    trained(world["s3"], world["bucket"], RUN_1, {f"c{i}": GOOD for i in range(4)})
    _handler("register_models").lambda_handler(_training_event(RUN_1), _Context())
    poisoned = layout.manifest_prefix(RUN_1) + "algo-1.json"
    for key in (poisoned, layout.checkpoint_prefix(RUN_1) + manifest_page_name("algo-1", 0)):
        world["s3"].put_object(Bucket=world["bucket"], Key=key, Body=b"{not json")
    # When the chunks are delivered
    _deliver_all(queues, _handler("register_chunk"))
    # Then algo-1's chunk went to the DLQ after the queue's maxReceiveCount receives
    dead = (
        queues["sqs"]
        .receive_message(QueueUrl=queues["dlq"], MaxNumberOfMessages=10, AttributeNames=["All"])
        .get("Messages", [])
    )
    assert [json.loads(m["Body"])["manifest_key"] for m in dead] == [poisoned]
    (receives,) = {m["Attributes"]["ApproximateReceiveCount"] for m in dead}
    assert int(receives) >= 3
    # And algo-2's customers are live, while the run waits for the dead-lettered chunk
    assert world["registry"].live("c1") is not None and world["registry"].live("c3") is not None
    assert world["registry"].live("c0") is None
    run = world["registry"].run(RUN_1)
    assert run is not None and (run.chunks_done, run.chunks_total, run.complete) == (1, 2, False)


def _status_of(
    world: dict[str, Any], run_id: str, summaries: dict[str, Any] | None = None
) -> RunStatus:
    """``fleetcast status`` of one run of the test's stack."""
    return run_status(
        run_id,
        "fleetcast",
        world["bucket"],
        boto3.client("sagemaker"),
        world["s3"],
        world["registry_table"],
        summaries,
    )


def _jobs_of(run_id: str) -> None:
    """The run's processing and training jobs, as moto makes them (Completed at once)."""
    sagemaker = boto3.client("sagemaker")
    role = "arn:aws:iam::123456789012:role/sagemaker"
    resources = {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}
    sagemaker.create_processing_job(
        ProcessingJobName=PROCESSING.job_name("fleetcast", run_id),
        ProcessingResources={"ClusterConfig": resources},
        AppSpecification={"ImageUri": "fleetcast-processing:latest"},
        RoleArn=role,
    )
    sagemaker.create_training_job(
        TrainingJobName=TRAINING.job_name("fleetcast", run_id),
        AlgorithmSpecification={
            "TrainingImage": "fleetcast-training:latest",
            "TrainingInputMode": "File",
        },
        RoleArn=role,
        OutputDataConfig={"S3OutputPath": "s3://nowhere/"},
        ResourceConfig=resources,
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )


def test_a_dead_lettered_chunk_is_in_status_with_its_reason_and_in_the_log_until_redriven(
    world: dict[str, Any], queues: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a finished job whose first manifest page becomes unreadable after the plan
    run_id = f"q{uuid.uuid4().int % 10**10:010d}-20261129t100000"
    trained(world["s3"], world["bucket"], run_id, {f"c{i}": GOOD for i in range(4)})
    _jobs_of(run_id)
    _handler("register_models").lambda_handler(_training_event(run_id), _Context())
    page = layout.checkpoint_prefix(run_id) + manifest_page_name("algo-1", 0)
    good_page = world["s3"].get_object(Bucket=world["bucket"], Key=page)["Body"].read()
    world["s3"].put_object(Bucket=world["bucket"], Key=page, Body=b"{not json")
    # When its chunks are delivered until the queue gives the bad one up
    _deliver_all(queues, _handler("register_chunk"))
    # Then the function's log has the error, with its traceback
    logged = [r for r in caplog.records if r.name == "fleetcast" and r.levelname == "ERROR"]
    assert len(logged) == MAX_RECEIVES
    assert all("chunk failed" in r.getMessage() and r.exc_info for r in logged)
    # And fleetcast status lists the chunk as dead-lettered, with why and how to re-drive
    status = _status_of(world, run_id)
    (chunk,) = status.failed_chunks
    assert chunk.chunk_id == "manifest-algo-1.json:0-2" and chunk.dead_lettered
    assert chunk.deliveries == MAX_RECEIVES and "ValidationError" in chunk.reason
    assert chunk.redrive == f"fleetcast redrive-chunks {run_id}"
    assert status.registration == "chunks 1/2" and status.done
    shown = Console(width=400, record=True, file=io.StringIO())
    shown.print(status_table([status]))
    text = shown.export_text()
    assert f"chunk manifest-algo-1.json:0-2 dead-lettered after {MAX_RECEIVES} deliveries:" in text
    assert f"re-drive once fixed: fleetcast redrive-chunks {run_id}" in text
    # When the cause is fixed and the user re-drives it
    world["s3"].put_object(Bucket=world["bucket"], Key=page, Body=good_page)
    sent = redrive_failed_chunks(
        run_id,
        world["bucket"],
        "unused",
        world["s3"],
        queues["sqs"],
        world["registry"],
        queue_urls=(queues["queue"], queues["dlq"]),
    )
    assert sent == [chunk.number]
    assert queues["sqs"].receive_message(QueueUrl=queues["dlq"]).get("Messages", []) == []
    _deliver_all(queues, _handler("register_chunk"))
    # Then the run is registered, and nothing failed is listed
    status = _status_of(world, run_id)
    assert status.registered and status.failed_chunks == []
    assert world["registry"].live("c0") is not None


def test_a_malformed_live_record_fails_its_customer_and_its_chunk_registers_the_rest(
    world: dict[str, Any],
) -> None:
    # Given a finished job of four customers, one of whom has a malformed LIVE record
    trained(world["s3"], world["bucket"], RUN_1, {f"c{i}": GOOD for i in range(4)})
    malformed = {"customer_id": "c0", "record": "LIVE", "run_id": 7, "model_version": "x"}
    world["registry_table"].put_item(Item=malformed)
    # When the run is registered (two chunks of two)
    registered = register_run(world["s3"], world["bucket"], world["registry"], RUN_1)
    # Then the run is registered, its three other customers live
    assert registered.run.complete and registered.run.chunks_done == 2
    for customer_id in ("c1", "c2", "c3"):
        live = world["registry"].live(customer_id)
        assert live is not None and live.run_id == RUN_1
    # And the malformed record's customer is lost, saying why, its record left as it was
    (lost,) = registered.lost
    assert lost.customer_id == "c0" and "LIVE record in the registry is malformed" in lost.reason
    assert registered.run.lost == 1
    item = world["registry_table"].get_item(Key={"customer_id": "c0", "record": "LIVE"})
    assert item["Item"]["run_id"] == 7


def test_status_counts_a_running_jobs_customers_from_its_progress_files(
    world: dict[str, Any],
) -> None:
    # Given a training job's two instances part-way through, beside archives and a manifest
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD, "c": GOOD})
    for host, done in (("algo-1", 40), ("algo-2", 35)):
        world["s3"].put_object(
            Bucket=world["bucket"],
            Key=layout.checkpoint_prefix(RUN_1) + progress_name(host),
            Body=TrainingProgress(host=host, done=done, total=50).model_dump_json(),
        )
    # Then status adds up the instances' progress, not the archives it could list
    assert customers_done(world["s3"], world["bucket"], RUN_1, instances=2) == 75
    # (an instance yet to write its file has done none)
    assert customers_done(world["s3"], world["bucket"], RUN_1, instances=3) == 75
    assert customers_done(world["s3"], world["bucket"], RUN_2, instances=2) == 0


def test_a_records_metrics_and_backtest_are_kept_as_their_json_text_and_read_back_whole(
    world: dict[str, Any],
) -> None:
    # Given a customer registered (its MODEL record written, its LIVE record promoted)
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD})
    register(world, RUN_1)
    live = world["registry"].live("a")
    assert live is not None and live.backtest.candidates and live.metrics == GOOD
    # Then both records hold the metrics and the backtest as one string attribute each,
    # not nested maps
    table = world["registry_table"]
    for record in ("LIVE", f"MODEL#{RUN_1}"):
        item = table.get_item(Key={"customer_id": "a", "record": record})["Item"]
        assert isinstance(item["backtest"], str) and isinstance(item["metrics"], str)
        assert Backtest.model_validate_json(item["backtest"]) == live.backtest
        assert HoldoutMetrics.model_validate_json(item["metrics"]) == live.metrics
    assert world["registry"].model("a", RUN_1).metrics == live.metrics
    # And a record kept as maps (written before) reads back the same
    item = table.get_item(Key={"customer_id": "a", "record": "LIVE"})["Item"]
    item["backtest"] = to_item(live.backtest.model_dump(mode="json"))
    item["metrics"] = to_item(live.metrics.model_dump(mode="json"))
    table.put_item(Item=item)
    again = world["registry"].live("a")
    assert again is not None and again.backtest == live.backtest
    assert again.metrics == live.metrics


def test_a_followed_run_reads_its_processing_summary_once_processing_has_ended(
    world: dict[str, Any],
) -> None:
    # Given a run whose processing job has ended and written its summary (the list of the
    # customers it sent: megabytes for a fleet)
    run_id = f"q{uuid.uuid4().int % 10**10:010d}-20261129t110000"
    trained(world["s3"], world["bucket"], run_id, {f"c{i}": GOOD for i in range(4)})
    summary_key = layout.report_prefix(run_id) + "summary.json"
    world["s3"].put_object(
        Bucket=world["bucket"],
        Key=summary_key,
        Body=processing_summary_json([f"c{i}" for i in range(4)]),
    )
    _jobs_of(run_id)
    read: list[str] = []
    world["s3"].meta.events.register(
        "provide-client-params.s3.GetObject", lambda params, **_: read.append(params["Key"])
    )

    # When its status is polled three times, as `fleetcast status --wait` and the progress
    # of `make demo` poll it, with the summaries they keep between polls
    summaries: dict[str, Any] = {}
    polls = [_status_of(world, run_id, summaries) for _ in range(3)]
    # Then each poll reports what the summary says, and the summary was read once
    assert [status.customers_to_train for status in polls] == [4, 4, 4]
    assert read.count(summary_key) == 1
    # And without kept summaries, each poll reads it again
    _status_of(world, run_id)
    assert read.count(summary_key) == 2


def test_status_says_how_many_periods_training_left_out_as_implausible(
    world: dict[str, Any], queues: dict[str, Any]
) -> None:
    # Given a finished job of two instances whose manifests say three customers had
    # periods left out of fitting as implausible (a meter's glitch)
    run_id = f"q{uuid.uuid4().int % 10**10:010d}-20261129t120000"
    trained(
        world["s3"],
        world["bucket"],
        run_id,
        {f"c{i}": GOOD for i in range(4)},
        implausible={"c0": 2, "c1": 1, "c3": 4},
    )
    _jobs_of(run_id)
    # When registration's coordinator plans the run
    _handler("register_models").lambda_handler(_training_event(run_id), _Context())
    # Then the run's record adds the instances' counts up, and its status says so
    plan = read_registration_record(world["s3"], world["bucket"], run_id)
    assert plan is not None and plan.implausible_periods == 7
    status = _status_of(world, run_id)
    assert status.periods_implausible == 7
