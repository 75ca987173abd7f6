"""Cost watch on the local stack: billing history in Cost Explorer, anomaly detection,
SES, and the outbox the e-mails are copied to.

* **Cost Explorer**: moto answers ``GetCostAndUsage`` from a queue of injected responses
  (``POST /moto-api/static/ce/cost-and-usage-results``), binding the first one queued to
  each distinct request body. :class:`CostExplorerHistory` fills that queue with
  ``billing.demo_history`` for the window asked about and at once asks for every page
  itself, through the cost report's own adapter, so the pages are bound to exactly the
  requests the report makes, in order. Today's window is filled at start; any other
  window (``fleetcast cost-report --date``, a stack still running tomorrow) the first time
  a request asks for it.
* **Cost Anomaly Detection**: moto answers ``GetAnomalies`` with a 500.
  :class:`AnomalyDetection` answers in AWS's shape from the synthetic history's labelled
  anomalies, so the report's merge of AWS's findings with its own runs locally too.
* **SES**: the sender is verified (moto checks nothing else); sent mail is in moto's
  ``GET /moto-api/data.json`` and, through ``COST_OUTBOX_DIR``, in ``<state>/outbox``.

The scheduled rule is not emulated: :meth:`LocalCosts.run_scheduled_report` invokes the
function with ``events/schedule.json`` (``fleetcast demo`` does, at its end).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import io
import json
import logging
import statistics
import threading
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from email.utils import parseaddr
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetcast.embedded import billing
from fleetcast.embedded.moto_patches.server import MotoDispatcher
from fleetcast.embedded.template import ACCOUNT_ID, REGION
from fleetcast_cost import sources
from fleetcast_cost.settings import CostReportSettings

if TYPE_CHECKING:
    from fleetcast.embedded.context import ServiceContext
    from fleetcast.embedded.gateway import WsgiApp

log = logging.getLogger("fleetcast.embedded.costs")

COST_REPORT_FUNCTION = "CostReportFunction"
LOCAL_MONITOR_ARN = f"arn:aws:ce::{ACCOUNT_ID}:anomalymonitor/fleetcast-local-sagemaker"
# template.yaml leaves the addresses without a default (a deployment names real ones);
# the local stack names its own, and a monitor so AWS's anomalies are merged in.
LOCAL_PARAMETERS = {
    "CostReportSender": "cost-watch@example.com",
    "CostReportRecipients": "ops@example.com",
    "CostAnomalyMonitorArn": LOCAL_MONITOR_ARN,
}
OUTBOX_FOLDER = "outbox"
CE_TARGET = "AWSInsightsIndexService"
# Our own requests that bind injected pages to request bodies carry this header, so the
# route lets them through to moto instead of waiting for the window they are filling.
_PRIMING_HEADER = "X-Fleetcast-Priming"
_PRIMING_ENVIRON = "HTTP_X_FLEETCAST_PRIMING"
# The demo history needs a few weeks for its pattern; shorter windows are cut from it.
_MIN_DEMO_DAYS = 28
# AWS's billing data lags up to a day: its detection has not seen yesterday yet.
_AWS_LAG_DAYS = 1
# Small pages, so that the report's GetAnomalies paging runs locally too.
DEFAULT_ANOMALY_PAGE_SIZE = 2


def outbox_dir(state_dir: Path) -> Path:
    return state_dir / OUTBOX_FOLDER


def local_function_environment(logical_id: str, state_dir: Path) -> dict[str, str]:
    """What only the local stack gives a function: the cost report copies its e-mails to
    the outbox (``make email-preview`` renders ``latest.html`` from there)."""
    if logical_id != COST_REPORT_FUNCTION:
        return {}
    return {"COST_OUTBOX_DIR": str(outbox_dir(state_dir))}


# -- the synthetic account -----------------------------------------------------------------


@functools.lru_cache(maxsize=32)
def demo_window(start: dt.date, end: dt.date) -> billing.BillingHistory:
    """The synthetic account as Cost Explorer shows it for ``[start, end)``: the demo
    history ending on ``end``, its anomalies in the last few days, so a report on any
    day has something to say. Deterministic, so Cost Explorer and anomaly detection
    agree about a window."""
    days = max(0, (end - start).days)
    full = billing.demo_history(end=end, days=max(days, _MIN_DEMO_DAYS))
    if days == full.days:
        return full
    cut = full.days - days
    return billing.BillingHistory(
        start,
        days,
        tuple(
            dataclasses.replace(
                series,
                costs=series.costs[cut:],
                anomaly_days=tuple((i - cut, s) for i, s in series.anomaly_days if i >= cut),
            )
            for series in full.series
        ),
    )


HistoryFor = Callable[[dt.date, dt.date], billing.BillingHistory]


# -- WSGI plumbing -------------------------------------------------------------------------


def ce_operation(operation: str) -> Callable[[dict[str, Any]], bool]:
    """A gateway route matcher for one Cost Explorer operation (JSON protocol)."""
    target = f"{CE_TARGET}.{operation}"
    return lambda environ: environ.get("HTTP_X_AMZ_TARGET") == target


def _read_body(environ: dict[str, Any]) -> bytes:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body: bytes = environ["wsgi.input"].read(length) if length else b""
    # Whoever answers next reads it again.
    environ["wsgi.input"] = io.BytesIO(body)
    return body


def _json_response(
    start_response: Callable[..., Any], status: str, payload: Mapping[str, Any]
) -> list[bytes]:
    body = json.dumps(payload).encode()
    start_response(
        status,
        [
            ("Content-Type", "application/x-amz-json-1.1"),
            ("Content-Length", str(len(body))),
            ("x-amzn-RequestId", str(uuid.uuid4())),
        ],
    )
    return [body]


class ApiError(Exception):
    """An error as AWS's JSON protocol returns it: HTTP 400 and ``__type``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- Cost Anomaly Detection ----------------------------------------------------------------


class AnomalyDetection:
    """``GetAnomalies`` for the local stack, in AWS's response shape.

    Answers for the configured monitor only (another ARN gets AWS's
    ``UnknownMonitorException``), or with no anomalies when none is configured. Each
    labelled anomaly of the synthetic history that AWS would have seen by now (its
    billing data lags a day) is one anomaly with one SageMaker root cause; its
    expected spend is the median of the fortnight before, a rough stand-in for AWS's
    model.
    """

    def __init__(
        self,
        monitor_arn: str | None,
        history_for: HistoryFor = demo_window,
        account_id: str = ACCOUNT_ID,
        page_size: int = DEFAULT_ANOMALY_PAGE_SIZE,
        today: Callable[[], dt.date] = lambda: dt.datetime.now(dt.UTC).date(),
    ) -> None:
        self._monitor_arn = monitor_arn
        self._history_for = history_for
        self._account_id = account_id
        self._page_size = page_size
        self._today = today

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        try:
            request = json.loads(_read_body(environ) or b"{}")
            if not isinstance(request, dict):
                raise ApiError("SerializationException", "the request body is not an object")
            return _json_response(start_response, "200 OK", self.get_anomalies(request))
        except json.JSONDecodeError:
            error = ApiError("SerializationException", "the request body is not JSON")
        except ApiError as raised:
            error = raised
        return _json_response(
            start_response, "400 Bad Request", {"__type": error.code, "Message": error.message}
        )

    def get_anomalies(self, request: Mapping[str, Any]) -> dict[str, Any]:
        monitor = request.get("MonitorArn")
        interval = request.get("DateInterval") or {}
        if not monitor or "StartDate" not in interval:
            raise ApiError(
                "ValidationException", "MonitorArn and DateInterval.StartDate are required"
            )
        if self._monitor_arn is None:
            return {"Anomalies": []}
        if monitor != self._monitor_arn:
            raise ApiError("UnknownMonitorException", f"Monitor {monitor} does not exist.")
        try:
            start = dt.date.fromisoformat(str(interval["StartDate"])[:10])
            end = dt.date.fromisoformat(str(interval.get("EndDate") or self._today())[:10])
        except ValueError as error:
            raise ApiError("ValidationException", f"DateInterval: {error}") from error
        anomalies = self.anomalies(monitor, start, end)
        size = int(request.get("MaxResults") or self._page_size)
        token = request.get("NextPageToken")
        offset = 0
        if token:
            try:
                offset = int(str(token).removeprefix("fleetcast-anomalies-"))
            except ValueError as error:
                raise ApiError("InvalidNextTokenException", "Invalid NextPageToken") from error
        page: dict[str, Any] = {"Anomalies": anomalies[offset : offset + size]}
        if offset + size < len(anomalies):
            page["NextPageToken"] = f"fleetcast-anomalies-{offset + size}"
        return page

    def anomalies(self, monitor: str, start: dt.date, end: dt.date) -> list[dict[str, Any]]:
        """Every anomaly starting in ``[start, end]``, newest first."""
        history = self._history_for(start, end)
        seen_until = history.end - dt.timedelta(days=1 + _AWS_LAG_DAYS)
        costs = history.daily_costs()
        found = []
        for label in history.labels():
            if not start <= label.day <= min(end, seen_until):
                continue
            series = costs[label.usage_type]
            index = (label.day - history.start).days
            before = series[max(0, index - 14) : index]
            found.append(self._anomaly(monitor, label, series[index], before))
        return sorted(found, key=lambda a: a["AnomalyStartDate"], reverse=True)

    def _anomaly(
        self,
        monitor: str,
        label: billing.LabelledAnomaly,
        actual: float,
        before: list[float],
    ) -> dict[str, Any]:
        expected = statistics.median(before) if before else 0.0
        impact = max(0.0, actual - expected)
        score = round(min(1.0, impact / actual), 2) if actual > 0 else 0.0
        ongoing = label.shape != "spike"
        totals: dict[str, Any] = {
            "MaxImpact": round(impact, 2),
            "TotalImpact": round(impact, 2),
            "TotalActualSpend": round(actual, 2),
            "TotalExpectedSpend": round(expected, 2),
        }
        if expected > 0:
            totals["TotalImpactPercentage"] = round(impact / expected * 100, 2)
        anomaly: dict[str, Any] = {
            "AnomalyId": str(
                uuid.uuid5(uuid.NAMESPACE_URL, f"{monitor}/{label.usage_type}/{label.day}")
            ),
            "AnomalyStartDate": label.day.isoformat(),
            "DimensionValue": sources.SAGEMAKER_SERVICE,
            "RootCauses": [
                {
                    "Service": sources.SAGEMAKER_SERVICE,
                    "Region": REGION,
                    "LinkedAccount": self._account_id,
                    "LinkedAccountName": "fleetcast-local",
                    "UsageType": label.usage_type,
                    "Impact": {"Contribution": round(impact, 2)},
                }
            ],
            "AnomalyScore": {"MaxScore": score, "CurrentScore": score if ongoing else 0.0},
            "Impact": totals,
            "MonitorArn": monitor,
        }
        if not ongoing:
            anomaly["AnomalyEndDate"] = label.day.isoformat()
        return anomaly


# -- Cost Explorer -------------------------------------------------------------------------


class CostExplorerHistory:
    """``GetCostAndUsage`` on the local stack: moto's, filled with the synthetic history
    for each window (``TimePeriod``) the first time it is asked for.

    Filling a window queues its pages in moto and binds them at once, with requests of
    the cost report's adapter (:func:`sources.fetch_usage`), one per page: moto then
    answers the report's own requests, which have the same bodies, with the right page
    each. A request of another shape for the same window gets moto's empty answer.
    """

    def __init__(
        self,
        endpoint_url: str,
        ce: Any,
        forward: WsgiApp,
        history_for: HistoryFor = demo_window,
        account_id: str = ACCOUNT_ID,
    ) -> None:
        self._endpoint_url = endpoint_url
        self._ce = ce
        self._forward = forward
        self._history_for = history_for
        self._account_id = account_id
        self._filled: set[tuple[dt.date, dt.date]] = set()
        self._lock = threading.Lock()
        ce.meta.events.register("before-sign.ce.GetCostAndUsage", _mark_priming)

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if not environ.get(_PRIMING_ENVIRON):
            window = _time_period(_read_body(environ))
            if window is not None:
                self.fill(*window)
        return self._forward(environ, start_response)

    def fill(self, start: dt.date, end: dt.date) -> None:
        """Make moto answer the report's requests for ``[start, end)`` (once per window)."""
        with self._lock:
            if (start, end) in self._filled:
                return
            history = self._history_for(start, end)
            # The gateway's own moto API, plain HTTP on 127.0.0.1.
            request = urllib.request.Request(  # noqa: S310
                f"{self._endpoint_url}/moto-api/static/ce/cost-and-usage-results",
                data=json.dumps(history.moto_injection(self._account_id)).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
                response.read()
            self._filled.add((start, end))
            served = sources.fetch_usage(self._ce, start, end)
            expected = sum(1 for s in history.series for cost in s.costs if cost > 0)
            if len(served.usage) != expected:
                raise RuntimeError(
                    f"moto served {len(served.usage)} of the {expected} daily costs queued "
                    f"for {start}..{end}: another request took queued pages"
                )
            log.info("Cost Explorer holds %s daily costs for %s..%s", expected, start, end)


def _mark_priming(request: Any, **_: Any) -> None:
    request.headers[_PRIMING_HEADER] = "1"


def _time_period(body: bytes) -> tuple[dt.date, dt.date] | None:
    """A daily ``TimePeriod`` of a GetCostAndUsage body; None for anything else, which
    moto answers (or rejects) as it would."""
    try:
        period = json.loads(body)["TimePeriod"]
        start, end = dt.date.fromisoformat(period["Start"]), dt.date.fromisoformat(period["End"])
    except (ValueError, KeyError, TypeError):
        return None
    return (start, end) if start < end else None


# -- the stack's part ----------------------------------------------------------------------


class LocalCosts:
    def __init__(self, context: ServiceContext) -> None:
        self._context = context
        self.outbox = outbox_dir(context.state_dir)
        self.explorer: CostExplorerHistory | None = None

    @property
    def enabled(self) -> bool:
        return COST_REPORT_FUNCTION in self._context.template.resources

    def environment(self) -> dict[str, str]:
        """The cost report's variables as the local function has them."""
        function = self._context.template.function_environment(COST_REPORT_FUNCTION)
        return {
            **{name: value for name, value in function.items() if name.startswith("COST_")},
            **local_function_environment(COST_REPORT_FUNCTION, self._context.state_dir),
        }

    def start(self) -> dict[str, str]:
        """Fill Cost Explorer, emulate GetAnomalies, verify the sender; return the extra
        ``fleetcast env`` variables (the report's own, and ``FLEETCAST_OUTBOX``)."""
        if not self.enabled:
            return {}
        context = self._context
        environment = self.environment()
        settings = CostReportSettings.from_env(environment)
        # A new account's SES is in the sandbox: the recipients are verified identities too.
        for address in (settings.sender, *settings.recipients):
            context.client("ses").verify_email_identity(EmailAddress=parseaddr(address)[1])
        context.add_route(
            ce_operation("GetAnomalies"), AnomalyDetection(settings.anomaly_monitor_arn)
        )
        self.explorer = CostExplorerHistory(
            context.endpoint_url,
            context.client("ce"),
            forward=MotoDispatcher(),
        )
        context.add_route(ce_operation("GetCostAndUsage"), self.explorer)
        today = dt.datetime.now(dt.UTC).date()
        self.explorer.fill(today - dt.timedelta(days=settings.lookback_days), today)
        self.outbox.mkdir(parents=True, exist_ok=True)
        return {**environment, "FLEETCAST_OUTBOX": str(self.outbox)}

    def run_scheduled_report(self, now: dt.datetime | None = None) -> dict[str, Any]:
        """Invoke the function as its schedule would (``events/schedule.json`` at ``now``);
        its outcome. Raises what the function raises (an unverified sender, say)."""
        now = now or dt.datetime.now(dt.UTC)
        template = self._context.template
        function = template.resources[COST_REPORT_FUNCTION]["Properties"]
        (rule,) = (
            template.resolve(event["Properties"]["Name"])
            for event in function["Events"].values()
            if event["Type"] == "Schedule"
        )
        event = json.loads((self._context.root / "events" / "schedule.json").read_text())
        event.update(
            id=str(uuid.uuid4()),
            time=now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            resources=[f"arn:aws:events:{REGION}:{ACCOUNT_ID}:rule/{rule}"],
        )
        outcome: dict[str, Any] = self._context.functions[COST_REPORT_FUNCTION].invoke(event)
        return outcome

    def stop(self) -> None:
        """Nothing to release: the routes go with the gateway, the outbox stays."""
