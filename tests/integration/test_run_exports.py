"""``fleetcast export`` and ``fleetcast report`` against S3 and the registry (moto server),
reading parts written by the training job's own writers."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from model_helpers import chosen

from fleetcast import cli
from fleetcast.exports import runs_with_exports
from fleetcast_common.registry import ModelRecord, ModelRegistry, ModelStatus
from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata
from fleetcast_contracts.training_manifest import CustomerOutcome, CustomerResult
from fleetcast_training.export import (
    ExportedCustomer,
    ExportedForecast,
    ShardExport,
)
from fleetcast_training.run_exports import exports_prefix

OLD, NEW = "q0000000907-20261129t100000", "q0000000908-20261129t110000"
GOOD = HoldoutMetrics(
    windows=2,
    holdout_days=7,
    smape=0.05,
    mae=5.0,
    naive_smape=0.10,
    naive_mae=9.0,
    wape=0.05,
    mase=0.6,
)
POOR = HoldoutMetrics(
    windows=2,
    holdout_days=7,
    smape=0.40,
    mae=40.0,
    naive_smape=0.10,
    naive_mae=9.0,
    wape=0.4,
    mase=4.0,
)


def exported(customer_id: str, metrics: HoldoutMetrics) -> ExportedCustomer:
    dates = np.array(["2026-01-01", "2026-01-02", "2026-01-03"], dtype="datetime64[ns]")
    # As training writes it: a trained customer's result carries its archive's metadata.
    metadata = ModelMetadata(
        **chosen(),
        customer_id=customer_id,
        run_id="q0000000001-20260101t000000",
        trained_at=datetime(2026, 1, 1, tzinfo=UTC),
        data_start=date(2025, 1, 1),
        data_end=date(2025, 12, 31),
        rows=365,
        metrics=metrics,
        library_versions={},
    )
    result = CustomerResult(
        customer_id=customer_id,
        outcome=CustomerOutcome.TRAINED,
        metrics=metrics,
        metadata=metadata,
    )
    yhat = np.array([10.0, 11.0, 12.0])
    return ExportedCustomer(result, ExportedForecast(dates, yhat, yhat - 1, yhat + 1))


def failed(customer_id: str) -> ExportedCustomer:
    return ExportedCustomer(
        CustomerResult(customer_id=customer_id, outcome=CustomerOutcome.FAILED, reason="too few")
    )


def upload_run(s3: Any, bucket: str, run_id: str, tmp: Path, customers: list[ExportedCustomer]):
    """What the checkpoint sync of one instance leaves in S3."""
    local = tmp / run_id
    export = ShardExport(tmp / f"spill-{run_id}", run_id)
    for customer in customers:
        export.add(customer)
    forecast_parts, accuracy_part = export.write(local, "algo-1")
    for path in forecast_parts:
        s3.upload_file(str(path), bucket, exports_prefix(run_id, "forecasts") + path.name)
    s3.upload_file(
        str(accuracy_part), bucket, exports_prefix(run_id, "accuracy") + accuracy_part.name
    )


def decide(registry: ModelRegistry, run_id: str, customer_id: str, status: ModelStatus) -> None:
    record = ModelRecord(
        **chosen(),
        customer_id=customer_id,
        run_id=run_id,
        status=status,
        target_model=f"{run_id}/{customer_id}.tar.gz",
        model_s3_uri=f"s3://artifacts/models/{run_id}/{customer_id}.tar.gz",
        training_job=f"fleetcast-t-{run_id}",
        trained_at=datetime(2026, 11, 29, tzinfo=UTC),
        data_start=date(2025, 1, 1),
        data_end=date(2025, 12, 31),
        rows=365,
        metrics=GOOD,
    )
    # As registration does: the LIVE record moves for a live model; every model's is kept.
    if status is ModelStatus.LIVE:
        assert registry.promote(record) is not None
    registry.record(record)


@pytest.fixture
def stack(registry_table: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    # Given two runs' exports in S3: OLD trained a and b; NEW trained a, b and c, failed d
    s3 = boto3.client("s3")
    bucket = f"artifacts-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    upload_run(s3, bucket, OLD, tmp_path, [exported("a", GOOD), exported("b", GOOD)])
    new = [exported("a", GOOD), exported("b", GOOD), exported("c", POOR), failed("d")]
    upload_run(s3, bucket, NEW, tmp_path, new)
    # And the registry's decisions: a went live in NEW, b's NEW model was superseded
    # (it stays on OLD's), c's was rejected by the quality gate
    registry = ModelRegistry(registry_table)
    for customer in ("a", "b"):
        decide(registry, OLD, customer, ModelStatus.LIVE)
    decide(registry, NEW, "a", ModelStatus.LIVE)
    decide(registry, NEW, "b", ModelStatus.SUPERSEDED)
    decide(registry, NEW, "c", ModelStatus.REJECTED)
    for run_id in (OLD, NEW):
        registry.start_run(run_id, f"fleetcast-t-{run_id}", chunks_total=0, lost=0)
        registry.mark_registered_if_complete(run_id)
    for variable, value in {
        "FLEETCAST_RAW_BUCKET": "raw",
        "FLEETCAST_ARTIFACTS_BUCKET": bucket,
        "FLEETCAST_REGISTRY_TABLE": registry_table.name,
        "FLEETCAST_JOB_NAME_PREFIX": "fleetcast",
    }.items():
        monkeypatch.setenv(variable, value)
    return {"s3": s3, "bucket": bucket, "registry": registry}


def test_export_defaults_to_the_latest_registered_run_and_marks_live_rows(
    stack: dict[str, Any], tmp_path: Path
):
    assert runs_with_exports(stack["s3"], stack["bucket"]) == [OLD, NEW]
    # When the export is fetched without a run
    output = tmp_path / "out" / "forecasts.parquet"
    output.parent.mkdir()  # a folder that does not exist is an error (test_cli_output_paths)
    assert cli.main(["export", "-o", str(output)]) == 0
    # Then it is NEW's, every trained customer's rows, live only where NEW's model is live
    table = pq.read_table(output)
    assert set(table.column("run_id").to_pylist()) == {NEW}
    rows = table.to_pylist()
    assert sorted({row["customer_id"] for row in rows}) == ["a", "b", "c"]
    assert len(rows) == 9
    assert {row["customer_id"]: row["live"] for row in rows} == {"a": True, "b": False, "c": False}


def test_export_of_an_older_run_as_csv(stack: dict[str, Any], tmp_path: Path):
    output = tmp_path / "old.csv"
    assert cli.main(["export", "--run", OLD, "-o", str(output)]) == 0
    rows = pa_csv.read_csv(output).to_pylist()
    # b's live model is still OLD's; a's moved on to NEW
    assert {row["customer_id"]: row["live"] for row in rows} == {"a": False, "b": True}
    assert [row["yhat"] for row in rows if row["customer_id"] == "a"] == [10.0, 11.0, 12.0]


def test_export_of_the_accuracy_table(stack: dict[str, Any], tmp_path: Path):
    output = tmp_path / "accuracy.parquet"
    assert cli.main(["export", "--run", NEW, "--table", "accuracy", "-o", str(output)]) == 0
    rows = {row["customer_id"]: row for row in pq.read_table(output).to_pylist()}
    assert sorted(rows) == ["a", "b", "c", "d"]
    assert (rows["d"]["outcome"], rows["d"]["failure_reason"]) == ("failed", "too few")
    assert (rows["c"]["beats_naive"], rows["a"]["beats_naive"]) == (False, True)


def test_an_accuracy_part_from_before_level_shifts_reads_with_the_column_empty(
    stack: dict[str, Any], tmp_path: Path
):
    # Given the run's accuracy part as a job wrote it before level_shift_days existed
    s3, bucket = stack["s3"], stack["bucket"]
    prefix = exports_prefix(NEW, "accuracy")
    [key] = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["Contents"]]
    old = pq.read_table(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
    old = old.drop_columns(["level_shift_days"])
    buffer = io.BytesIO()
    pq.write_table(old, buffer)
    s3.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())
    # When the accuracy table is exported
    output = tmp_path / "accuracy.parquet"
    assert cli.main(["export", "--run", NEW, "--table", "accuracy", "-o", str(output)]) == 0
    # Then every row is there, the new column null
    table = pq.read_table(output)
    assert sorted(table.column("customer_id").to_pylist()) == ["a", "b", "c", "d"]
    assert table.column("level_shift_days").to_pylist() == [None] * 4


def test_export_errors_say_what_is_wrong(stack: dict[str, Any], tmp_path: Path, capsys):
    # A run without an export, a malformed run id, an unknown output format
    missing = "q0000000913-20261130t000000"
    assert cli.main(["export", "--run", missing, "-o", str(tmp_path / "x.parquet")]) == 2
    assert f"run {missing} has no forecasts export" in capsys.readouterr().err
    assert cli.main(["export", "--run", "../etc", "-o", str(tmp_path / "x.parquet")]) == 2
    assert "is not a fleetcast run id" in capsys.readouterr().err
    assert cli.main(["export", "-o", str(tmp_path / "x.json")]) == 2
    assert "must end in .parquet or .csv" in capsys.readouterr().err


def test_report_summarises_the_run_and_why_models_are_not_live(
    stack: dict[str, Any], tmp_path: Path, capsys
):
    output = tmp_path / "report.html"
    assert cli.main(["report", "--run", NEW, "-o", str(output)]) == 0
    printed = capsys.readouterr().out
    assert f"accuracy of run {NEW} (3 of 4 customers scored" in printed
    assert "2 of 3 beat seasonal-naive" in printed
    assert (
        "made live 1; not made live 3: 1 quality gate (backtest WAPE above seasonal-naive's), 1"
        in (" ".join(printed.split()))
    )
    page = output.read_text()
    assert page.startswith("<!DOCTYPE html>")
    assert 'src="data:image/png;base64,' in page
    # And one measure leads, the quality gate's, in the summary and the page alike
    assert printed.index("WAPE median") < printed.index("sMAPE")
    assert (
        "<td>not made live: quality gate (backtest WAPE above seasonal-naive's)</td><td>1</td>"
        in (page.replace("&#x27;", "'"))
    )
    assert "<h2>Highest model WAPE</h2>" in page and "<td>WAPE (quality gate)</td>" in page
