"""Unit tests run with sockets disabled: anything that reaches for the network fails."""

from collections.abc import Iterator

# Powertools' Tracer imports the X-Ray SDK, whose recorder opens a UDP socket (sending
# nothing) when it is first imported: imported here, before sockets are disabled, so a
# test that is the first to load a function's handler does not fail for it.
import aws_xray_sdk.core  # noqa: F401  (imported for that side effect)
import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_sockets() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    # Servers that other test directories keep for the whole session (a moto server,
    # the local stack) must go on accepting connections between unit tests.
    enable_socket()
