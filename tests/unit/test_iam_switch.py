"""IAM is enforced on every local stack unless `fleetcast up --no-iam` says otherwise."""

import inspect

from fleetcast.cli import build_parser
from fleetcast.embedded.stack import EmbeddedStack


def test_only_no_iam_turns_enforcement_off() -> None:
    assert inspect.signature(EmbeddedStack).parameters["iam"].default is True
    assert build_parser().parse_args(["up"]).no_iam is False
    assert build_parser().parse_args(["up", "--no-iam"]).no_iam is True
