"""The cost-report function against a moto server: Cost Explorer results injected, the
SES identity verified, training jobs created, the handler run, the mail read back."""

from __future__ import annotations

import dataclasses
import datetime as dt
import email
import json
import re
import urllib.request
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import default
from pathlib import Path
from typing import Any

import boto3
import pytest
from function_helpers import load_function
from moto.backends import get_backend
from moto.server import ThreadedMotoServer
from template_helpers import load_template

from fleetcast.embedded import billing
from fleetcast_cost.delivery import DeliveryFailed

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EVENT = json.loads((ROOT / "events/schedule.json").read_text())
ACCOUNT = "123456789012"
REGION = "us-east-1"
SENDER = "cost-watch@example.com"
RECIPIENTS = "ops@example.com,finops@example.com"
STATE_TABLE = "fleetcast-cost-report-state"
# moto creates jobs "now", so the report is dated today (UTC) to see them in its lookback.
TODAY = dt.datetime.now(dt.UTC).date()


@dataclasses.dataclass
class LambdaContext:
    function_name: str = "fleetcast-cost-report"
    memory_limit_in_mb: int = 1024
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:fleetcast-cost-report"
    aws_request_id: str = "4a1b2c3d-0000-4000-8000-000000000000"


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _request(url: str, body: dict[str, Any] | None = None, method: str = "GET") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read()
    return json.loads(text) if text and method == "GET" else None


@pytest.fixture
def aws(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A clean moto account with the state table and environment the template gives."""
    _request(f"{moto_endpoint}/moto-api/reset", {}, method="POST")
    environment = {
        "AWS_ENDPOINT_URL": moto_endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_SERVICE_NAME": "fleetcast",
        "POWERTOOLS_METRICS_NAMESPACE": "Fleetcast",
        "POWERTOOLS_TRACE_DISABLED": "true",
        "COST_REPORT_RECIPIENTS": RECIPIENTS,
        "COST_REPORT_SENDER": SENDER,
        "COST_STATE_TABLE": STATE_TABLE,
        "COST_OUTBOX_DIR": str(tmp_path / "outbox"),
        # Not today's weekday, nor tomorrow's: no digest unless a test asks for one.
        "COST_DIGEST_WEEKDAY": str((TODAY.weekday() + 3) % 7),
    }
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    _create_state_table(boto3.client("dynamodb"))
    return moto_endpoint


def _state_table_properties() -> dict[str, Any]:
    """CostReportStateTable's properties from template.yaml: the test builds what the
    template declares."""
    properties: dict[str, Any] = load_template()["Resources"]["CostReportStateTable"]["Properties"]
    return properties


def _create_state_table(dynamodb: Any) -> None:
    properties = _state_table_properties()
    dynamodb.create_table(
        TableName=STATE_TABLE,
        AttributeDefinitions=properties["AttributeDefinitions"],
        KeySchema=properties["KeySchema"],
        BillingMode=properties["BillingMode"],
    )
    dynamodb.update_time_to_live(
        TableName=STATE_TABLE, TimeToLiveSpecification=properties["TimeToLiveSpecification"]
    )


def _inject_billing(endpoint: str, history: billing.BillingHistory) -> None:
    _request(
        f"{endpoint}/moto-api/static/ce/cost-and-usage-results",
        history.moto_injection(ACCOUNT),
        method="POST",
    )


def _create_training_jobs() -> None:
    """Two jobs, enriched the way the local stack's job runner does (moto's own jobs are
    Completed at creation with no billable time, phases or warm pool)."""
    sagemaker, cloudwatch = boto3.client("sagemaker"), boto3.client("cloudwatch")
    for name, instance_type, count, spot in [
        ("fleetcast-t-ondemand", "ml.c5.2xlarge", 2, False),
        ("fleetcast-t-gpu", "ml.p3.2xlarge", 1, True),
    ]:
        sagemaker.create_training_job(
            TrainingJobName=name,
            AlgorithmSpecification={
                "TrainingImage": f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com/fleetcast-training:latest",
                "TrainingInputMode": "File",
            },
            RoleArn=f"arn:aws:iam::{ACCOUNT}:role/fleetcast-sagemaker",
            OutputDataConfig={"S3OutputPath": "s3://fleetcast-artifacts/output/"},
            ResourceConfig={
                "InstanceType": instance_type,
                "InstanceCount": count,
                "VolumeSizeInGB": 30,
            },
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
            EnableManagedSpotTraining=spot,
        )
        job = get_backend("sagemaker")[ACCOUNT][REGION].training_jobs[name]
        started = job.creation_time
        # moto renders every attribute of the job in DescribeTrainingJob.
        vars(job).update(
            training_time_in_seconds=3600,
            billable_time_in_seconds=3600,
            secondary_status_transitions=[
                {
                    "Status": status,
                    "StartTime": started + dt.timedelta(seconds=begin),
                    "EndTime": started + dt.timedelta(seconds=end),
                }
                for status, begin, end in [
                    ("Starting", 0, 120),
                    ("Downloading", 120, 1020),
                    ("Training", 1020, 3600),
                ]
            ],
        )
    # The on-demand job barely used its 8 vCPUs: 40% summed over cores is 5% each.
    cloudwatch.put_metric_data(
        Namespace="/aws/sagemaker/TrainingJobs",
        MetricData=[
            {
                "MetricName": metric,
                "Dimensions": [{"Name": "Host", "Value": "fleetcast-t-ondemand/algo-1"}],
                "Value": value,
                "Timestamp": dt.datetime.now(dt.UTC),
            }
            for metric, value in [("CPUUtilization", 40.0), ("MemoryUtilization", 20.0)]
        ],
    )


def _invoke(day: dt.date) -> dict[str, Any]:
    event = {**EVENT, "time": f"{day.isoformat()}T06:00:00Z"}
    outcome: dict[str, Any] = load_function("cost_report").lambda_handler(event, LambdaContext())
    return outcome


def _sent_messages(endpoint: str) -> list[EmailMessage]:
    data = _request(f"{endpoint}/moto-api/data.json")
    messages = []
    for raw in data["ses"]["RawMessage"]:
        message = email.message_from_string(raw["raw_data"], policy=default)
        assert isinstance(message, EmailMessage)
        messages.append(message)
    return messages


def _grown_spike_next_day(history: billing.BillingHistory) -> billing.BillingHistory:
    """Tomorrow's Cost Explorer view: one more ordinary day, and the spike revised up by
    half (billing data for recent days does move)."""
    spike = next(label for label in history.labels() if label.shape == "spike")
    series = []
    for usage in history.series:
        carried = (
            usage.costs[-1] if usage.shape in {"level_shift", "new_usage_type"} else usage.costs[-7]
        )
        costs = [*usage.costs[1:], carried]
        if usage.usage_type == spike.usage_type:
            costs[(spike.day - history.start).days - 1] *= 1.5
        series.append(dataclasses.replace(usage, costs=tuple(costs), anomaly_days=()))
    return billing.BillingHistory(history.start + dt.timedelta(days=1), history.days, tuple(series))


def test_report_is_mailed_once_and_again_when_an_anomaly_grows(aws: str, tmp_path: Path) -> None:
    # Given 90 days of SageMaker billing with a spike, a new ml.p3.2xlarge and an
    # endpoint scaled up, a verified sender, and two training jobs
    history = billing.demo_history(end=TODAY)
    _inject_billing(aws, history)
    boto3.client("ses").verify_email_identity(EmailAddress=SENDER)
    _create_training_jobs()

    # When the scheduled function runs
    outcome = _invoke(TODAY)

    # Then it reports the three anomalies in one e-mail
    assert outcome["sent"] is True, outcome
    assert (outcome["anomalies_found"], outcome["anomalies_reported"]) == (3, 3)
    [message] = _sent_messages(aws)
    assert message["From"] == SENDER
    assert message["Subject"].startswith("SageMaker cost: 3 anomalies, +$")
    assert re.search(r"save up to \$[0-9,]+/month$", message["Subject"])

    # And the e-mail has a text part, an HTML part with the table, and the chart inline
    assert message.get_content_type() == "multipart/alternative"
    text = message.get_body(preferencelist=("plain",))
    html = message.get_body(preferencelist=("html",))
    assert text is not None and html is not None
    text_content, html_content = text.get_content(), html.get_content()
    [image] = [part for part in message.walk() if part.get_content_type() == "image/png"]
    assert f"cid:{image['Content-ID'].strip('<>')}" in html_content
    assert image.get_content().startswith(b"\x89PNG")
    for label in history.labels():
        assert label.usage_type in html_content and label.day.isoformat() in html_content
        assert label.usage_type in text_content
    for header in ("Usage type", "Day", "Actual", "Expected", "Impact"):
        assert f">{header}</th>" in html_content

    # And the training jobs became recommendations with dollar savings
    for kind in ("use spot", "fastfile input mode", "right size instance", "cheaper gpu family"):
        assert kind in text_content, kind
    # (the p3 job has no memory measurement, so its g5 must hold all 61 GiB: a 4xlarge)
    assert "Suggested: ml.g5.4xlarge" in text_content
    assert "Suggested: ml.c5.xlarge" in text_content

    # And the local outbox has the .eml and a standalone .html
    outbox = Path(outcome["outbox_files"][0]).parent
    assert (outbox / "latest.eml").read_bytes().startswith(b"Subject: SageMaker cost: 3 anomalies")
    assert 'src="data:image/png;base64,' in (outbox / "latest.html").read_text()

    # When it runs again the same day
    again = _invoke(TODAY)

    # Then nothing new is sent: the anomalies are remembered
    assert (again["sent"], again["anomalies_found"], again["anomalies_reported"]) == (False, 3, 0)
    assert len(_sent_messages(aws)) == 1

    # When tomorrow's data revises the spike up by half
    grown = _grown_spike_next_day(history)
    _inject_billing(aws, grown)
    tomorrow = _invoke(TODAY + dt.timedelta(days=1))

    # Then only the grown spike is e-mailed again, with its new figures
    assert (tomorrow["sent"], tomorrow["anomalies_reported"]) == (True, 1), tomorrow
    latest = _sent_messages(aws)[-1]
    spike = next(label for label in history.labels() if label.shape == "spike")
    assert latest["Subject"].startswith("SageMaker cost: 1 anomaly, +$")
    body = latest.get_body(preferencelist=("plain",))
    assert body is not None
    rows = [line for line in body.get_content().splitlines() if line.startswith("USE1-")]
    assert len(rows) == 1 and rows[0].startswith(spike.usage_type)
    assert spike.day.isoformat() in rows[0]


# The failed invocation publishes no metrics, which Powertools warns about.
@pytest.mark.filterwarnings("ignore:No application metrics to publish")
def test_unverified_sender_fails_with_advice_and_the_digest_day_always_mails(
    aws: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given billing history and a sender never verified in SES, on the digest weekday
    _inject_billing(aws, billing.demo_history(end=TODAY))
    monkeypatch.setenv("COST_DIGEST_WEEKDAY", str(TODAY.weekday()))

    # When the function runs, Then it fails saying to verify the sender, and sends nothing
    with pytest.raises(DeliveryFailed, match=f"verify the sender {SENDER} in SES in {REGION}"):
        _invoke(TODAY)
    assert _sent_messages(aws) == []

    # When the sender is verified and the function runs again
    boto3.client("ses").verify_email_identity(EmailAddress=SENDER)
    first = _invoke(TODAY)

    # Then the anomalies the failed run had claimed are reported after all, as a digest
    assert (first["sent"], first["digest"], first["anomalies_reported"]) == (True, True, 3)
    # And there being no training jobs is said, not fatal
    assert any("No SageMaker training jobs" in p["message"] for p in first["problems"])

    # When it runs once more that day, with nothing new
    second = _invoke(TODAY)

    # Then the digest still goes out, listing the week's anomalies
    assert (second["sent"], second["anomalies_reported"]) == (True, 0)
    subjects = [m["Subject"] for m in _sent_messages(aws)]
    assert len(subjects) == 2
    assert all(s.startswith("SageMaker cost weekly digest: 3 anomalies") for s in subjects)
