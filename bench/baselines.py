"""The public AWS sample's way of doing each step, written here to compare against.

The sample (aws-samples/scaling-training-and-serving-thousands-of-models-with-amazon-sagemaker,
see /work/shared/REFERENCE.md) splits the upload with a pandas group-by into one CSV per
customer, trains with a sequential loop over the customer files, and serves each request
by calling ``Prophet.predict`` on a model deserialised with ``model_from_json``. Each
function below does that, with the changes needed to produce the same output as
fleetcast on the same input, so that the comparison is of the same work:

- the split also totals readings per customer and UTC day (the sample's data is already
  daily; the 10x file has ten readings a day) and writes ``ds,y`` with a header;
- the loop fits exactly what fleetcast's training fits, with identical Prophet settings;
- the handler is the sample's, behind the same HTTP server as fleetcast's container.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from prophet import Prophet
from prophet.serialize import model_from_json, model_to_json

from fleetcast_inference.app import InferenceApp, Request, Response
from fleetcast_inference.artifact import read_model_artifact
from fleetcast_inference.settings import InferenceSettings, model_path

# --- Processing ---------------------------------------------------------------------


def pandas_split(upload: Path, folder: Path) -> int:
    """Read the whole upload, group by customer, write ``{customer_id}.csv`` per customer.

    Returns the number of customers written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    readings = pd.read_csv(upload, dtype={"customer_id": str, "timestamp": str})
    day = pd.to_datetime(readings["timestamp"], format="ISO8601", utc=True)
    readings["ds"] = day.dt.tz_localize(None).dt.floor("D")
    daily = readings.groupby(["customer_id", "ds"])["consumption"].sum().rename("y")
    customers = 0
    for customer_id, history in daily.groupby(level="customer_id"):
        history.droplevel("customer_id").to_csv(
            folder / f"{customer_id}.csv", date_format="%Y-%m-%d"
        )
        customers += 1
    return customers


# --- Training -----------------------------------------------------------------------


def new_prophet(uncertainty_samples: int = 1000) -> Prophet:
    """fleetcast's default hyperparameters as its training resolves them for a daily
    history of a year or more: additive, yearly (order 10) and weekly (order 3) terms on,
    daily off."""
    return Prophet(
        seasonality_mode="additive",
        yearly_seasonality=True,
        weekly_seasonality=True,
        daily_seasonality=False,
        uncertainty_samples=uncertainty_samples,
    )


HOLDOUT_DAYS = 7


@dataclass(frozen=True)
class SequentialCustomer:
    customer_id: str
    seconds: float
    holdout_mae: float
    archive: Path


def sequential_training(customer_files: list[Path], folder: Path) -> list[SequentialCustomer]:
    """One customer after another: fit on all but the last week and score that week, refit
    on the whole history, write ``{customer_id}.tar.gz`` holding ``model.json``.

    This is the sample's loop doing fleetcast's work (a scored fit and a full-history
    refit, where the sample fits once): row 2 compares the same work.
    """
    folder.mkdir(parents=True, exist_ok=True)
    customers = []
    for path in customer_files:
        started = time.perf_counter()
        history = pd.read_csv(path, parse_dates=["ds"])
        fitted, holdout = history.iloc[:-HOLDOUT_DAYS], history.iloc[-HOLDOUT_DAYS:]
        # The scored model is not kept: predicting its point forecast needs no samples.
        scored = new_prophet(uncertainty_samples=0).fit(fitted)
        forecast = scored.predict(holdout[["ds"]])["yhat"].to_numpy()
        holdout_mae = float(np.abs(holdout["y"].to_numpy() - forecast).mean())
        served = new_prophet().fit(history)
        archive = folder / f"{path.stem}.tar.gz"
        _write_model_archive(archive, model_to_json(served))
        customers.append(
            SequentialCustomer(path.stem, time.perf_counter() - started, holdout_mae, archive)
        )
    return customers


def _write_model_archive(path: Path, model_json: str) -> None:
    payload = model_json.encode()
    with tarfile.open(path, "w:gz") as archive:
        member = tarfile.TarInfo("model.json")
        member.size = len(payload)
        archive.addfile(member, io.BytesIO(payload))


def read_sample_model(path: Path) -> str:
    with tarfile.open(path, "r:gz") as archive:
        extracted = archive.extractfile("model.json")
        assert extracted is not None
        return extracted.read().decode()


# --- Serving ------------------------------------------------------------------------


class SampleHandlerApp(InferenceApp):
    """The sample's inference handler behind fleetcast's HTTP server and routes.

    Load: ``model_from_json`` of the artifact's model.json. Invoke: decode the sample's
    double-encoded body, ``make_future_dataframe(periods=n)`` (history included, as the
    sample does), ``predict`` with Prophet's default 1000 uncertainty samples, keep the
    last n rows, ``to_json`` and encode that again.
    """

    def __init__(self, settings: InferenceSettings) -> None:
        super().__init__(settings)
        self.models: dict[str, Prophet] = {}

    def dispatch(self, request: Request) -> Response:
        if request.path == "/models" and request.method == "POST":
            load = json.loads(request.body)
            path = model_path(load["url"], self.settings)
            assert path is not None
            self.models[load["model_name"]] = load_sample_model(path)
            return Response(200, b'{"status": "loaded"}')
        name = request.path.removeprefix("/models/").removesuffix("/invoke")
        return Response(200, sample_predict(self.models[name], request.body))


def load_sample_model(path: Path) -> Prophet:
    """The sample's ``model_fn``."""
    model_json, _ = read_model_artifact(path)
    return model_from_json(model_json)


def sample_predict(model: Prophet, body: bytes) -> bytes:
    """The sample's ``input_fn``, ``predict_fn`` and ``output_fn``."""
    document = json.loads(body)
    period = int((json.loads(document) if isinstance(document, str) else document)["period"])
    future = model.make_future_dataframe(periods=period)
    forecast = model.predict(future)[-period:]
    return json.dumps(forecast.to_json()).encode()


def sample_request_body(period: int) -> bytes:
    """The body the sample's notebook sends: a JSON string holding the JSON object."""
    return json.dumps(json.dumps({"period": period})).encode()
