"""Unit tests run with sockets disabled: anything that reaches for the network fails."""

import pytest
from pytest_socket import disable_socket


@pytest.fixture(autouse=True)
def _no_sockets() -> None:
    disable_socket(allow_unix_socket=True)
