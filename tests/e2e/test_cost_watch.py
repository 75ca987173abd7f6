"""Cost watch on the embedded local stack: the scheduled function e-mails the synthetic
account's anomalies through SES into the outbox, and ``fleetcast cost-report`` analyses,
sends (once), and reads saved Cost Explorer responses."""

from __future__ import annotations

import datetime as dt
import email
import json
import re
import struct
import urllib.request
from collections.abc import Iterator
from email.message import EmailMessage
from email.policy import default
from pathlib import Path
from typing import Any

import pytest

from fleetcast.cli import main
from fleetcast.embedded import billing
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_cost.mail import CHART_SIZE
from fleetcast_cost.settings import WEEKDAYS

pytestmark = pytest.mark.e2e
# The stack fills Cost Explorer for today (UTC); the report is dated by its run.
TODAY = dt.datetime.now(dt.UTC).date()


def sent_messages(stack: EmbeddedStack) -> list[EmailMessage]:
    """What SES sent, from moto's own record."""
    with urllib.request.urlopen(f"{stack.endpoint_url}/moto-api/data.json", timeout=30) as r:
        data = json.loads(r.read())
    messages = []
    for raw in data["ses"]["RawMessage"]:
        message = email.message_from_string(raw["raw_data"], policy=default)
        assert isinstance(message, EmailMessage)
        messages.append(message)
    return messages


@pytest.fixture(scope="module")
def scheduled(stack: EmbeddedStack) -> tuple[dict[str, Any], int]:
    """The function run once as its schedule would: its outcome, and the number of
    messages SES had sent before."""
    assert stack.costs is not None
    before = len(sent_messages(stack))
    return stack.costs.run_scheduled_report(), before


@pytest.fixture
def stack_env(stack: EmbeddedStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """This process configured as `eval "$(fleetcast env)"` would configure a shell."""
    assert stack.info is not None
    environment = stack.info.environment()
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    yield environment


def test_the_scheduled_report_arrives_with_chart_table_and_text(
    stack: EmbeddedStack, scheduled: tuple[dict[str, Any], int]
) -> None:
    # Given the synthetic account the stack loaded, with its three labelled anomalies
    labels = billing.demo_history(end=TODAY).labels()
    outcome, before = scheduled

    # When the function has run: Then it reported each of them, in one e-mail
    assert outcome["sent"] is True, outcome
    assert outcome["anomalies_reported"] == len(labels) == 3
    messages = sent_messages(stack)
    assert len(messages) == before + 1
    message = messages[-1]
    assert message["Subject"] == outcome["subject"]
    assert message["From"] == "cost-watch@example.com"

    # And it is text plus HTML, with the chart inline by Content-ID
    assert message.get_content_type() == "multipart/alternative"
    text_part = message.get_body(preferencelist=("plain",))
    html_part = message.get_body(preferencelist=("html",))
    assert text_part is not None and html_part is not None
    text, html = text_part.get_content(), html_part.get_content()
    [image] = [part for part in message.walk() if part.get_content_type() == "image/png"]
    assert f'src="cid:{image["Content-ID"].strip("<>")}"' in html
    png = image.get_content()
    assert png.startswith(b"\x89PNG") and struct.unpack(">II", png[16:24]) == CHART_SIZE

    # And the table and the text list every labelled anomaly, found by us and by AWS
    for header in ("Usage type", "Day", "Actual", "Expected", "Impact"):
        assert re.search(rf"<th[^>]*>{header}</th>", html), header
    rows = [line for line in text.splitlines() if line.startswith("USE1-")]
    assert {(row.split()[0], row.split()[1]) for row in rows} == {
        (label.usage_type, label.day.isoformat()) for label in labels
    }
    assert all("[fleetcast + AWS anomaly detection]" in row for row in rows)
    for label in labels:
        assert label.usage_type in html and label.day.isoformat() in html

    # And the subject's headline figure is the table's total impact
    kind = "cost weekly digest" if outcome["digest"] else "cost"
    assert message["Subject"].startswith(f"SageMaker {kind}: 3 anomalies, +$")
    impact = sum(float(row.split()[4].replace(",", "")) for row in rows)
    assert f"+${impact:,.0f} over expected" in message["Subject"]

    # And the outbox has the same e-mail, and a page a browser shows on its own
    outbox = Path(outcome["outbox_files"][0]).parent
    assert stack.info is not None and outbox == Path(stack.info.extra["FLEETCAST_OUTBOX"])
    saved = email.message_from_bytes((outbox / "latest.eml").read_bytes(), policy=default)
    assert saved["Message-ID"] == message["Message-ID"]
    page = (outbox / "latest.html").read_text()
    assert 'src="data:image/png;base64,' in page and "cid:" not in page


def test_cost_report_json_has_the_issue_shape_and_finds_the_labelled_anomalies(
    stack: EmbeddedStack, stack_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # When the analysis is asked for as JSON
    assert main(["cost-report", "--json"]) == 0
    analysis = json.loads(capsys.readouterr().out)

    # Then it has the issue's shape
    assert {"anomalies", "recommendations"} <= analysis.keys()
    for anomaly in analysis["anomalies"]:
        assert {"usage_type", "date", "actual", "expected", "impact"} <= anomaly.keys()
    for recommendation in analysis["recommendations"]:
        assert {"kind", "evidence", "monthly_saving_usd"} <= recommendation.keys()
    # And it found every labelled anomaly, merged with what AWS's detection found
    found = {(a["usage_type"], a["date"]): a for a in analysis["anomalies"]}
    for label in billing.demo_history(end=TODAY).labels():
        anomaly = found[(label.usage_type, label.day.isoformat())]
        assert anomaly["detected_by"] == ["fleetcast", "aws_cost_anomaly_detection"]
        assert anomaly["impact"] == pytest.approx(anomaly["actual"] - anomaly["expected"], abs=0.01)
    # And every training job in the stack's SageMaker was analysed
    jobs = stack.client("sagemaker").list_training_jobs(MaxResults=100)["TrainingJobSummaries"]
    assert analysis["training_jobs_analysed"] == len(jobs)


def test_a_second_run_sends_nothing_new(
    stack: EmbeddedStack,
    scheduled: tuple[dict[str, Any], int],
    stack_env: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the report already sent today, and a day that is not the digest's
    outbox = Path(stack_env["FLEETCAST_OUTBOX"])
    monkeypatch.setenv("COST_DIGEST_WEEKDAY", WEEKDAYS[(TODAY.weekday() + 3) % 7])
    messages, files = len(sent_messages(stack)), sorted(outbox.iterdir())

    # When it runs again (in this process, with the function's settings)
    assert main(["cost-report", "--send"]) == 0

    # Then it remembers: nothing is sent and nothing lands in the outbox
    assert "nothing new to report" in capsys.readouterr().out
    assert len(sent_messages(stack)) == messages
    assert sorted(outbox.iterdir()) == files


def test_a_report_for_another_day_reads_that_days_cost_explorer(
    stack_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a day the stack did not fill Cost Explorer for at start
    day = TODAY - dt.timedelta(days=10)

    # When the report is asked for as of that day
    assert main(["cost-report", "--json", "--date", day.isoformat()]) == 0
    analysis = json.loads(capsys.readouterr().out)

    # Then Cost Explorer answered for its window, with that window's anomalies
    assert (analysis["report_date"], analysis["end"]) == (day.isoformat(), day.isoformat())
    found = {(a["usage_type"], a["date"]) for a in analysis["anomalies"]}
    labels = billing.demo_history(end=day).labels()
    assert {(label.usage_type, label.day.isoformat()) for label in labels} <= found


def test_ce_results_file_is_analysed_and_a_malformed_one_is_refused(
    stack_env: dict[str, str], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Given saved GetCostAndUsage pages of another account and time
    history = billing.labelled_history(dt.date(2026, 1, 1), seed=3)
    saved = tmp_path / "pages.json"
    saved.write_text(json.dumps(history.pages()))

    # When they are analysed instead of Cost Explorer
    assert main(["cost-report", "--json", "--ce-results", str(saved)]) == 0
    analysis = json.loads(capsys.readouterr().out)

    # Then the report covers their window and finds their anomalies
    assert (analysis["start"], analysis["end"]) == (
        history.start.isoformat(),
        history.end.isoformat(),
    )
    found = {(a["usage_type"], a["date"]) for a in analysis["anomalies"]}
    spikes = [label for label in history.labels() if label.shape == "spike"]
    assert sum((s.usage_type, s.day.isoformat()) in found for s in spikes) >= len(spikes) - 1

    # When a file is not in AWS's shape, Then it is refused, saying what is wrong
    malformed = tmp_path / "malformed.json"
    malformed.write_text(json.dumps([{"ResultsByTime": [{"TimePeriod": {"Start": "2026-01-01"}}]}]))
    assert main(["cost-report", "--ce-results", str(malformed)]) == 2
    error = " ".join(capsys.readouterr().err.split())
    assert "is not a GetCostAndUsage response" in error
    assert 'Missing required parameter in ResultsByTime[0].TimePeriod: "End"' in error
