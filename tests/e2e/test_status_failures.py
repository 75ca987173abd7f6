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
    # Given an upload with one customer of 60 days and two whose 10 days are all zeros (a
    # meter that was off: no day to fit, so not even a cold start can be made of them)
    off = readings(["short-b", "short-a"], "2024-01-01", 10, seed=1)
    off["consumption"] = 0.0
    frame = pd.concat([readings(["enough"], "2024-01-01", 60), off])
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
    assert [(f["customer_id"], f["kind"]) for f in run["failures"]] == [
        ("short-a", "too_few_rows"),
        ("short-b", "too_few_rows"),
    ]
    reason = run["failures"][0]["reason"]
    assert reason.startswith("has 0 rows to fit (10 ") and reason.endswith("needs at least 28")
    # And the table shows the kinds with the first customer's reason
    # (wide enough for every run of the shared stack on one line each)
    monkeypatch.setenv("COLUMNS", "3000")
    assert main(["status"]) == 0
    table = capsys.readouterr().out
    assert f"2 too_few_rows (first short-a: {reason})" in table


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
    # (wide enough for every run of the shared stack on one line each)
    monkeypatch.setenv("COLUMNS", "3000")
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


def test_rejected_rows_reasons_from_the_cli_and_status_names_the_report(
    stack: EmbeddedStack,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an upload with good rows and three kinds of bad ones: a date that is not one,
    # a consumption that is not a number (twice) and a negative one
    good = readings(["rej-a", "rej-b"], "2024-01-01", 60)
    bad = pd.DataFrame(
        {
            "customer_id": ["rej-a", "rej-b", "rej-a", "rej-b"],
            "timestamp": ["not-a-date", "2024-03-05", "2024-03-06", "2024-03-07"],
            "consumption": ["1", "abc", "", "-5"],
        }
    )
    run_id = upload(stack, "three-kinds.csv", to_csv(pd.concat([good, bad], ignore_index=True)))
    status = finished(stack, run_id)
    assert status.rows_rejected == len(bad), status
    assert stack.info is not None
    for name, value in stack.info.environment().items():
        monkeypatch.setenv(name, value)
    report = f"s3://{stack.info.artifacts_bucket}/runs/{run_id}/report/rejected.csv"
    first_bad_line = len(good) + 2  # the header is line 1
    # When `fleetcast rejected RUN` runs, piped at 60 columns
    monkeypatch.setenv("COLUMNS", "60")
    assert main(["rejected", run_id]) == 0
    out = capsys.readouterr().out
    lines = [line.strip() for line in out.splitlines()]
    # Then it counts the rows of each reason, most first, with what each means
    counts = [line for line in lines if line[:1].isdigit() and ":" in line]
    assert [line.split(":")[0] for line in counts] == [
        "2 invalid_consumption",
        "1 invalid_timestamp",
        "1 negative_consumption",
    ], out
    # And lists each row's line number and reason, and where the whole list is
    for offset, reason in enumerate(
        ["invalid_timestamp", "invalid_consumption", "invalid_consumption", "negative_consumption"]
    ):
        # one block a row (the table would not fit 60 columns whole)
        block = lines.index(f"line: {first_bad_line + offset}")
        assert f"reason: {reason}" in lines[block : block + 6], out
    assert any(report in line for line in lines), out
    # And --json has the same, for a script
    assert main(["rejected", run_id, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [r["line"] for r in document["rows"]] == [
        str(first_bad_line + offset) for offset in range(len(bad))
    ]
    assert {r["reason"]: r["rows"] for r in document["by_reason"]} == {
        "invalid_consumption": 2,
        "invalid_timestamp": 1,
        "negative_consumption": 1,
    }
    # And `fleetcast status`, piped at 60 columns, keeps the run id and the report's S3 path
    # whole, with the run's top reasons beside its counts
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert any(f"run: {run_id}" == line.strip() for line in out.splitlines()), out
    assert any(report in line for line in out.splitlines()), out
    assert "rejected: 2 invalid_consumption, 1 invalid_timestamp, 1 negative_consumption" in out
    # And a run id that is not one is refused
    assert main(["rejected", "../etc"]) == 2
