"""``fleetcast forecast``: a customer's forecast from the forecast API, as a table, as JSON
or drawn over the customer's recent history.

The API's URL and key come from ``FLEETCAST_API_URL`` / ``FLEETCAST_API_KEY`` (``fleetcast
env``, or a deployed stack's outputs), else from the running local stack.
"""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rich.console import Console
from rich.table import Table

from fleetcast.embedded.info import StackInfo
from fleetcast.terminal import print_table, shown
from fleetcast_contracts.frequency import Frequency, period_limits
from fleetcast_contracts.horizons import DEFAULT_PERIOD, MAX_PERIOD, MIN_PERIOD
from fleetcast_contracts.ids import InvalidCustomerIdError, is_valid_customer_id
from fleetcast_contracts.layout import history_shard_key
from fleetcast_contracts.quantiles import QUANTILES_EXAMPLE, quantile_key

API_URL_ENV = "FLEETCAST_API_URL"
API_KEY_ENV = "FLEETCAST_API_KEY"
# How much history the plot shows before the forecast: a few times the horizon; of a daily
# model at least eight weeks, so the weekly pattern the forecast continues is visible; of
# an hourly one two to four weeks, so each day's hours stay apart on the axis.
MIN_HISTORY_DAYS = 56
HISTORY_PER_FORECAST_DAY = 4
HOURLY_HISTORY_DAYS = (14, 28)
REQUEST_TIMEOUT_SECONDS = 35
# The unit of the readings, as the plot's axis names it: fleetcast adds readings up and
# never converts them, so this is whatever the meters' exports are in.
DEFAULT_UNIT = "kWh"
GATEWAY_ERROR_TYPE_HEADER = "x-amzn-ErrorType"
# API Gateway's error type for a request whose method and path match no route.
NO_ROUTE_ERROR_TYPE = "MissingAuthenticationTokenException"

console = Console()
err = Console(stderr=True)


class ServingError(Exception):
    """A problem the user can act on; printed without a traceback."""


@dataclass(frozen=True)
class ForecastApi:
    url: str
    key: str

    def __post_init__(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise ServingError(f"{API_URL_ENV}={self.url!r} is not an http(s) URL")

    def get(self, path: str) -> dict[str, Any]:
        # no-cache: the model live now, not one a warm API environment looked up before a
        # promotion (it keeps lookups for LIVE_MODEL_CACHE_SECONDS)
        request = urllib.request.Request(  # noqa: S310 - http(s) only, checked above
            self.url.rstrip("/") + path,
            headers={
                "x-api-key": self.key,
                "Accept": "application/json",
                "Cache-Control": "no-cache",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:  # noqa: S310
                document: dict[str, Any] = json.loads(response.read())
                return document
        except urllib.error.HTTPError as error:
            raise ServingError(_explain(error)) from None
        except urllib.error.URLError as error:
            raise ServingError(
                f"the forecast API at {self.url} does not answer ({error.reason}): is the stack "
                "running (`fleetcast up`)?"
            ) from None

    def forecast(
        self, customer_id: str, period: int, quantiles: tuple[float, ...] = ()
    ) -> dict[str, Any]:
        query = f"period={period}"
        if quantiles:
            query += "&quantiles=" + ",".join(quantile_key(q) for q in quantiles)
        return self.get(f"/customers/{quote(customer_id, safe='')}/forecast?{query}")


def _explain(error: urllib.error.HTTPError) -> str:
    try:
        message = json.loads(error.read()).get("message", "")
    except ValueError:
        message = ""
    # API Gateway's own answers name their kind in this header; both of its 403s say
    # "forbidden", and only one of them is about the key.
    error_type = error.headers.get(GATEWAY_ERROR_TYPE_HEADER, "")
    if error.code == 403 and error_type.startswith(NO_ROUTE_ERROR_TYPE):
        path = urllib.parse.urlsplit(error.geturl()).path
        return (
            f"the API has no route for {path} (403 {message or 'Missing Authentication Token'}, "
            "API Gateway's answer to a path it does not serve): check the URL in "
            f"{API_URL_ENV} and the customer id"
        )
    if error.code == 403:
        return f"the API refused the key (403 {message or 'Forbidden'}): check {API_KEY_ENV}"
    retry = error.headers.get("Retry-After")
    hint = f" (retry after {retry} s)" if retry else ""
    return f"{error.code}: {message or error.reason}{hint}"


def api_from_environment(state_dir: Path | None) -> ForecastApi:
    url, key = os.environ.get(API_URL_ENV), os.environ.get(API_KEY_ENV)
    if url and key:
        return ForecastApi(url, key)
    try:
        info = StackInfo.load(state_dir)
    except FileNotFoundError as error:
        raise ServingError(
            f"{error}, or export {API_URL_ENV} and {API_KEY_ENV} of a deployed stack"
        ) from None
    os.environ.update({k: v for k, v in info.environment().items() if k not in os.environ})
    if API_URL_ENV not in info.extra:
        raise ServingError("the running local stack serves no forecast API")
    return ForecastApi(info.extra[API_URL_ENV], info.extra.get(API_KEY_ENV, ""))


def forecast_frequency(forecast: dict[str, Any]) -> Frequency:
    """The frequency of the model that answered (an API from before the answer said it
    served daily models only)."""
    return Frequency.parse(forecast.get("frequency", Frequency.DAILY.value))


def forecast_summary(forecast: dict[str, Any]) -> str:
    frequency = forecast_frequency(forecast)
    summary = (
        f"[bold]customer {forecast['customer_id']}[/]: next "
        f"{frequency.periods(int(forecast['period']))} from {frequency.adjective} model "
        f"v{forecast['model_version']} (run {forecast['run_id']}), trained "
        f"{forecast['trained_at'][:16].replace('T', ' ')} on data to {forecast['data_end']}"
    )
    clipped = forecast.get("clipped_at_zero")
    if clipped:
        summary += f"\n[yellow]{clipped} values below 0 are shown as 0 (consumption)[/]"
    newer = forecast.get("newer_model")
    if newer:
        summary += f"\n[yellow]note: {shown(newer['message'])}[/]"
    return summary


def _quantile_keys(forecast: dict[str, Any]) -> list[str]:
    return [quantile_key(q) for q in forecast.get("quantiles", [])]


def forecast_table(forecast: dict[str, Any]) -> Table:
    table = Table(header_style="bold")
    # Dates and values whole (a table that cannot hold them prints as blocks: print_table).
    table.add_column("ds", no_wrap=True)
    keys = _quantile_keys(forecast)
    for column in ("yhat", "lower", "upper", *(f"q{key}" for key in keys)):
        table.add_column(column, justify="right", no_wrap=True)
    for point in forecast["forecast"]:
        quantiles = point.get("quantiles", {})
        table.add_row(
            point["ds"],
            f"{point['yhat']:,.1f}",
            _number(point.get("yhat_lower")),
            _number(point.get("yhat_upper")),
            *(_number(quantiles.get(key)) for key in keys),
        )
    return table


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def read_history(
    s3: Any, bucket: str, customer_id: str, frequency: Frequency = Frequency.DAILY
) -> Any:
    """The customer's stored history (``ds``, ``y``) as totals per period of ``frequency``
    (UTC days or hours), or None when there is none: its readings in its history shard,
    added up."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from fleetcast_common import storage

    body = storage.read_bytes_if_exists(s3, bucket, history_shard_key(customer_id))
    if body is None:
        return None
    shard = pq.read_table(pa.BufferReader(body), columns=["customer_id", "ts", "y"])
    rows = shard.filter(pc.equal(shard.column("customer_id"), customer_id))
    if not rows.num_rows:
        return None
    readings = rows.select(["ts", "y"]).to_pandas()
    periods = readings["ts"].dt.floor(frequency.pandas_alias)
    totals = readings.groupby(periods, sort=True)["y"].sum()
    return totals.rename_axis("ds").reset_index()


def plot_forecast(
    forecast: dict[str, Any],
    history: Any,
    path: Path,
    unit: str = DEFAULT_UNIT,
    family: str | None = None,
) -> Path:
    """:func:`forecast_figure` as a PNG."""
    import matplotlib.pyplot as plt

    figure = forecast_figure(forecast, history, unit, family)
    try:
        figure.savefig(path)
    finally:
        plt.close(figure)
    return path


def forecast_figure(
    forecast: dict[str, Any],
    history: Any,
    unit: str = DEFAULT_UNIT,
    family: str | None = None,
) -> Any:
    """Recent history, the forecast and its interval: consumption in ``unit`` per period
    of the model's frequency from zero (a weekend dip looks as deep as it is), the family
    that served it named. An hourly model's chart shows two to four weeks of hours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    points = pd.DataFrame(forecast["forecast"])
    # Hourly periods come with their offset (UTC), the history's times without: both UTC's.
    points["ds"] = pd.to_datetime(points["ds"], utc=True).dt.tz_localize(None)
    figure, axes = plt.subplots(figsize=(10, 5.2), dpi=110)
    frequency = forecast_frequency(forecast)
    last_data = None
    if history is not None and len(history):
        days = history_days(frequency, int(forecast["period"]))
        recent = history[history["ds"] > history["ds"].max() - pd.Timedelta(days=days)]
        last_data = recent["ds"].iloc[-1]
        axes.plot(recent["ds"], recent["y"], color="#444444", linewidth=1.2, label="history")
        # Join the forecast to the last observation so the two read as one line.
        points = pd.concat(
            [pd.DataFrame({"ds": [recent["ds"].iloc[-1]], "yhat": [recent["y"].iloc[-1]]}), points],
            ignore_index=True,
        )
    if points["yhat_lower"].notna().any():
        axes.fill_between(
            points["ds"],
            points["yhat_lower"].astype(float),
            points["yhat_upper"].astype(float),
            color="#1f77b4",
            alpha=0.2,
            linewidth=0,
            label="80 % interval",
        )
    keys = _quantile_keys(forecast)
    colours = plt.get_cmap("plasma")(
        [0.15 + 0.7 * i / max(1, len(keys) - 1) for i in range(len(keys))]
    )
    for key, colour in zip(keys, colours, strict=True):
        # The joining row (the last observation) has no quantiles: those lines start after it.
        values = points["quantiles"].map(
            lambda quantiles, key=key: quantiles.get(key) if isinstance(quantiles, dict) else None
        )
        axes.plot(
            points["ds"],
            values.astype(float),
            color=colour,
            linewidth=1,
            linestyle="--",
            label=f"q{key}",
        )
    axes.plot(points["ds"], points["yhat"], color="#1f77b4", linewidth=2, label="forecast")
    _mark_end_of_data(axes, forecast, frequency, last_data)
    served = f" by {family.replace('_', ' ')}" if family else ""
    kind = "" if frequency is Frequency.DAILY else f"{frequency.adjective} "
    axes.set_title(
        f"Customer {forecast['customer_id']}: {forecast['period']}-{frequency.unit} "
        f"forecast{served} ({kind}model v{forecast['model_version']}, trained "
        f"{forecast['trained_at'][:10]})"
    )
    axes.set_ylabel(f"{frequency.adjective} consumption ({unit})")
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    # Below the axes: the history fills the plot from top to bottom.
    axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, frameon=False)
    if frequency is not Frequency.DAILY:
        _hours_on_the_axis(axes, frequency)
    figure.autofmt_xdate()
    figure.tight_layout()
    return figure


def history_days(frequency: Frequency, period: int) -> float:
    """Days of history the chart shows before a forecast of ``period`` periods."""
    days = HISTORY_PER_FORECAST_DAY * frequency.days(period)
    if frequency is Frequency.DAILY:
        return max(MIN_HISTORY_DAYS, days)
    low, high = HOURLY_HISTORY_DAYS
    return min(max(low, days), high)


def _mark_end_of_data(
    axes: Any, forecast: dict[str, Any], frequency: Frequency, last_data: Any
) -> None:
    """A dotted line at the history's last period: a day of a daily model, an hour of an
    hourly one (the history's last, or the hour before the forecast's first)."""
    import pandas as pd

    if frequency is Frequency.DAILY:
        at, label = pd.Timestamp(forecast["data_end"]), f"last day of data ({forecast['data_end']})"
    else:
        first = pd.to_datetime(forecast["forecast"][0]["ds"], utc=True).tz_localize(None)
        at = last_data if last_data is not None else first - pd.Timedelta(frequency.pandas_alias)
        label = f"last {frequency.unit} of data ({at:%Y-%m-%d %H:%M} UTC)"
    axes.axvline(at, color="#999999", linestyle=":", linewidth=1, label=label)


def _hours_on_the_axis(axes: Any, frequency: Frequency) -> None:
    """Dates with their hours (UTC) on the axis, a minor tick every six hours."""
    import matplotlib.dates as mdates

    locator = mdates.AutoDateLocator(minticks=6, maxticks=14)
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.DateFormatter("%b %d\n%H:%M"))
    axes.xaxis.set_minor_locator(mdates.HourLocator(byhour=range(0, 24, 6)))
    axes.set_xlabel(f"time (UTC), one point per {frequency.unit}")


def show_forecast(
    api: ForecastApi,
    customer_id: str,
    period: int,
    out: Console,
    plot: Path | None = None,
    s3: Any = None,
    artifacts_bucket: str | None = None,
    as_json: bool = False,
    quantiles: tuple[float, ...] = (),
    unit: str = DEFAULT_UNIT,
) -> dict[str, Any]:
    """Fetch a forecast, print it, and with ``plot`` draw it over the stored history."""
    forecast = api.forecast(customer_id, period, quantiles)
    if as_json:
        print(json.dumps(forecast, indent=2))
    else:
        out.print(forecast_summary(forecast))
        print_table(out, forecast_table(forecast))
    if plot is not None:
        history = None
        if s3 is not None and artifacts_bucket:
            history = read_history(s3, artifacts_bucket, customer_id, forecast_frequency(forecast))
        plot_forecast(forecast, history, plot, unit, served_family(api, forecast))
        if not as_json:
            out.print(f"plot: {plot}")
    return forecast


def served_family(api: ForecastApi, forecast: dict[str, Any]) -> str | None:
    """The family of the model that served ``forecast`` (the API's model description);
    None when it cannot be told: the API does not answer, or another model is live now."""
    try:
        model = api.get(f"/customers/{quote(forecast['customer_id'], safe='')}/model")
    except ServingError:
        return None
    if model.get("model_version") != forecast["model_version"]:
        return None
    kind = model.get("model_kind")
    return str(kind) if kind else None


def cmd_forecast(args: argparse.Namespace) -> int:
    try:
        # Checked here: an id with a '/' never reaches the API's function, and API Gateway
        # answers it as a path it does not serve.
        if not is_valid_customer_id(args.customer_id):
            raise ServingError(f"{InvalidCustomerIdError(args.customer_id)} (nothing was sent)")
        if not MIN_PERIOD <= args.period <= MAX_PERIOD:
            # (the API refuses a period past the customer's own model's: the CLI cannot
            # know that model's frequency before it asks)
            raise ServingError(
                f"--period must be from {MIN_PERIOD} to {MAX_PERIOD}, in the periods of the "
                f"customer's model: {period_limits()}"
            )
        quantiles: tuple[float, ...] = ()
        if args.quantiles is not None:
            from fleetcast_common.forecasting import InvalidRequestError, parse_quantiles

            try:
                quantiles = parse_quantiles(args.quantiles)
            except InvalidRequestError as error:
                raise ServingError(f"--{error}") from None
        if args.plot is not None and not args.plot.parent.is_dir():
            # A typo in the folder is an error, not a new tree of folders where it points.
            raise ServingError(
                f"--plot {args.plot}: the folder {args.plot.parent} does not exist "
                "(nothing was asked of the API)"
            )
        api = api_from_environment(args.state_dir)
        s3, bucket = None, None
        if args.plot is not None:
            import boto3

            s3, bucket = boto3.client("s3"), os.environ.get("FLEETCAST_ARTIFACTS_BUCKET")
            if not bucket:
                err.print("[yellow]FLEETCAST_ARTIFACTS_BUCKET is not set: plotting without history")
        show_forecast(
            api,
            args.customer_id,
            args.period,
            console,
            args.plot,
            s3,
            bucket,
            args.json,
            quantiles,
            args.unit,
        )
    except ServingError as error:
        err.print(f"[red]error:[/] {shown(error)}", soft_wrap=True)
        return 2
    return 0


def add_serving_commands(commands: Any) -> None:
    """Register serving subcommands on the ``fleetcast`` parser's subparsers."""
    forecast = commands.add_parser(
        "forecast", help="a customer's forecast from the API: table, JSON or plot"
    )
    forecast.add_argument("customer_id", metavar="CUSTOMER", help="the customer's id")
    forecast.add_argument(
        "--period",
        type=int,
        default=DEFAULT_PERIOD,
        help="periods to forecast, in the customer's model's own unit: days of a daily "
        f"model, hours of an hourly one ({period_limits()}; default {DEFAULT_PERIOD})",
    )
    forecast.add_argument(
        "--quantiles",
        metavar=QUANTILES_EXAMPLE,
        help="also these quantiles of the uncertainty samples (comma-separated, in (0, 1))",
    )
    forecast.add_argument(
        "--plot", type=Path, metavar="FILE.png", help="also draw history, forecast and interval"
    )
    forecast.add_argument(
        "--unit",
        default=DEFAULT_UNIT,
        help="the readings' unit, on the plot's axis (default: %(default)s)",
    )
    forecast.add_argument("--json", action="store_true", help="print the API's JSON")
    forecast.set_defaults(run=cmd_forecast)


def demo_forecast(
    info: StackInfo, s3: Any, out: Console, customer_id: str = "0", period: int = 14
) -> Path | None:
    """The end of ``fleetcast demo``: one customer's forecast, printed and plotted."""
    plot = Path(info.state_dir) / "demo" / f"forecast-{customer_id}.png"
    plot.parent.mkdir(parents=True, exist_ok=True)  # the stack's own folder
    try:
        api = ForecastApi(info.extra[API_URL_ENV], info.extra[API_KEY_ENV])
        show_forecast(api, customer_id, period, out, plot, s3, info.artifacts_bucket)
    except (KeyError, ServingError) as error:
        out.print(f"[yellow]no forecast to show for customer {customer_id}:[/] {error}")
        return None
    return plot
