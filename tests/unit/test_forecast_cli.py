"""`fleetcast forecast` refuses an id the allow-list refuses before it asks the API: an id
with a '/' would reach API Gateway as a path it does not serve, whose 403 the CLI used to
blame on the key (issue 25 item 8)."""

from __future__ import annotations

import pytest
from pytest_socket import SocketBlockedError

from fleetcast.cli import main

BAD_IDS = ["../x", "a/b", "..", "x y", "é", "a" * 65, "a\nb"]


@pytest.mark.parametrize("customer_id", BAD_IDS, ids=repr)
def test_an_id_outside_the_allow_list_is_refused_as_an_id_not_a_key(
    customer_id: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an API to ask (sockets are off: asking it would fail differently)
    monkeypatch.setenv("FLEETCAST_API_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FLEETCAST_API_KEY", "some-key")
    monkeypatch.setenv("COLUMNS", "400")
    # When the CLI is asked for that id's forecast
    assert main(["forecast", customer_id]) == 2
    # Then it says the id is not valid, and what a valid one is, without a word on the key
    complaint = " ".join(capsys.readouterr().err.split())
    assert "invalid customer id" in complaint and "(nothing was sent)" in complaint
    assert "1 to 64 characters of letters, digits, '_' or '-'" in complaint
    assert "key" not in complaint


def test_a_valid_id_is_asked_of_the_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLEETCAST_API_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("FLEETCAST_API_KEY", "some-key")
    # Then a valid id gets as far as the socket the refused ones never reach
    with pytest.raises(SocketBlockedError):
        main(["forecast", "meter_1-A"])
