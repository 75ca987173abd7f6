"""`fleetcast status` says which customers training failed and why (issue 25 item 8): the
reasons were only in the S3 manifests."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_pipeline import finished, readings, registry, to_csv, upload

from fleetcast.cli import main
from fleetcast.embedded.stack import EmbeddedStack

pytestmark = pytest.mark.e2e


def test_status_counts_training_failures_by_kind_and_json_lists_each_reason(
    stack: EmbeddedStack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an upload with one customer of 60 days and two of 20, too few to train
    frame = pd.concat(
        [
            readings(["enough"], "2024-01-01", 60),
            readings(["short-b", "short-a"], "2024-01-01", 20, seed=1),
        ]
    )
    run_id = upload(stack, "some-short.csv", to_csv(frame))
    status = finished(stack, run_id)
    assert (status.customers_trained, status.customers_failed) == (1, 2), status
    assert stack.info is not None
    for name, value in stack.info.environment().items():
        monkeypatch.setenv(name, value)
    # When `fleetcast status --json` runs
    assert main(["status", "--json"]) == 0
    run = next(r for r in json.loads(capsys.readouterr().out) if r["run_id"] == run_id)
    # Then it lists each failed customer with its kind and reason, and counts the kinds
    assert run["failures_by_kind"] == {"too_few_rows": 2}
    assert run["failures"] == [
        {"customer_id": c, "kind": "too_few_rows", "reason": "has 20 rows, needs at least 28"}
        for c in ("short-a", "short-b")
    ]
    # And the table shows the kinds with the first customer's reason
    monkeypatch.setenv("COLUMNS", "400")
    assert main(["status"]) == 0
    table = capsys.readouterr().out
    assert "2 too_few_rows (first short-a: has 20 rows, needs at least 28)" in table


def test_status_shows_a_key_with_escape_sequences_escaped(
    stack: EmbeddedStack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an upload whose key would recolour and retitle a reader's terminal
    name = "\x1b[31mred\x1b]0;owned\x07 \x9b2J.csv"
    run_id = upload(stack, name, to_csv(readings(["escaped"], "2024-01-01", 60)))
    status = finished(stack, run_id)
    assert status.source == name  # kept as it was put
    assert stack.info is not None
    for variable, value in stack.info.environment().items():
        monkeypatch.setenv(variable, value)
    monkeypatch.setenv("COLUMNS", "400")
    # When `fleetcast status` prints it, and `--json` lists it
    assert main(["status"]) == 0
    table = capsys.readouterr().out
    assert main(["status", "--json"]) == 0
    listed = capsys.readouterr().out
    # Then the key is shown with its control characters written out, never sent raw
    assert "\\x1b[31mred\\x1b]0;owned\\x07 \\x9b2J.csv" in table
    for output in (table, listed):
        assert "\x1b" not in output and "\x07" not in output and "\x9b" not in output
    run = next(r for r in json.loads(listed) if r["run_id"] == run_id)
    assert run["source"] == name


def test_a_malformed_live_record_fails_its_customer_and_the_rest_register(
    stack: EmbeddedStack,
) -> None:
    # Given a customer whose LIVE record in the registry is malformed
    assert stack.info is not None
    table = stack.resource("dynamodb").Table(stack.info.registry_table)
    table.put_item(Item={"customer_id": "malformed-0", "record": "LIVE", "run_id": 7})
    # When an upload of it and another customer is trained and registered
    frame = readings(["malformed-0", "malformed-1"], "2024-01-01", 60, seed=2)
    status = finished(stack, upload(stack, "malformed.csv", to_csv(frame)))
    # Then the run is registered, the other customer live, that one lost (not the chunk)
    assert status.registered and status.failed_chunks == [], status
    assert (status.customers_registered, status.customers_lost) == (1, 1), status
    live = registry(stack).live("malformed-1")
    assert live is not None and live.run_id == status.run_id
    kept = table.get_item(Key={"customer_id": "malformed-0", "record": "LIVE"})["Item"]
    assert kept["run_id"] == 7
