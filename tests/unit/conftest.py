"""Unit tests run with sockets disabled: anything that reaches for the network fails."""

from collections.abc import Iterator

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_sockets() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    # Servers that other test directories keep for the whole session (a moto server,
    # the local stack) must go on accepting connections between unit tests.
    enable_socket()
