"""The adapters' requests and parsing, against botocore's Stubber (which validates every
stubbed response against the service model), and the synthetic billing history."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.session
import pytest
from botocore.stub import Stubber

from fleetcast.embedded import billing
from fleetcast_cost import sources
from fleetcast_cost.models import Anomaly
from fleetcast_cost.prices import bundled_prices
from fleetcast_cost.report import CostClients, gather_analysis, merge_anomalies
from fleetcast_cost.settings import CostAnalysisSettings, CostReportSettings

DATA = Path(__file__).parent.parent / "data" / "cost"
END = dt.date(2026, 11, 30)


def _client(service: str) -> Any:
    return botocore.session.get_session().create_client(
        service, region_name="us-east-1", aws_access_key_id="test", aws_secret_access_key="test"
    )


@pytest.fixture
def ce() -> Iterator[tuple[Any, Stubber]]:
    client = _client("ce")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()


def _with_datetimes(value: Any) -> Any:
    """JSON fixtures hold ISO strings where boto3 returns datetimes (keys ending Time)."""
    if isinstance(value, dict):
        return {
            k: dt.datetime.fromisoformat(v)
            if k.endswith("Time") and isinstance(v, str)
            else _with_datetimes(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_with_datetimes(v) for v in value]
    return value


# --- billing.py: Cost Explorer's response shape ----------------------------------------


def test_billing_pages_are_valid_get_cost_and_usage_responses(ce: tuple[Any, Stubber]) -> None:
    # Given the synthetic 90-day history as Cost Explorer pages
    history = billing.demo_history(end=END)
    pages = history.pages()
    assert len(pages) == 3
    client, stubber = ce
    request = sources.usage_request(history.start, history.end)
    for number, page in enumerate(pages):
        # Stubber rejects a response that does not match the GetCostAndUsage output shape
        expected = {
            **request,
            **({"NextPageToken": pages[number - 1]["NextPageToken"]} if number else {}),
        }
        stubber.add_response("get_cost_and_usage", page, expected)

    # When the adapter fetches them, following NextPageToken
    usage = sources.fetch_usage(client, history.start, history.end)

    # Then every page was asked for and every day of every series came through
    assert (usage.start, usage.end) == (history.start, history.end)
    costs = usage.costs_by_usage_type()
    for series in history.series:
        assert costs[series.usage_type] == pytest.approx(list(series.costs))
    # And the pages cover each day once, End exclusive, the last days estimated
    days = [r["TimePeriod"] for page in pages for r in page["ResultsByTime"]]
    assert len(days) == 90
    assert all(
        dt.date.fromisoformat(d["End"]) - dt.date.fromisoformat(d["Start"]) == dt.timedelta(days=1)
        for d in days
    )
    assert {row.day for row in usage.usage if row.estimated} == {
        END - dt.timedelta(days=2),
        END - dt.timedelta(days=1),
    }


def test_billing_labels_and_moto_injection() -> None:
    history = billing.demo_history(end=END)
    assert [(label.usage_type, label.shape) for label in history.labels()] == [
        ("USE1-Train:ml.c5.xlarge", "spike"),
        ("USE1-Train:ml.p3.2xlarge", "new_usage_type"),
        ("USE1-Host:ml.c5.xlarge", "level_shift"),
    ]
    body = history.moto_injection()
    assert body["account_id"] == "123456789012"
    assert body["results"] == history.pages()
    json.dumps(body)  # what the local stack POSTs


# --- Cost Explorer failures say what to do ---------------------------------------------


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        ("AccessDeniedException", "Cost Explorer is not enabled for this account"),
        ("DataUnavailableException", "can take 24 hours"),
        ("LimitExceededException", "throttled the report even after 8 attempts"),
        ("BillExpirationException", "Cost Explorer failed (BillExpirationException)"),
    ],
)
def test_cost_explorer_errors_become_advice(
    ce: tuple[Any, Stubber], code: str, advice: str
) -> None:
    client, stubber = ce
    stubber.add_client_error("get_cost_and_usage", service_error_code=code, service_message="no")
    with pytest.raises(sources.SourceFailure) as failure:
        sources.fetch_usage(client, END - dt.timedelta(days=90), END)
    assert advice in failure.value.problem.message
    assert failure.value.problem.source == "cost_explorer"


# --- Cost Anomaly Detection: moto lacks GetAnomalies, so Stubber stands in -------------


def test_get_anomalies_pages_are_parsed_per_sagemaker_root_cause(ce: tuple[Any, Stubber]) -> None:
    # Given two pages of GetAnomalies, with an S3 anomaly and a two-cause SageMaker one
    client, stubber = ce
    pages = json.loads((DATA / "get_anomalies_pages.json").read_text())
    arn = pages[0]["Anomalies"][0]["MonitorArn"]
    interval = {"StartDate": "2026-09-01", "EndDate": "2026-11-30"}
    stubber.add_response("get_anomalies", pages[0], {"MonitorArn": arn, "DateInterval": interval})
    stubber.add_response(
        "get_anomalies",
        pages[1],
        {"MonitorArn": arn, "DateInterval": interval, "NextPageToken": "page-2"},
    )

    # When the adapter fetches them
    found = sources.fetch_aws_anomalies(client, arn, dt.date(2026, 9, 1), END)

    # Then each SageMaker root cause is one anomaly; S3's is left out
    assert [(a.anomaly_id, a.usage_type, a.start, a.impact) for a in found] == [
        ("a1b2c3d4-0001", "USE1-Train:ml.c5.xlarge", dt.date(2026, 11, 25), 48.0),
        ("a1b2c3d4-0003", "USE1-Host:ml.g5.xlarge", dt.date(2026, 11, 21), 30.0),
        ("a1b2c3d4-0003", "USE1-Train:VolumeUsage.gp2", dt.date(2026, 11, 21), 2.0),
    ]
    assert (found[0].actual, found[0].expected) == (72.0, 24.0)


def test_aws_anomalies_merge_with_ours_without_duplicates() -> None:
    ours = [
        Anomaly(
            usage_type="USE1-Train:ml.c5.xlarge",
            date=dt.date(2026, 11, 25),
            actual=72.64,
            expected=24.3,
            impact=48.34,
            kind="spike",
        )
    ]
    theirs = sources.parse_anomaly_pages(
        json.loads((DATA / "get_anomalies_pages.json").read_text())
    )
    merged = merge_anomalies(ours, theirs, dt.date(2026, 9, 1), END)
    # The spike both found is one row, ours, credited to both; AWS's others are added
    assert [(a.usage_type, a.date, a.kind, a.detected_by) for a in merged] == [
        (
            "USE1-Host:ml.g5.xlarge",
            dt.date(2026, 11, 21),
            "aws_detected",
            ("aws_cost_anomaly_detection",),
        ),
        (
            "USE1-Train:VolumeUsage.gp2",
            dt.date(2026, 11, 21),
            "aws_detected",
            ("aws_cost_anomaly_detection",),
        ),
        (
            "USE1-Train:ml.c5.xlarge",
            dt.date(2026, 11, 25),
            "spike",
            ("fleetcast", "aws_cost_anomaly_detection"),
        ),
    ]
    assert merged[2].expected == 24.3 and merged[2].aws_anomaly_id == "a1b2c3d4-0001"
    # Merging again changes nothing
    assert merge_anomalies(merged, theirs, dt.date(2026, 9, 1), END) == merged


# --- SageMaker training jobs and CloudWatch utilisation --------------------------------


def test_training_jobs_are_listed_described_and_measured() -> None:
    # Given two pages of jobs: the on-demand File-mode job of the fixture and a spot job
    described = _with_datetimes(json.loads((DATA / "describe_training_job.json").read_text()))
    spot = {
        **described,
        "TrainingJobName": "fleetcast-t-spot",
        "EnableManagedSpotTraining": True,
        "BillableTimeInSeconds": 1200,
        "WarmPoolStatus": {"Status": "Reused", "ReusedByJob": "fleetcast-t-next"},
    }
    since = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)
    now = dt.datetime(2026, 11, 30, 6, tzinfo=dt.UTC)
    sagemaker, cloudwatch = _client("sagemaker"), _client("cloudwatch")
    listing = {"CreationTimeAfter": since, "SortBy": "CreationTime", "SortOrder": "Descending"}
    summary = {k: described[k] for k in ("TrainingJobArn", "CreationTime", "TrainingJobStatus")}
    with Stubber(sagemaker) as sm, Stubber(cloudwatch) as cw:
        sm.add_response(
            "list_training_jobs",
            {
                "TrainingJobSummaries": [
                    {**summary, "TrainingJobName": described["TrainingJobName"]}
                ],
                "NextToken": "2",
            },
            listing,
        )
        sm.add_response(
            "list_training_jobs",
            {"TrainingJobSummaries": [{**summary, "TrainingJobName": "fleetcast-t-spot"}]},
            {**listing, "NextToken": "2"},
        )
        sm.add_response(
            "describe_training_job", described, {"TrainingJobName": described["TrainingJobName"]}
        )
        sm.add_response("describe_training_job", spot, {"TrainingJobName": "fleetcast-t-spot"})
        # ml.c5.2xlarge has 8 vCPUs: CloudWatch's 40..60% is 5..7.5% of the instance
        for _ in range(2):
            cw.add_response(
                "get_metric_data",
                {
                    "MetricDataResults": [
                        {"Id": "cpu", "Values": [40.0, 60.0, 50.0], "StatusCode": "Complete"},
                        {"Id": "memory", "Values": [20.0, 25.0], "StatusCode": "Complete"},
                        {"Id": "gpu", "Values": [], "StatusCode": "Complete"},
                    ]
                },
            )

        # When the adapter fetches the jobs
        jobs, problems = sources.fetch_training_jobs(
            sagemaker, cloudwatch, since, now, bundled_prices()
        )
        sm.assert_no_pending_responses()
        cw.assert_no_pending_responses()

    # Then the facts that cost money are there
    assert problems == []
    first, second = jobs
    assert (first.instance_type, first.instance_count, first.spot) == ("ml.c5.2xlarge", 2, False)
    assert (first.training_seconds, first.billable_seconds) == (3600, 3600)
    assert first.phase_seconds == {
        "Starting": 180.0,
        "Downloading": 1080.0,
        "Training": 2280.0,
        "Uploading": 240.0,
        "Completed": 0.0,
    }
    assert first.input_mode == "File"
    assert (first.keep_alive_seconds, first.warm_pool_status, first.warm_pool_billed_seconds) == (
        1800,
        "Terminated",
        1800,
    )
    assert first.utilisation is not None
    assert (first.utilisation.cpu_mean, first.utilisation.cpu_p90) == (6.25, 7.5)
    assert (first.utilisation.memory_max, first.utilisation.gpu_mean) == (25.0, None)
    assert second.spot and second.warm_pool_reused_by == "fleetcast-t-next"


def test_one_failing_source_does_not_sink_the_analysis() -> None:
    # Given Cost Explorer not enabled, and a SageMaker account without training jobs
    ce, sagemaker = _client("ce"), _client("sagemaker")
    clients = CostClients(ce=ce, sagemaker=sagemaker, cloudwatch=None, dynamodb=None, ses=None)
    with Stubber(ce) as ce_stub, Stubber(sagemaker) as sm_stub:
        ce_stub.add_client_error("get_cost_and_usage", service_error_code="AccessDeniedException")
        sm_stub.add_response("list_training_jobs", {"TrainingJobSummaries": []})
        # When the analysis runs
        analysis = gather_analysis(
            dt.datetime(2026, 11, 30, 6, tzinfo=dt.UTC), CostAnalysisSettings.from_env({}), clients
        )
    # Then it says what went wrong and what to do, and carries on with nothing to flag
    assert [(p.source, p.severity) for p in analysis.problems] == [
        ("cost_explorer", "error"),
        ("training_jobs", "info"),
    ]
    assert "enable it in the Billing and Cost Management console" in analysis.problems[0].message
    assert "No SageMaker training jobs" in analysis.problems[1].message
    assert analysis.anomalies == () and analysis.recommendations == ()
    # And its JSON has the CLI's shape
    dumped = analysis.model_dump(mode="json")
    assert {"anomalies", "recommendations"} <= dumped.keys()
    assert "history" not in dumped


# --- Settings ------------------------------------------------------------------------


def test_settings_from_the_environment() -> None:
    settings = CostReportSettings.from_env(
        {
            "COST_LOOKBACK_DAYS": "60",
            "COST_RELATIVE_THRESHOLD": "0.4",
            "COST_ABSOLUTE_THRESHOLD_USD": "10",
            "COST_ANOMALY_MONITOR_ARN": "",
            "COST_REPORT_RECIPIENTS": "ops@example.com, finops@example.com",
            "COST_REPORT_SENDER": "Cost watch <cost@example.com>",
            "COST_DIGEST_WEEKDAY": "fri",
            "COST_STATE_TABLE": "fleetcast-cost-report-state",
            "COST_OUTBOX_DIR": "",
            "AWS_REGION": "eu-west-1",
        }
    )
    assert settings.lookback_days == 60
    assert (settings.relative_threshold, settings.absolute_threshold_usd) == (0.4, 10.0)
    assert settings.anomaly_monitor_arn is None and settings.outbox_dir is None
    assert settings.recipients == ("ops@example.com", "finops@example.com")
    assert settings.digest_weekday == 4
    assert settings.region == "eu-west-1"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("COST_REPORT_RECIPIENTS", "ops-at-example.com"),
        ("COST_DIGEST_WEEKDAY", "someday"),
        ("COST_LOOKBACK_DAYS", "7"),
        ("COST_REPORT_SENDER", "nobody"),
    ],
)
def test_bad_settings_fail_when_the_handler_starts(name: str, value: str) -> None:
    environ = {
        "COST_REPORT_RECIPIENTS": "ops@example.com",
        "COST_REPORT_SENDER": "cost@example.com",
        "COST_STATE_TABLE": "fleetcast-cost-report-state",
        name: value,
    }
    with pytest.raises(ValueError, match=name):
        CostReportSettings.from_env(environ)


def test_saved_cost_explorer_pages_stand_in_for_cost_explorer() -> None:
    # Given a file of GetCostAndUsage pages (what `fleetcast cost-report --ce-results` reads)
    pages = json.loads(json.dumps(billing.demo_history(end=END).pages()))
    sagemaker = _client("sagemaker")
    clients = CostClients(ce=None, sagemaker=sagemaker, cloudwatch=None, dynamodb=None, ses=None)
    with Stubber(sagemaker) as stub:
        stub.add_response("list_training_jobs", {"TrainingJobSummaries": []})
        # When the analysis runs on them
        analysis = gather_analysis(
            dt.datetime(2026, 11, 30, 6, tzinfo=dt.UTC),
            CostAnalysisSettings.from_env({}),
            clients,
            usage_pages=pages,
        )
    # Then its JSON is the CLI's shape, the file's anomalies in it
    dumped = json.loads(analysis.model_dump_json())
    for anomaly in dumped["anomalies"]:
        assert {"usage_type", "date", "actual", "expected", "impact"} <= anomaly.keys()
        assert dt.date.fromisoformat(anomaly["date"]) < END
        assert anomaly["impact"] == pytest.approx(anomaly["actual"] - anomaly["expected"])
    assert [a["usage_type"] for a in dumped["anomalies"]] == [
        "USE1-Train:ml.c5.xlarge",
        "USE1-Train:ml.p3.2xlarge",
        "USE1-Host:ml.c5.xlarge",
    ]
    assert dumped["recommendations"] == []
    # And an empty file is a problem to report, not a crash
    with Stubber(sagemaker) as stub:
        stub.add_response("list_training_jobs", {"TrainingJobSummaries": []})
        empty = gather_analysis(
            dt.datetime(2026, 11, 30, 6, tzinfo=dt.UTC),
            CostAnalysisSettings.from_env({}),
            clients,
            usage_pages=[],
        )
    assert "no days to analyse" in empty.problems[0].message
