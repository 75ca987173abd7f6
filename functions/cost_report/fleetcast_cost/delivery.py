"""Getting the report to people: SES ``SendRawEmail``, and a local outbox folder.

The outbox (``COST_OUTBOX_DIR``, local stack only) gets the ``.eml`` exactly as sent and
an ``.html`` with the chart embedded as a data URI, so a browser (or ``make
email-preview``) can show it without a mail client; ``latest.eml``/``latest.html``
always point at the newest.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from fleetcast_contracts.errors import error_code
from fleetcast_cost.mail import ComposedEmail


class DeliveryFailed(Exception):
    """SES did not take the message; the text says what to do."""


def send(
    ses: Any, email: ComposedEmail, sender: str, recipients: Sequence[str], region: str
) -> str:
    """The SES message id."""
    try:
        response = ses.send_raw_email(
            Source=sender,
            Destinations=list(recipients),
            RawMessage={"Data": email.message.as_bytes()},
        )
    except ClientError as error:
        raise DeliveryFailed(_advice(error, sender, region)) from error
    except BotoCoreError as error:
        raise DeliveryFailed(f"Could not reach SES in {region}: {error}.") from error
    return str(response["MessageId"])


def _advice(error: ClientError, sender: str, region: str) -> str:
    code = error_code(error)
    if code in {"MessageRejected", "MailFromDomainNotVerifiedException"}:
        return (
            f"SES rejected the report ({code}): verify the sender {sender} in SES in "
            f"{region} (Verified identities; click the link SES e-mails to it). While the "
            "account is in the SES sandbox, every recipient must be verified too."
        )
    if code == "AccountSendingPausedException":
        return (
            f"SES sending is paused for this account in {region} ({code}): see the SES "
            "reputation dashboard before sending resumes."
        )
    if code == "AccessDenied" or code == "AccessDeniedException":
        return (
            f"SES refused the function ({code}): its role needs ses:SendRawEmail on the "
            f"identity of {sender}."
        )
    return f"SES did not send the report ({code}): {error}."


def write_outbox(
    folder: Path, email: ComposedEmail, chart_png: bytes | None, sent_at: dt.datetime
) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{sent_at:%Y%m%dT%H%M%S}-cost-report"
    eml = email.message.as_bytes()
    html = email.html_with_embedded_chart(chart_png).encode()
    written = []
    for name, content in (
        (f"{stem}.eml", eml),
        (f"{stem}.html", html),
        ("latest.eml", eml),
        ("latest.html", html),
    ):
        path = folder / name
        path.write_bytes(content)
        written.append(path)
    return written
