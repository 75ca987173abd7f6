"""The report e-mail: subject with the headline figure, a plain-text part, and an HTML
part with the chart inline.

MIME layout (what mail clients expect for HTML with an inline image)::

    multipart/alternative
    |- text/plain
    `- multipart/related
       |- text/html            <img src="cid:...">
       `- image/png            Content-ID: <...>

Pure: takes the analysis and the chart's bytes, returns the message. The HTML uses
inline styles and tables only, as most mail clients ignore style sheets.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, make_msgid
from html import escape

from fleetcast_cost.models import Anomaly, CostAnalysis, SourceProblem

CHART_CID_DOMAIN = "fleetcast.cost"
# The chart's size in pixels (chart.py draws it at 100 dpi); here, not there, so that
# composing the e-mail does not import matplotlib.
CHART_SIZE = (900, 560)
# CRLF line ends for SES raw mail; headers unfolded up to RFC 5322's 998 characters, as
# Python folds a long subject onto a line of its own, which some parsers keep a space of.
MAIL_POLICY = SMTP.clone(max_line_length=998)


@dataclass(frozen=True)
class ComposedEmail:
    message: EmailMessage
    subject: str
    text: str
    html: str
    chart_cid: str | None

    def html_with_embedded_chart(self, chart_png: bytes | None) -> str:
        """The HTML with the ``cid:`` reference swapped for a data URI: a file a browser
        can open on its own (the local outbox, the e-mail preview)."""
        if not self.chart_cid or chart_png is None:
            return self.html
        data = base64.b64encode(chart_png).decode("ascii")
        return self.html.replace(f"cid:{self.chart_cid}", f"data:image/png;base64,{data}")


def subject_line(analysis: CostAnalysis, anomalies: Sequence[Anomaly], digest: bool) -> str:
    """E.g. "SageMaker cost: 3 anomalies, +$412 over expected; save up to $1,230/month"."""
    impact = sum(a.impact for a in anomalies)
    count = f"{len(anomalies)} anomal{'y' if len(anomalies) == 1 else 'ies'}"
    if digest:
        head = "SageMaker cost weekly digest: "
        head += f"{count}, +${impact:,.0f} over expected" if anomalies else "no anomalies"
    else:
        head = f"SageMaker cost: {count}, +${impact:,.0f} over expected"
    if analysis.monthly_saving_usd >= 1:
        head += f"; save up to ${analysis.monthly_saving_usd:,.0f}/month"
    return head


def compose(
    analysis: CostAnalysis,
    anomalies: Sequence[Anomaly],
    new: Collection[tuple[str, dt.date]],
    digest: bool,
    sender: str,
    recipients: Sequence[str],
    sent_at: dt.datetime,
    chart_png: bytes | None,
) -> ComposedEmail:
    """``anomalies`` are the table's rows; ``new`` the keys not e-mailed before."""
    subject = subject_line(analysis, anomalies, digest)
    cid = make_msgid(domain=CHART_CID_DOMAIN)[1:-1] if chart_png else None
    text = _text(analysis, anomalies, new, digest)
    html = _html(analysis, anomalies, new, digest, subject, cid)
    message = EmailMessage(policy=MAIL_POLICY)
    message["Subject"] = subject
    message["From"] = sender
    message["To"] = ", ".join(recipients)
    message["Date"] = format_datetime(sent_at)
    message["Message-ID"] = make_msgid(domain=CHART_CID_DOMAIN)
    message.set_content(text)
    message.add_alternative(html, subtype="html")
    html_part = message.get_body(preferencelist=("html",))
    if chart_png is not None and cid is not None and html_part is not None:
        html_part.add_related(
            chart_png,
            maintype="image",
            subtype="png",
            cid=f"<{cid}>",
            filename="sagemaker-cost.png",
            disposition="inline",
        )
    return ComposedEmail(message, subject, text, html, cid)


def _period(analysis: CostAnalysis) -> str:
    last = analysis.end - dt.timedelta(days=1)
    return f"{analysis.start:%d %b %Y} to {last:%d %b %Y}"


def _intro(analysis: CostAnalysis, anomalies: Sequence[Anomaly], digest: bool) -> str:
    what = "This week's anomalies" if digest else "New or grown anomalies"
    return (
        f"SageMaker cost from {_period(analysis)}: ${analysis.total_cost_usd:,.2f} in total. "
        f"{what}: {len(anomalies)}. Training jobs analysed: {analysis.training_jobs_analysed}."
    )


def _found_by(anomaly: Anomaly) -> str:
    names = {"fleetcast": "fleetcast", "aws_cost_anomaly_detection": "AWS anomaly detection"}
    return " + ".join(names[d] for d in anomaly.detected_by)


def _kind(anomaly: Anomaly) -> str:
    return anomaly.kind.replace("_", " ") + (" (estimated)" if anomaly.estimated else "")


def _footer(analysis: CostAnalysis) -> list[str]:
    lines = [
        "Expected cost: the median of the previous two weeks, adjusted for the weekday; a day "
        "is flagged when it is above that by both thresholds and by more than its usual "
        "day-to-day wobble.",
        f"Savings use the bundled on-demand price table (us-east-1, as of {analysis.prices_as_of}"
        "); 'save up to' counts each job's largest saving once, as changes overlap.",
    ]
    if analysis.anomalies and any(a.estimated for a in analysis.anomalies):
        lines.append("Cost Explorer still marks the latest days as estimated; they may move.")
    return lines


def _problems_by_severity(analysis: CostAnalysis) -> list[tuple[str, list[SourceProblem]]]:
    """Failures under their own heading; what is merely worth knowing under "Notes"."""
    errors = [p for p in analysis.problems if p.severity == "error"]
    notes = [p for p in analysis.problems if p.severity != "error"]
    return [(h, p) for h, p in (("Sources with problems", errors), ("Notes", notes)) if p]


def _text(
    analysis: CostAnalysis,
    anomalies: Sequence[Anomaly],
    new: Collection[tuple[str, dt.date]],
    digest: bool,
) -> str:
    lines = [_intro(analysis, anomalies, digest), ""]
    if anomalies:
        lines.append("ANOMALIES")
        lines.append(
            f"{'Usage type':<34} {'Day':<10} {'Actual':>10} {'Expected':>10} {'Impact':>10}  Kind"
        )
        for a in anomalies:
            marker = " *new*" if digest and a.key in new else ""
            lines.append(
                f"{a.usage_type:<34} {a.date.isoformat():<10} {a.actual:>10,.2f} "
                f"{a.expected:>10,.2f} {a.impact:>+10,.2f}  {_kind(a)} [{_found_by(a)}]{marker}"
            )
        lines.append("")
    if analysis.recommendations:
        lines.append(
            f"RECOMMENDATIONS (save up to ${analysis.monthly_saving_usd:,.2f}/month in all)"
        )
        for number, r in enumerate(analysis.recommendations, start=1):
            lines.append(
                f"{number}. {r.kind.replace('_', ' ')} - ${r.monthly_saving_usd:,.2f}/month"
            )
            lines.append(f"   {r.evidence}")
            lines.append(f"   What to do: {r.action}")
        lines.append("")
    for heading, problems in _problems_by_severity(analysis):
        lines.append(heading.upper())
        lines.extend(f"- {p.source}: {p.message}" for p in problems)
        lines.append("")
    lines.extend(_footer(analysis))
    return "\n".join(lines) + "\n"


_CELL = "padding:4px 8px;border-bottom:1px solid #ddd;"
_NUMBER = _CELL + "text-align:right;font-variant-numeric:tabular-nums;"
_HEAD = "padding:4px 8px;border-bottom:2px solid #333;text-align:left;"
_NUMERIC_HEADS = frozenset({"Actual", "Expected", "Impact", "Saving/month"})


def _th(text: str, numeric: bool) -> str:
    # A number column's heading sits over the numbers' right edge.
    align = "text-align:right;" if numeric else ""
    return f'<th style="{_HEAD}{align}">{escape(text)}</th>'


def _html(
    analysis: CostAnalysis,
    anomalies: Sequence[Anomaly],
    new: Collection[tuple[str, dt.date]],
    digest: bool,
    subject: str,
    cid: str | None,
) -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(subject)}</title></head>",
        '<body style="font-family:Arial,Helvetica,sans-serif;color:#222;max-width:960px;">',
        f'<h1 style="font-size:20px;">{escape(subject)}</h1>',
        f"<p>{escape(_intro(analysis, anomalies, digest))}</p>",
    ]
    if cid:
        parts.append(
            f'<p><img src="cid:{escape(cid)}" width="{CHART_SIZE[0]}" '
            f'height="{CHART_SIZE[1]}" '
            'alt="Daily SageMaker cost by usage type, anomalies marked"></p>'
        )
    if anomalies:
        parts.append('<h2 style="font-size:16px;">Anomalies</h2>')
        parts.append('<table style="border-collapse:collapse;font-size:13px;">')
        heads = ("Usage type", "Day", "Actual", "Expected", "Impact", "Kind", "Found by")
        parts.append("<tr>" + "".join(_th(h, h in _NUMERIC_HEADS) for h in heads) + "</tr>")
        for a in anomalies:
            badge = ' <b style="color:#D55E00;">new</b>' if digest and a.key in new else ""
            parts.append(
                "<tr>"
                f'<td style="{_CELL}">{escape(a.usage_type)}{badge}</td>'
                f'<td style="{_CELL}">{a.date.isoformat()}</td>'
                f'<td style="{_NUMBER}">${a.actual:,.2f}</td>'
                f'<td style="{_NUMBER}">${a.expected:,.2f}</td>'
                f'<td style="{_NUMBER}color:#D55E00;">+${a.impact:,.2f}</td>'
                f'<td style="{_CELL}">{escape(_kind(a))}</td>'
                f'<td style="{_CELL}">{escape(_found_by(a))}</td>'
                "</tr>"
            )
        parts.append("</table>")
    if analysis.recommendations:
        parts.append(
            '<h2 style="font-size:16px;">Recommendations, by monthly saving '
            f"(up to ${analysis.monthly_saving_usd:,.2f}/month in all)</h2>"
        )
        parts.append('<table style="border-collapse:collapse;font-size:13px;">')
        columns = ("Saving/month", "Change", "Evidence", "What to do")
        parts.append("<tr>" + "".join(_th(h, h in _NUMERIC_HEADS) for h in columns) + "</tr>")
        for r in analysis.recommendations:
            parts.append(
                "<tr>"
                f'<td style="{_NUMBER}vertical-align:top;"><b>${r.monthly_saving_usd:,.2f}</b></td>'
                f'<td style="{_CELL}vertical-align:top;">{escape(r.kind.replace("_", " "))}</td>'
                f'<td style="{_CELL}vertical-align:top;">{escape(r.evidence)}</td>'
                f'<td style="{_CELL}vertical-align:top;">{escape(r.action)}</td>'
                "</tr>"
            )
        parts.append("</table>")
    for heading, problems in _problems_by_severity(analysis):
        parts.append(f'<h2 style="font-size:16px;">{heading}</h2><ul>')
        parts.extend(f"<li><b>{escape(p.source)}</b>: {escape(p.message)}</li>" for p in problems)
        parts.append("</ul>")
    parts.append('<p style="font-size:11px;color:#666;">')
    parts.append("<br>".join(escape(line) for line in _footer(analysis)))
    parts.append("</p></body></html>")
    return "\n".join(parts) + "\n"
