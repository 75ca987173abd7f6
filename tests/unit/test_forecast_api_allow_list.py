"""The forecast API lets no customer id past the allow-list (``fleetcast_contracts.ids``):
properties over any text, with sockets off, so a request that reached for the registry or
the endpoint would fail the test. (Keys, TargetModels and file names built from ids:
test_customer_id_allow_list.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from forecast_api_helpers import api_event, call, load_forecast_api
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetcast_common.forecasting import InvalidRequestError, live_model
from fleetcast_contracts.ids import is_valid_customer_id

pytestmark = pytest.mark.filterwarnings("ignore:No application metrics to publish")

# Any text, and text that is nearly an id: the allow-list's edges. Only the disallowed.
DISALLOWED = st.one_of(
    st.text(max_size=80),
    st.from_regex(r"[A-Za-z0-9_-]{0,70}\n?", fullmatch=True),
    st.sampled_from(["..", ".", "a/b", "../x", "a\x00", "42\n", "-1", "_1", "a" * 65]),
).filter(lambda customer_id: not is_valid_customer_id(customer_id))


class Unreachable:
    """A registry that must not be asked."""

    def live(self, customer_id: str) -> Any:
        raise AssertionError(f"the registry was asked for {customer_id!r}")


@given(customer_id=DISALLOWED)
def test_the_domain_refuses_a_disallowed_id_before_the_registry(customer_id: str) -> None:
    with pytest.raises(InvalidRequestError, match="invalid customer id"):
        live_model(customer_id, Unreachable())


@pytest.fixture(scope="module")
def api() -> Any:
    return load_forecast_api("fleetcast_forecast_api_allow_list")


@settings(max_examples=200, deadline=None)
@given(
    customer_id=DISALLOWED,
    sample_name=st.sampled_from(["api_forecast.json", "api_model.json"]),
)
def test_the_handler_answers_400_to_a_disallowed_id_without_reaching_aws(
    api: Any, customer_id: str, sample_name: str
) -> None:
    # Given an event API Gateway would send for that path segment (sockets are off)
    event = api_event(sample_name, customer_id=customer_id, query={})
    # When the handler gets it; then 400 naming the id, as a JSON error
    status, _, body = call(api, event)
    assert (status, body["error"]) == (400, "InvalidRequest")
    assert "invalid customer id" in body["message"]
