"""Request bodies and query strings: what is accepted, and what a refusal says; and the
forecast's dates as an answer writes them."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pytest

from fleetcast_forecasters.forecast import Forecast
from fleetcast_inference.errors import BadRequestError
from fleetcast_inference.protocol import (
    InvokeRequest,
    decode_page_token,
    encode_page_token,
    parse_invoke_body,
    parse_list_query,
    parse_load_body,
    render_forecast,
)
from fleetcast_inference.registry import ServedModel


@pytest.mark.parametrize(
    "body",
    [
        b'{"period": 7}',
        b'  {"period":7}\n',
        # The public AWS sample serialises its JSON string a second time.
        json.dumps('{"period": 7}').encode(),
    ],
)
def test_invoke_body_gives_the_period(body: bytes) -> None:
    # When a well-formed body is parsed, then the period is 7
    assert parse_invoke_body(body) == InvokeRequest(period=7)


@pytest.mark.parametrize("period", [1, 365, 720])
def test_invoke_body_accepts_the_range_ends(period: int) -> None:
    assert parse_invoke_body(json.dumps({"period": period}).encode()) == InvokeRequest(
        period=period
    )


@pytest.mark.parametrize(
    ("quantiles", "expected"),
    [
        ([0.1, 0.5, 0.9], (0.1, 0.5, 0.9)),
        ([0.9, 0.1, 0.5, 0.1], (0.1, 0.5, 0.9)),
        ([0.10, 0.1], (0.1,)),
        ([0.001, 0.999], (0.001, 0.999)),
        (
            [round(0.05 * i, 2) for i in range(1, 20)] + [0.05],
            tuple(round(0.05 * i, 2) for i in range(1, 20)),
        ),
    ],
)
def test_invoke_body_quantiles_come_sorted_without_repeats(
    quantiles: list[float], expected: tuple[float, ...]
) -> None:
    body = json.dumps({"period": 7, "quantiles": quantiles}).encode()
    assert parse_invoke_body(body) == InvokeRequest(period=7, quantiles=expected)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "the body is empty"),
        (b"period=7", "not JSON"),
        (b"\xff\xfe{", "not JSON"),
        (json.dumps("period: 7").encode(), "JSON string that does not hold JSON"),
        (b"[7]", "must be a JSON object"),
        (b"7", "must be a JSON object"),
        (b"{}", "lacks 'period'"),
        (b'{"period": "7"}', "must be an integer, not a string"),
        (b'{"period": 7.0}', "must be an integer, not the number 7.0"),
        (b'{"period": 7.5}', "must be an integer"),
        (b'{"period": true}', "must be an integer, not a boolean"),
        (b'{"period": null}', "must be an integer, not null"),
        (
            b'{"period": 0}',
            r"from 1 to 720 \(365 days for a daily model, 720 hours for an hourly model\), not 0",
        ),
        (
            b'{"period": 721}',
            r"720 hours for an hourly model\), not 721",
        ),
        (b'{"period": -3}', "from 1 to 720"),
        (b'{"period": 7, "horizon": 7}', "unknown field 'horizon'"),
        (
            b'{"period": 7, "quantiles": []}',
            "non-empty array of numbers between 0 and 1, not an em",
        ),
        (b'{"period": 7, "quantiles": "0.1,0.9"}', "non-empty array .* not a string"),
        (b'{"period": 7, "quantiles": 0.5}', "non-empty array .* not the number 0.5"),
        (
            b'{"period": 7, "quantiles": [0.1, "0.9"]}',
            r"'quantiles'\[1\] must be a number, not a string",
        ),
        (
            b'{"period": 7, "quantiles": [true]}',
            r"'quantiles'\[0\] must be a number, not a boolean",
        ),
        (
            b'{"period": 7, "quantiles": [0.5, 0]}',
            r"'quantiles'\[1\] must be between 0 and 1 .*not 0$",
        ),
        (b'{"period": 7, "quantiles": [1]}', r"between 0 and 1 \(exclusive\), not 1$"),
        (b'{"period": 7, "quantiles": [-0.5]}', "between 0 and 1"),
        (b'{"period": 7, "quantiles": [1e400]}', "between 0 and 1"),
        (
            json.dumps({"period": 7, "quantiles": [i / 100 for i in range(1, 22)]}).encode(),
            "'quantiles': at most 20 different quantiles, not 21",
        ),
        (b'{"period": 7, "b": 1, "a": 2}', "unknown fields 'a', 'b'"),
        (b'{"period": 0, "quantiles": [0.5]}', r"from 1 to 720 \(365 days"),
    ],
)
def test_invoke_body_refusals_say_what_is_wrong(body: bytes, message: str) -> None:
    # When a bad body is parsed, then it is refused with a message naming the problem
    with pytest.raises(BadRequestError, match=message):
        parse_invoke_body(body)


def test_load_body_gives_name_and_url_and_ignores_extra_fields() -> None:
    body = b'{"model_name": "m1", "url": "/opt/ml/models/m1/model", "extra": 1}'
    load = parse_load_body(body)
    assert (load.model_name, load.url) == ("m1", "/opt/ml/models/m1/model")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty"),
        (b"{", "not JSON"),
        (b'["m1"]', "JSON object"),
        (b'{"url": "/opt/ml/models/m1/model"}', "'model_name' must be a non-empty string"),
        (b'{"model_name": "", "url": "/x"}', "'model_name' must be a non-empty string"),
        (b'{"model_name": "a\\nb", "url": "/x"}', "printable"),
        (b'{"model_name": "m1"}', "'url' must be a non-empty string"),
        (b'{"model_name": "m1", "url": 3}', "'url' must be a non-empty string"),
    ],
)
def test_load_body_refusals_say_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        parse_load_body(body)


def test_list_query_defaults_and_token_round_trip() -> None:
    # Given a token for a name with characters that need escaping in a URL
    token = encode_page_token("customer/42 é")

    # When queries with and without parameters are parsed
    default = parse_list_query("")
    paged = parse_list_query(f"limit=5&next_page_token={token}")

    # Then the defaults apply, and the token gives back the name
    assert (default.after, default.limit) == (None, 100)
    assert (paged.after, paged.limit) == ("customer/42 é", 5)
    assert decode_page_token(token) == "customer/42 é"


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("limit=0", "limit must be a whole number from 1 to 1000"),
        ("limit=1001", "limit must be"),
        ("limit=ten", "limit must be"),
        ("limit=", "limit must be"),
        ("next_page_token=%FF%FF", "not a token this container gave out"),
    ],
)
def test_list_query_refusals(query: str, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        parse_list_query(query)


@dataclass(frozen=True)
class DatesOnly:
    """Of a forecaster, what rendering its forecast asks."""

    daily_dates: bool


@pytest.mark.parametrize(
    ("daily", "dates", "written"),
    [
        (True, ["2024-09-01", "2024-09-02"], ["2024-09-01", "2024-09-02"]),
        (
            False,
            ["2024-09-01T13:00", "2024-09-01T14:00"],
            ["2024-09-01T13:00:00Z", "2024-09-01T14:00:00Z"],
        ),
    ],
    ids=["daily", "hourly"],
)
def test_a_forecasts_periods_are_dates_or_utc_times_with_their_offset(
    daily: bool, dates: list[str], written: list[str]
) -> None:
    # Given a model's forecast of two days, or two hours (a history's times are UTC's)
    model = ServedModel(
        name="42.tar.gz",
        url="s3://artifacts/42.tar.gz",
        customer_id="42",
        model_version="q0000000909-20261129t120000",
        model_kind="ets",
        frequency="D" if daily else "h",
        data_start="2024-06-01",
        data_end="2024-08-31",
        forecaster=DatesOnly(daily),  # type: ignore[arg-type]
    )
    forecast = Forecast(
        dates=np.array(dates, dtype="datetime64[ns]"),
        yhat=np.array([1.0, 2.0]),
        yhat_lower=None,
        yhat_upper=None,
    )
    # When the container writes its answer; then each period is a plain date (RFC 3339's
    # full-date) or a time in UTC with its offset: what the API document says of ds
    answer = json.loads(render_forecast(model, forecast))
    assert [point["ds"] for point in answer["forecast"]] == written
