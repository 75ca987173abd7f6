"""A run's forecast export, accuracy table and report, end to end on the local stack:
training writes them, the checkpoint sync lands them, the CLI reads them."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from test_pipeline import finished, readings, upload

from fleetcast.cli import main
from fleetcast.email_preview import CHROMIUM, render
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.registry import ModelRegistry
from fleetcast_contracts.training_manifest import CustomerOutcome

pytestmark = pytest.mark.e2e
CUSTOMERS = [f"exp-{n}" for n in range(6)]
SUBSET = CUSTOMERS[:2]


def gzipped(frame) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as packed:
        packed.write(frame.to_csv(index=False).encode())
    return buffer.getvalue()


def test_each_run_exports_every_trained_customer_and_the_live_column_follows_the_registry(
    stack: EmbeddedStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
):
    assert stack.info is not None
    info = stack.info
    for name, value in info.environment().items():
        monkeypatch.setenv(name, value)
    # The Glue catalog Athena would query exists, built from template.yaml
    glue = stack.client("glue")
    tables = glue.get_tables(DatabaseName=f"{info.job_name_prefix}_exports")["TableList"]
    assert sorted(t["Name"] for t in tables) == ["accuracy", "forecasts"]

    # Given a first run over six customers (two training instances)
    first = upload(stack, "export-1.csv.gz", gzipped(readings(CUSTOMERS, "2025-01-01", 120)))
    first_status = finished(stack, first)
    assert first_status.customers_trained == len(CUSTOMERS)
    # And a second run, later, over two of them
    second = upload(stack, "export-2.csv.gz", gzipped(readings(SUBSET, "2025-04-01", 60, seed=1)))
    assert finished(stack, second).customers_trained == len(SUBSET)

    # When the first run's export is fetched
    output = tmp_path / "first.parquet"
    assert main(["export", "--run", first, "-o", str(output)]) == 0
    rows = pq.read_table(output).to_pylist()
    # Then every customer trained in it is there, 30 days each, once
    per_customer: dict[str, int] = {}
    for row in rows:
        per_customer[row["customer_id"]] = per_customer.get(row["customer_id"], 0) + 1
    assert per_customer == dict.fromkeys(CUSTOMERS, 30)
    # And live is true exactly where the first run's model is still the live one
    registry = ModelRegistry(stack.resource("dynamodb").Table(info.registry_table))
    for customer_id in CUSTOMERS:
        live = registry.live(customer_id)
        assert live is not None
        expected = live.run_id == first
        assert {r["live"] for r in rows if r["customer_id"] == customer_id} == {expected}
        assert expected == (customer_id not in SUBSET)

    # When the default (latest registered) run is exported: the second, all of it live
    latest = tmp_path / "latest.csv"
    assert main(["export", "-o", str(latest)]) == 0
    assert f"run {second}: 60 forecasts rows of 2 customers (2 live now)" in " ".join(
        capsys.readouterr().out.split()
    )

    # And the accuracy table's counts reconcile with the instances' manifests
    accuracy = tmp_path / "accuracy.parquet"
    assert main(["export", "--run", first, "--table", "accuracy", "-o", str(accuracy)]) == 0
    table = pq.read_table(accuracy).to_pylist()
    outcomes = {row["customer_id"]: row["outcome"] for row in table}
    assert outcomes == dict.fromkeys(CUSTOMERS, CustomerOutcome.TRAINED.value)
    assert all(row["forecast_rows"] == 30 and row["smape"] is not None for row in table)

    # When the status and the report are asked for
    assert main(["status"]) == 0
    status = " ".join(capsys.readouterr().out.split())
    assert f"accuracy of run {second}" in status
    report = tmp_path / "report.html"
    assert main(["report", "--run", first, "-o", str(report)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"made live {len(CUSTOMERS)}; not made live 0" in printed

    # Then the report renders in headless Chromium, chart and all
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (make email-preview installs it)")
    png = render(report, tmp_path / "report.png", (1000, 1400))
    assert png.stat().st_size > 20_000
