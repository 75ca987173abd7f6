"""The local stack's cost-watch pieces that need no stack: the GetAnomalies emulation
(checked against botocore's own model of the response), the synthetic account's
windows, and the ``--ce-results`` file check."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.parsers import create_parser
from botocore.validate import ParamValidator
from werkzeug.test import Client

from fleetcast.cost_cli import CostUsageError, load_usage_pages
from fleetcast.embedded import billing
from fleetcast.embedded.costs import LOCAL_MONITOR_ARN, AnomalyDetection, demo_window
from fleetcast_cost.detection import Thresholds, detect_anomalies
from fleetcast_cost.report import merge_anomalies
from fleetcast_cost.sources import parse_anomaly_pages, parse_usage_pages

END = dt.date(2026, 11, 30)
START = END - dt.timedelta(days=90)
CE = botocore.session.get_session().get_service_model("ce")
GET_ANOMALIES = CE.operation_model("GetAnomalies")


def _call(app: AnomalyDetection, request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """One GetAnomalies request through the WSGI app, the answer as botocore parses it."""
    response = Client(app).post(
        "/",
        data=json.dumps(request),
        headers={
            "X-Amz-Target": "AWSInsightsIndexService.GetAnomalies",
            "Content-Type": "application/x-amz-json-1.1",
        },
    )
    body = response.get_data()
    parsed = create_parser("json").parse(
        {"status_code": response.status_code, "headers": dict(response.headers), "body": body},
        GET_ANOMALIES.output_shape,
    )
    if response.status_code == 200:
        # Exactly the response's members, types and required fields, nothing else.
        report = ParamValidator().validate(json.loads(body), GET_ANOMALIES.output_shape)
        assert not report.has_errors(), report.generate_report()
    return response.status_code, parsed


def _request(**extra: Any) -> dict[str, Any]:
    interval = {"StartDate": START.isoformat(), "EndDate": END.isoformat()}
    return {"MonitorArn": LOCAL_MONITOR_ARN, "DateInterval": interval, **extra}


def test_get_anomalies_pages_parse_as_aws_responses_and_merge_with_ours() -> None:
    # Given the emulation for the local monitor and the demo account's 90 days
    app = AnomalyDetection(LOCAL_MONITOR_ARN, page_size=2)
    history = demo_window(START, END)

    # When every page is asked for, following NextPageToken
    pages, token = [], None
    while True:
        status, page = _call(app, _request(**({"NextPageToken": token} if token else {})))
        assert status == 200
        pages.append(page)
        token = page.get("NextPageToken")
        if not token:
            break

    # Then the labelled anomalies come back, one page of two and one of one, newest first
    assert [len(p["Anomalies"]) for p in pages] == [2, 1]
    found = parse_anomaly_pages(pages)
    labels = history.labels()
    assert sorted((a.usage_type, a.start) for a in found) == sorted(
        (label.usage_type, label.day) for label in labels
    )
    assert [a.start for a in found] == sorted((a.start for a in found), reverse=True)
    anomaly = pages[0]["Anomalies"][0]
    assert anomaly["MonitorArn"] == LOCAL_MONITOR_ARN
    assert anomaly["RootCauses"][0]["Service"] == "Amazon SageMaker"
    assert anomaly["Impact"]["TotalImpact"] == pytest.approx(
        anomaly["Impact"]["TotalActualSpend"] - anomaly["Impact"]["TotalExpectedSpend"], abs=0.02
    )
    # And merged with our own detection, each is one row credited to both
    usage = parse_usage_pages(history.pages(), START, END)
    merged = merge_anomalies(detect_anomalies(usage, Thresholds(0.5, 5.0)), found, START, END)
    assert {(a.usage_type, a.date) for a in merged} == {(lb.usage_type, lb.day) for lb in labels}
    assert all(a.detected_by == ("fleetcast", "aws_cost_anomaly_detection") for a in merged)


def test_aws_has_not_seen_yesterday_yet() -> None:
    # Given an account whose last day (yesterday) is a new usage type's first
    full = billing.demo_history(end=END)
    history = billing.BillingHistory(
        full.start,
        full.days - 2,
        tuple(
            dataclasses.replace(
                s, costs=s.costs[:-2], anomaly_days=tuple(a for a in s.anomaly_days if a[0] < 88)
            )
            for s in full.series
        ),
    )
    yesterday = history.end - dt.timedelta(days=1)
    assert {label.day for label in history.labels()} == {
        yesterday - dt.timedelta(days=1),
        yesterday,
    }

    # When AWS is asked about it today
    interval = {"StartDate": history.start.isoformat(), "EndDate": history.end.isoformat()}
    app = AnomalyDetection(LOCAL_MONITOR_ARN, history_for=lambda start, end: history)
    status, page = _call(app, _request(DateInterval=interval))

    # Then it reports the day before and not yesterday: its billing data lags a day
    assert status == 200
    assert [a["AnomalyStartDate"] for a in page["Anomalies"]] == [
        (yesterday - dt.timedelta(days=1)).isoformat()
    ]


def test_get_anomalies_errors_are_aws_errors() -> None:
    app = AnomalyDetection(LOCAL_MONITOR_ARN)
    status, parsed = _call(app, _request(MonitorArn="arn:aws:ce::123456789012:anomalymonitor/x"))
    assert (status, parsed["Error"]["Code"]) == (400, "UnknownMonitorException")
    status, parsed = _call(app, _request(NextPageToken="not-ours"))
    assert (status, parsed["Error"]["Code"]) == (400, "InvalidNextTokenException")
    status, parsed = _call(app, {"MonitorArn": LOCAL_MONITOR_ARN})
    assert (status, parsed["Error"]["Code"]) == (400, "ValidationException")


def test_without_a_monitor_configured_there_are_no_anomalies() -> None:
    status, page = _call(AnomalyDetection(None), _request())
    assert (status, page["Anomalies"]) == (200, [])


def test_a_window_of_the_demo_account_is_the_demo_history_ending_then() -> None:
    # A 90-day window is the demo history itself, what tests and the stack inject
    assert demo_window(START, END) == billing.demo_history(end=END)
    # A shorter one is its tail, with the labels that fall inside it
    short = demo_window(END - dt.timedelta(days=10), END)
    full = billing.demo_history(end=END, days=28)
    assert short.days == 10 and short.end == END
    assert short.daily_costs() == {k: v[-10:] for k, v in full.daily_costs().items()}
    assert short.labels() == full.labels()


# ---------------------------------------------------------------- --ce-results FILE


def _write(tmp_path: Path, content: Any) -> Path:
    path = tmp_path / "pages.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path


def test_saved_pages_load_as_saved(tmp_path: Path) -> None:
    pages = billing.demo_history(end=END).pages()
    assert load_usage_pages(_write(tmp_path, pages)) == pages
    # One response alone, as `aws ce get-cost-and-usage` prints it, and boto3's metadata
    single = {**pages[0], "ResponseMetadata": {"HTTPStatusCode": 200}}
    assert load_usage_pages(_write(tmp_path, single)) == [pages[0]]


def _page_with(change: Any) -> list[dict[str, Any]]:
    page = billing.demo_history(end=END).pages()[0]
    change(page)
    return [page]


MALFORMED: list[tuple[str, Any, str]] = [
    ("not JSON", "[{", "is not JSON"),
    ("empty", [], "must hold a JSON list of GetCostAndUsage responses"),
    ("a string", '"pages"', "must hold a JSON list"),
    ("not an object", [[1, 2]], "response 1 of 1 is a list"),
    (
        "an unknown member",
        [{"ResultsByTime": [], "Pages": 3}],
        'Unknown parameter in input: "Pages"',
    ),
    (
        "an amount as a number",
        _page_with(
            lambda p: p["ResultsByTime"][0]["Groups"][0]["Metrics"]["UnblendedCost"].update(
                Amount=1.5
            )
        ),
        "Invalid type for parameter ResultsByTime[0].Groups[0].Metrics.UnblendedCost.Amount",
    ),
    (
        "a day without its end",
        _page_with(lambda p: p["ResultsByTime"][0]["TimePeriod"].pop("End")),
        'Missing required parameter in ResultsByTime[0].TimePeriod: "End"',
    ),
    ("no results", [{"GroupDefinitions": []}], "has no ResultsByTime"),
    (
        "grouped by service",
        _page_with(lambda p: p["GroupDefinitions"][0].update(Key="SERVICE")),
        "is grouped by SERVICE: the report needs",
    ),
    (
        "blended cost only",
        _page_with(
            lambda p: p["ResultsByTime"][0]["Groups"][0]["Metrics"].update(
                BlendedCost=p["ResultsByTime"][0]["Groups"][0]["Metrics"].pop("UnblendedCost")
            )
        ),
        "has no UnblendedCost metric",
    ),
]


@pytest.mark.parametrize(
    ("content", "message"),
    [(content, message) for _, content, message in MALFORMED],
    ids=[name for name, _, _ in MALFORMED],
)
def test_malformed_pages_are_refused_saying_what_is_wrong(
    tmp_path: Path, content: Any, message: str
) -> None:
    with pytest.raises(CostUsageError, match=None) as raised:
        load_usage_pages(_write(tmp_path, content))
    assert message in str(raised.value)
    assert str(tmp_path / "pages.json") in str(raised.value)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CostUsageError, match="No such file or directory"):
        load_usage_pages(tmp_path / "missing.json")
