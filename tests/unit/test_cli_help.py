"""`fleetcast --help` and every command's: each option explained, in plain words (no
Sphinx markup), and answered without importing what only running a command needs
(issue 40: `fleetcast --help` took 4-5 s importing boto3, moto, pyarrow and the stack)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import pytest

from fleetcast.cli import build_parser

# Modules no --help may import: each costs a large share of a second or more, and only
# running a command needs them. A budget of modules, not of seconds: a clock would make
# the test as flaky as the machine is busy.
FORBIDDEN = (
    "boto3",
    "botocore",
    "moto",
    "numpy",
    "pandas",
    "pyarrow",
    "matplotlib",
    "prophet",
    "cmdstanpy",
    "statsforecast",
    "scipy",
    "tomlkit",
    "yaml",
    "pydantic",  # a third of a second with the contracts' models
    "fleetcast.embedded.stack",
)
MARKUP = (":func:", ":mod:", ":data:", ":class:", ":meth:", ":attr:", "``")


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (subparsers,) = (
        action for action in parser._actions if isinstance(action, argparse._SubParsersAction)
    )
    return dict(subparsers.choices)


def test_every_command_is_walked() -> None:
    assert {"up", "status", "rejected", "generate", "demo", "cost-report", "images"} <= set(
        _commands()
    )


@pytest.mark.parametrize("name", ["", *sorted(_commands())])
def test_every_option_of_every_command_has_help(name: str) -> None:
    # Given the command's parser ("": fleetcast's own, whose options every command takes)
    parser = _commands()[name] if name else build_parser()
    # When its options are listed (hidden ones, help=SUPPRESS, are not shown at all; the
    # commands themselves each have a line of their own, checked as they are walked)
    unexplained = [
        action.option_strings or [action.dest]
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help != argparse.SUPPRESS
        and not (action.help or "").strip()
    ]
    # Then every one says what it does
    assert not unexplained, f"fleetcast {name}: options without help: {unexplained}"


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_has_a_line_in_fleetcasts_help(name: str) -> None:
    (subparsers,) = (
        action
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    (line,) = [choice for choice in subparsers._choices_actions if choice.dest == name]
    assert (line.help or "").strip(), f"fleetcast {name} has no line in `fleetcast --help`"


@pytest.mark.parametrize("name", ["", *sorted(_commands())])
def test_no_help_shows_developer_markup(name: str) -> None:
    parser = _commands()[name] if name else build_parser()
    text = parser.format_help()
    assert not [mark for mark in MARKUP if mark in text], text


def test_help_imports_none_of_the_heavy_modules() -> None:
    # Given a fresh interpreter that asks for `fleetcast --help` and each command's --help
    script = f"""
import contextlib, io, json, sys
from fleetcast.cli import build_parser, main
names = sorted(build_parser()._subparsers._group_actions[0].choices)
for argv in [["--help"], *([name, "--help"] for name in names)]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            main(argv)
        except SystemExit as exit:
            assert exit.code == 0, (argv, exit.code)
print(json.dumps({{"commands": names, "loaded": [m for m in {FORBIDDEN!r} if m in sys.modules]}}))
"""
    # When it has printed them all
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    answer = json.loads(result.stdout)
    # Then none of the heavy modules was imported
    assert len(answer["commands"]) == len(_commands())
    assert answer["loaded"] == []


def test_python_m_fleetcast_help_answers_with_the_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "fleetcast", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "rejected" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()}
    assert not imported & set(FORBIDDEN), sorted(imported & set(FORBIDDEN))


def test_a_forecast_through_the_cli_imports_none_of_them_either() -> None:
    # Given a forecast API (a canned answer, in the child process: sockets are off here)
    script = f"""
import contextlib, io, json, sys, threading
from http.server import BaseHTTPRequestHandler, HTTPServer

ANSWER = {{"customer_id": "7", "model_version": 1, "run_id": "q0000000001-20240101t000000",
    "trained_at": "2024-01-01T00:00:00Z", "data_end": "2023-12-31", "period": 1,
    "forecast": [{{"ds": "2024-01-01", "yhat": 1.0, "yhat_lower": 0.5, "yhat_upper": 1.5}}]}}

class Api(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Api)
threading.Thread(target=server.serve_forever, daemon=True).start()
import os
os.environ["FLEETCAST_API_URL"] = f"http://127.0.0.1:{{server.server_port}}/v1"
os.environ["FLEETCAST_API_KEY"] = "some-key"
from fleetcast.cli import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    code = main(["forecast", "7", "--period", "1"])
print(json.dumps({{"code": code, "out": out.getvalue(),
    "loaded": [m for m in {FORBIDDEN!r} if m in sys.modules]}}))
"""
    # When `fleetcast forecast 7` runs against it
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    answer = json.loads(result.stdout.splitlines()[-1])
    # Then it printed the forecast having imported only what an HTTP call needs
    assert answer["code"] == 0 and "2024-01-01" in answer["out"], answer
    assert answer["loaded"] == []
