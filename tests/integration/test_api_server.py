"""The local API Gateway's HTTP side alone, on 127.0.0.1: what reaches the routes and what
is refused in API Gateway's JSON (end to end, with the stack: tests/e2e/test_api_hardening.py)."""

from __future__ import annotations

import http.client
import json
import socket
from collections.abc import Iterator

import pytest

from fleetcast.embedded.api.server import (
    MAX_HEAD_BYTES,
    ApiServer,
    GatewayAnswer,
    handler_for,
)
from fleetcast.embedded.gateway import ServingThread

pytestmark = pytest.mark.integration

Request = tuple[str, str, list[tuple[str, str]], bytes, str]


@pytest.fixture
def served() -> Iterator[tuple[int, list[Request]]]:
    """A server whose route records each request and answers 200 with a JSON body."""
    requests: list[Request] = []

    def route(
        method: str, target: str, headers: list[tuple[str, str]], body: bytes, source_ip: str
    ) -> GatewayAnswer:
        requests.append((method, target, headers, body, source_ip))
        return GatewayAnswer(200, [("Content-Type", "application/json")], b'{"routed": true}')

    server = ApiServer(("127.0.0.1", 0), handler_for(route))
    serving = ServingThread(server, "api-server-test")
    serving.start()
    yield server.server_address[1], requests
    serving.stop()


def send(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw)
        response = http.client.HTTPResponse(sock, method=raw.split(b" ", 1)[0].decode())
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def head(headers: list[tuple[str, str]], line: str = "GET /prod/x HTTP/1.1") -> bytes:
    return (line + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in headers) + "\r\n").encode()


def test_a_request_within_the_limits_reaches_the_route_whole(
    served: tuple[int, list[Request]],
) -> None:
    port, requests = served
    # Given 150 short headers (over http.server's 100 lines) and a body
    headers = [(f"x-probe-{i}", "1") for i in range(150)] + [("Content-Length", "4")]
    # When the request is sent
    status, answer_headers, body = send(port, head(headers, "POST /prod/x?a=1 HTTP/1.1") + b"ping")
    # Then the route has it as sent, and its answer is the client's
    assert (status, json.loads(body)) == (200, {"routed": True})
    assert answer_headers["Content-Length"] == str(len(body))
    ((method, target, got_headers, got_body, source_ip),) = requests
    assert (method, target, got_body, source_ip) == ("POST", "/prod/x?a=1", b"ping", "127.0.0.1")
    assert got_headers[:150] == headers[:150]


def test_any_method_reaches_the_route_and_a_head_answer_has_no_body(
    served: tuple[int, list[Request]],
) -> None:
    port, requests = served
    assert send(port, head([], "BREW /prod/x HTTP/1.1"))[0] == 200
    status, headers, body = send(port, head([], "HEAD /prod/x HTTP/1.1"))
    assert (status, body, headers["Content-Length"]) == (200, b"", "16")
    assert [request[0] for request in requests] == ["BREW", "HEAD"]


def test_a_head_of_exactly_the_limit_is_served_and_one_byte_more_refused(
    served: tuple[int, list[Request]],
) -> None:
    port, requests = served
    # Given heads of exactly 10,240 bytes and one byte over (the ending blank line uncounted)
    base = len(head([("x-pad", "")])) - 2
    at_limit = head([("x-pad", "a" * (MAX_HEAD_BYTES - base))])
    over = head([("x-pad", "a" * (MAX_HEAD_BYTES - base + 1))])
    # When each is sent; then the first is routed, the second refused as API Gateway does
    assert send(port, at_limit)[0] == 200
    status, headers, body = send(port, over)
    assert (status, json.loads(body)) == (413, {"message": "Request Too Long"})
    assert headers["x-amzn-ErrorType"] == "RequestTooLongException"
    assert headers["Connection"] == "close"
    assert len(requests) == 1


@pytest.mark.parametrize(
    ("raw", "wanted"),
    [
        (head([("x-big", "a" * 60_000)]), (413, "Request Too Long")),
        (("GET /prod/" + "a" * 70_000 + " HTTP/1.1\r\n\r\n").encode(), (413, "Request Too Long")),
        (("GET /prod/" + "a" * 12_000 + " HTTP/1.1\r\n\r\n").encode(), (413, "Request Too Long")),
        (b"GET /prod/x HTTP/x\r\n\r\n", (400, None)),
        (b"GET /prod/x HTTP/3.0\r\n\r\n", (505, None)),
        (head([("Content-Length", "ten")]), (400, "Bad Request")),
        (head([("Content-Length", str(11 * 1024 * 1024))]), (413, "Request Too Long")),
    ],
    ids=["60 KB header", "70 KB line", "12 KB line", "no version", "HTTP/3", "length", "body"],
)
def test_every_refusal_is_api_gateways_json_and_never_reaches_the_route(
    served: tuple[int, list[Request]], raw: bytes, wanted: tuple[int, str | None]
) -> None:
    port, requests = served
    status, headers, body = send(port, raw)
    document = json.loads(body)
    assert status == wanted[0]
    assert headers["Content-Type"] == "application/json"
    assert headers["x-amzn-ErrorType"].endswith("Exception")
    assert set(document) == {"message"} and document["message"] == (
        wanted[1] or document["message"]
    )
    assert requests == []
