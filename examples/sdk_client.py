"""A data scientist's view of the forecast endpoint: one customer's forecast through the
SageMaker Python SDK 3.x (``sagemaker.core``), straight from the multi-model endpoint.

The SDK is large and pins versions of its own, so it has its own virtual environment::

    make install                                  # creates .venv-sdk from requirements/sdk.lock.txt
    eval "$(.venv/bin/fleetcast env)"             # the local stack; on AWS, your usual credentials
    .venv-sdk/bin/python examples/sdk_client.py q0000000042-20261129t120000/42.tar.gz --period 14

The TargetModel is a customer's live model archive under the endpoint's model prefix,
``<run>/<customer>.tar.gz`` (``<customer>/<run>.tar.gz`` for models registered before
registration became copy-free): ``fleetcast forecast`` and ``GET /customers/{id}/model``
(``target_model``) show it. The standard variables decide where the calls go:
``AWS_ENDPOINT_URL`` (set by ``fleetcast env``) for the local stack, nothing for AWS.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from sagemaker.core.resources import Endpoint

DEFAULT_ENDPOINT = "fleetcast-forecast"


def forecast(endpoint_name: str, target_model: str, period: int) -> dict[str, object]:
    """Invoke the endpoint for one model; the container answers JSON."""
    endpoint = Endpoint.get(endpoint_name=endpoint_name)
    if endpoint.endpoint_status != "InService":
        raise SystemExit(f"endpoint {endpoint_name} is {endpoint.endpoint_status}, not InService")
    answer = endpoint.invoke(
        body=json.dumps({"period": period}),
        content_type="application/json",
        accept="application/json",
        target_model=target_model,
    )
    body = answer.body
    raw = body.read() if hasattr(body, "read") else body
    document: dict[str, object] = json.loads(raw)
    return document


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target_model", help="<run>/<customer>.tar.gz")
    parser.add_argument(
        "--period",
        type=int,
        default=7,
        help="periods of the model to forecast: days of a daily model (1 to 365), hours of an hourly one (1 to 720)",
    )
    parser.add_argument(
        "--endpoint",
        default=os.environ.get("FLEETCAST_ENDPOINT_NAME", DEFAULT_ENDPOINT),
        help="endpoint name (default: $FLEETCAST_ENDPOINT_NAME, else fleetcast-forecast)",
    )
    parser.add_argument("--json", action="store_true", help="print the whole answer as JSON")
    args = parser.parse_args(argv)

    document = forecast(args.endpoint, args.target_model, args.period)
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    print(f"customer {document['customer_id']}, model run {document['model_version']}")
    print(f"{'ds':<12}{'yhat':>12}{'lower':>12}{'upper':>12}")
    points: list[dict[str, float | str | None]] = document["forecast"]  # type: ignore[assignment]
    for point in points:
        values = (_number(point[k]) for k in ("yhat", "yhat_lower", "yhat_upper"))
        print(f"{point['ds']!s:<12}" + "".join(f"{v:>12}" for v in values))
    return 0


def _number(value: object) -> str:
    return "-" if value is None else f"{float(value):.1f}"  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
