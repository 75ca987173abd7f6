"""The report e-mail: MIME structure, inline chart, table, text part and subject."""

from __future__ import annotations

import datetime as dt
import email
import struct
from email.message import EmailMessage
from email.policy import default

import pytest

from fleetcast.embedded import billing
from fleetcast_cost import mail
from fleetcast_cost.chart import render_cost_chart
from fleetcast_cost.models import (
    Anomaly,
    CostAnalysis,
    DailyUsage,
    Recommendation,
    UsageHistory,
)
from fleetcast_cost.prices import bundled_prices
from fleetcast_cost.report import analyse
from fleetcast_cost.settings import CostAnalysisSettings
from fleetcast_cost.sources import parse_usage_pages

REPORT_DAY = dt.date(2026, 11, 30)
SENT_AT = dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def analysis() -> CostAnalysis:
    history = billing.demo_history(end=REPORT_DAY)
    usage = parse_usage_pages(history.pages(), history.start, history.end)
    result = analyse(
        usage, [], [], [], CostAnalysisSettings.from_env({}), REPORT_DAY, bundled_prices()
    )
    recommendations = (
        Recommendation(
            kind="use_spot",
            evidence="14 on-demand jobs ...; $2.14/day x 30 = $64.26/month.",
            monthly_saving_usd=64.26,
            instance_type="ml.c5.xlarge",
            action="Enable managed spot training.",
        ),
        Recommendation(
            kind="fastfile_input_mode",
            evidence="Downloading took 28% ...; $0.85/day x 30 = $25.50/month.",
            monthly_saving_usd=25.5,
            instance_type="ml.c5.xlarge",
            action="Use FastFile.",
        ),
    )
    return result.model_copy(
        update={"recommendations": recommendations, "monthly_saving_usd": 1230.4}
    )


@pytest.fixture(scope="module")
def chart(analysis: CostAnalysis) -> bytes:
    return render_cost_chart(
        analysis.history, analysis.anomalies, {a.key for a in analysis.anomalies}
    )


def _compose(
    analysis: CostAnalysis, chart: bytes | None, digest: bool = False
) -> mail.ComposedEmail:
    rows = list(analysis.anomalies)
    return mail.compose(
        analysis,
        rows,
        {a.key for a in rows},
        digest,
        "Cost watch <cost@example.com>",
        ["ops@example.com", "finops@example.com"],
        SENT_AT,
        chart,
    )


def test_the_demo_history_has_three_anomalies_to_report(analysis: CostAnalysis) -> None:
    assert [(a.usage_type, a.kind) for a in analysis.anomalies] == [
        ("USE1-Train:ml.c5.xlarge", "spike"),
        ("USE1-Train:ml.p3.2xlarge", "new_usage_type"),
        ("USE1-Host:ml.c5.xlarge", "level_shift"),
    ]


def test_mime_structure_is_text_plus_html_with_the_chart_inline(
    analysis: CostAnalysis, chart: bytes
) -> None:
    # Given the composed e-mail, read back as a mail client would
    composed = _compose(analysis, chart)
    message = email.message_from_bytes(composed.message.as_bytes(), policy=default)
    assert isinstance(message, EmailMessage)

    # Then it is text/plain and multipart/related(text/html, image/png) as alternatives
    assert message.get_content_type() == "multipart/alternative"
    text_part, related = message.iter_parts()
    assert text_part.get_content_type() == "text/plain"
    assert related.get_content_type() == "multipart/related"
    html_part, image_part = related.iter_parts()
    assert html_part.get_content_type() == "text/html"
    assert image_part.get_content_type() == "image/png"

    # And the HTML's cid: reference is the image's Content-ID
    content_id = image_part["Content-ID"].strip("<>")
    assert f'src="cid:{content_id}"' in html_part.get_content()
    assert image_part.get_content_disposition() == "inline"
    png = image_part.get_content()
    assert png == chart and png.startswith(b"\x89PNG\r\n\x1a\n")
    assert struct.unpack(">II", png[16:24]) == mail.CHART_SIZE

    # And it is addressed as configured
    assert message["From"] == "Cost watch <cost@example.com>"
    assert message["To"] == "ops@example.com, finops@example.com"


def test_subject_carries_the_headline_figures(analysis: CostAnalysis, chart: bytes) -> None:
    composed = _compose(analysis, chart)
    impact = sum(a.impact for a in analysis.anomalies)
    assert composed.subject == (
        f"SageMaker cost: 3 anomalies, +${impact:,.0f} over expected; save up to $1,230/month"
    )
    assert email.message_from_bytes(composed.message.as_bytes(), policy=default)["Subject"] == (
        composed.subject
    )


def test_table_and_text_part_list_every_anomaly_and_ranked_recommendation(
    analysis: CostAnalysis, chart: bytes
) -> None:
    composed = _compose(analysis, chart)
    for anomaly in analysis.anomalies:
        for part in (composed.text, composed.html):
            assert anomaly.usage_type in part
            assert anomaly.date.isoformat() in part
            assert f"{anomaly.actual:,.2f}" in part
            assert f"{anomaly.expected:,.2f}" in part
            assert f"{anomaly.impact:,.2f}" in part
    # Ranked by saving, in both parts
    for part in (composed.text, composed.html):
        assert part.index("use spot") < part.index("fastfile input mode")
        assert "$64.26" in part
    assert "<th" in composed.html and "Impact" in composed.html


def test_html_escapes_what_it_shows(analysis: CostAnalysis) -> None:
    hostile = Anomaly(
        usage_type="USE1-Train:<script>alert(1)</script>",
        date=REPORT_DAY - dt.timedelta(days=1),
        actual=20.0,
        expected=5.0,
        impact=15.0,
        kind="new_usage_type",
    )
    composed = mail.compose(
        analysis,
        [hostile],
        {hostile.key},
        False,
        "cost@example.com",
        ["a@example.com"],
        SENT_AT,
        None,
    )
    assert "<script>" not in composed.html
    assert "&lt;script&gt;" in composed.html
    # Without a chart there is no image and no related part
    assert composed.chart_cid is None
    assert "cid:" not in composed.html
    assert composed.message.get_body(preferencelist=("html",)) is not None


def test_weekly_digest_without_anomalies(analysis: CostAnalysis, chart: bytes) -> None:
    quiet = analysis.model_copy(update={"anomalies": ()})
    composed = mail.compose(
        quiet, [], set(), True, "cost@example.com", ["a@example.com"], SENT_AT, chart
    )
    assert composed.subject == "SageMaker cost weekly digest: no anomalies; save up to $1,230/month"
    assert "RECOMMENDATIONS" in composed.text


def test_outbox_html_embeds_the_chart(analysis: CostAnalysis, chart: bytes) -> None:
    composed = _compose(analysis, chart)
    standalone = composed.html_with_embedded_chart(chart)
    assert "cid:" not in standalone
    assert 'src="data:image/png;base64,' in standalone


def test_each_day_of_an_excursion_is_a_row_of_the_e_mail() -> None:
    # Given ~$100 a day of an endpoint, two days at $250 and $280 in the report's week,
    # then $100 again
    costs = [100.0 + (i % 5 - 2) for i in range(40)] + [250.0, 280.0] + [100.0] * 4
    start = REPORT_DAY - dt.timedelta(days=len(costs))
    usage = UsageHistory(
        start=start,
        end=REPORT_DAY,
        usage=tuple(
            DailyUsage(
                usage_type="USE1-Host:ml.m5.xlarge",
                day=start + dt.timedelta(days=i),
                cost_usd=cost,
            )
            for i, cost in enumerate(costs)
        ),
    )
    analysis = analyse(
        usage, [], [], [], CostAnalysisSettings.from_env({}), REPORT_DAY, bundled_prices()
    )
    # When the e-mail is composed
    composed = _compose(analysis, None)
    # Then both days are rows, as excursions, each with its own excess over ~$100
    assert [(a.date, a.kind, a.actual) for a in analysis.anomalies] == [
        (start + dt.timedelta(days=40), "excursion", 250.0),
        (start + dt.timedelta(days=41), "excursion", 280.0),
    ]
    for anomaly in analysis.anomalies:
        assert anomaly.impact == pytest.approx(anomaly.actual - 100.0, abs=2.0)
        for part in (composed.text, composed.html):
            assert anomaly.date.isoformat() in part
            assert f"{anomaly.impact:,.2f}" in part
    assert composed.text.count("excursion") == 2
