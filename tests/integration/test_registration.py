"""Registering a training job's models: S3 and DynamoDB on a moto server."""

import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from fleetcast_common import layout
from fleetcast_common.model_archive import HoldoutMetrics, ModelMetadata, write_archive
from fleetcast_common.registration import (
    read_registration_record,
    register_models,
    write_registration_record,
)
from fleetcast_common.registry import ModelRegistry, ModelStatus
from fleetcast_common.training_manifest import CustomerOutcome, CustomerResult, TrainingManifest

ROOT = Path(__file__).resolve().parents[2]
RUN_1, RUN_2, RUN_0 = (
    "20261129t100000-aaaaaaaaaa",
    "20261129t110000-bbbbbbbbbb",
    "20261129t090000-cccccccccc",
)
GOOD = HoldoutMetrics(holdout_days=7, smape=0.03, mae=5.0, naive_smape=0.05, naive_mae=8.0)
BAD = HoldoutMetrics(holdout_days=7, smape=0.30, mae=50.0, naive_smape=0.05, naive_mae=8.0)


@pytest.fixture
def world(registry_table: Any) -> dict[str, Any]:
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    return {"s3": s3, "bucket": bucket, "registry": ModelRegistry(registry_table)}


def trained(
    s3: Any, bucket: str, run_id: str, outcomes: dict[str, HoldoutMetrics | None], hosts: int = 2
) -> None:
    """What a finished training job leaves in its checkpoint prefix."""
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


def register(world: dict[str, Any], run_id: str) -> Any:
    return register_models(
        run_id, f"fleetcast-t-{run_id}", world["bucket"], 1.5, world["s3"], world["registry"]
    )


def test_trained_customers_go_live_at_paths_of_their_own_and_failures_are_reported(
    world: dict[str, Any],
) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD, "b": GOOD, "short": None})
    report = register(world, RUN_1)
    assert (report.registered, report.failed_training, report.hosts_reporting) == (2, 1, 2)
    assert [f.customer_id for f in report.failures] == ["short"]
    for customer_id in ("a", "b"):
        world["s3"].head_object(Bucket=world["bucket"], Key=f"models/{customer_id}/{RUN_1}.tar.gz")
        live = world["registry"].live(customer_id)
        assert (
            live is not None
            and live.model_version == 1
            and live.target_model == f"{customer_id}/{RUN_1}.tar.gz"
        )
    assert world["registry"].live("short") is None


def test_a_repeated_event_registers_once(world: dict[str, Any]) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD})
    register(world, RUN_1)
    again = register(world, RUN_1)
    assert (again.registered, again.repeated) == (0, 1)
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
    # Then it is a repeat: run 1 stays recorded as the version that went live
    assert (again.registered, again.rejected, again.superseded, again.repeated) == (0, 0, 0, 2)
    for customer_id in ("a", "b"):
        first = world["registry"].model(customer_id, RUN_1)
        assert first is not None
        assert (first.status, first.model_version) == (ModelStatus.LIVE, 1)
        live = world["registry"].live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (RUN_2, 2)


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
    assert (report.registered, report.rejected) == (1, 1)
    live_a, live_b = world["registry"].live("a"), world["registry"].live("b")
    assert live_a is not None and (live_a.model_version, live_a.run_id) == (1, RUN_1)
    assert live_b is not None and (live_b.model_version, live_b.run_id) == (2, RUN_2)
    rejected = world["registry"].model("a", RUN_2)
    assert rejected is not None and rejected.status is ModelStatus.REJECTED


def test_a_new_customers_first_model_goes_live_even_below_the_gate(world: dict[str, Any]) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"new": BAD})
    report = register(world, RUN_1)
    assert report.registered == 1
    assert "despite the gate" in (report.customers[0].note or "")


def test_an_older_run_finishing_late_is_superseded(world: dict[str, Any]) -> None:
    trained(world["s3"], world["bucket"], RUN_1, {"a": GOOD})
    register(world, RUN_1)
    trained(world["s3"], world["bucket"], RUN_0, {"a": GOOD})
    report = register(world, RUN_0)
    assert report.superseded == 1
    live = world["registry"].live("a")
    assert live is not None and live.run_id == RUN_1 and live.model_version == 1


def _archive(tmp_path: Path, customer_id: str, run_id: str) -> bytes:
    """A model archive as the training container writes it."""
    path = tmp_path / f"{customer_id}-{run_id}.tar.gz"
    metadata = ModelMetadata(
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
    for customer_id in ("a", "short", "b", "c", "d", "e"):
        s3.put_object(
            Bucket=bucket, Key=layout.train_prefix(RUN_1) + f"{customer_id}.csv", Body=b"ds,y\n"
        )
    return "AlgorithmError: killed by SIGKILL (host algo-2)"


def test_a_failed_job_registers_every_checked_model_and_names_the_customers_it_lost(
    world: dict[str, Any], failed_job: str
) -> None:
    # When the failed job's event is registered
    report = register_models(
        RUN_1,
        f"fleetcast-t-{RUN_1}",
        world["bucket"],
        1.5,
        world["s3"],
        world["registry"],
        job_failure=failed_job,
    )
    # Then the finished instance's model and the checked archive of the killed one go live
    assert (report.registered, report.recovered, report.job_failure) == (2, 1, failed_job)
    assert {c.customer_id: c.recovered for c in report.customers} == {"a": False, "b": True}
    for customer_id in ("a", "b"):
        live = world["registry"].live(customer_id)
        assert live is not None and (live.run_id, live.model_version) == (RUN_1, 1)
        world["s3"].head_object(Bucket=world["bucket"], Key=layout.model_key(customer_id, RUN_1))
    # And the short customer failed with its reason, as before
    assert [f.customer_id for f in report.failures] == ["short"]
    # And every other customer sent to the job is lost, with why
    lost = {c.customer_id: c.reason for c in report.lost}
    assert lost.keys() == {"c", "d", "e"}
    assert lost["c"].startswith("its checkpointed archive is unusable: ")
    assert lost["d"] == f"its checkpointed archive is customer 'd''s model from run {RUN_0}"
    assert lost["e"] == f"the training job failed before its model was written: {failed_job}"
    # And nothing unchecked reached the registry or the endpoint's prefix
    for customer_id in ("c", "d", "e", "short"):
        assert world["registry"].live(customer_id) is None
        assert world["registry"].models(customer_id) == []
    listed = world["s3"].list_objects_v2(Bucket=world["bucket"], Prefix=layout.MODELS_PREFIX)
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        layout.model_key("a", RUN_1),
        layout.model_key("b", RUN_1),
    ]


def test_a_repeated_failed_job_event_registers_once_and_keeps_its_record(
    world: dict[str, Any], failed_job: str
) -> None:
    # Given a failed job registered once, its record kept
    def deliver() -> Any:
        report = register_models(
            RUN_1,
            f"fleetcast-t-{RUN_1}",
            world["bucket"],
            1.5,
            world["s3"],
            world["registry"],
            job_failure=failed_job,
        )
        write_registration_record(world["s3"], world["bucket"], report)
        return report

    first = deliver()
    # When the event is delivered again
    again = deliver()
    # Then nothing is registered twice and the versions stay
    assert (again.registered, again.repeated, again.recovered) == (0, 2, 1)
    for customer_id in ("a", "b"):
        live = world["registry"].live(customer_id)
        assert live is not None and live.model_version == 1
    # And the run's record still names the same lost customers
    record = read_registration_record(world["s3"], world["bucket"], RUN_1)
    assert record is not None and record.lost == first.lost
    assert read_registration_record(world["s3"], world["bucket"], RUN_2) is None


def test_a_failed_job_does_not_replace_a_newer_live_model(
    world: dict[str, Any], failed_job: str
) -> None:
    # Given run 2 live for b before run 1's failed job is registered
    trained(world["s3"], world["bucket"], RUN_2, {"b": GOOD}, hosts=1)
    register(world, RUN_2)
    # When the failed job's checked archive of b is registered
    report = register_models(
        RUN_1,
        f"fleetcast-t-{RUN_1}",
        world["bucket"],
        1.5,
        world["s3"],
        world["registry"],
        job_failure=failed_job,
    )
    # Then it is superseded, and run 2 stays live
    assert {c.customer_id: c.status for c in report.customers}["b"] is ModelStatus.SUPERSEDED
    live = world["registry"].live("b")
    assert live is not None and live.run_id == RUN_2
