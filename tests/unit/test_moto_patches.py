"""The local stack's patches of moto are written for one moto version: an upgrade of moto
cannot land without their audit (fleetcast.embedded.moto_patches)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from fleetcast.embedded import moto_patches

ROOT = Path(__file__).resolve().parents[2]


def test_the_moto_installed_and_pinned_is_the_one_the_patches_were_written_for() -> None:
    # Given the version the patches name, the lock file's pin and pyproject's
    pinned = re.search(r"^moto==(\S+)$", (ROOT / "requirements/lock.txt").read_text(), re.M)
    declared = re.search(r'"moto\[server\]==([^"]+)"', (ROOT / "pyproject.toml").read_text())

    # Then all three agree, and the installed moto is it
    assert pinned is not None and declared is not None
    assert pinned.group(1) == declared.group(1) == moto_patches.MOTO_VERSION
    assert moto_patches.check_moto_version() is None


def test_another_moto_is_named_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a moto other than the one the patches were read against
    monkeypatch.setattr(moto_patches.importlib.metadata, "version", lambda _: "6.0.0")

    # Then the check says which, and that the patches want an audit
    message = moto_patches.check_moto_version()
    assert message is not None
    assert "moto 6.0.0 is installed" in message
    assert f"written for moto {moto_patches.MOTO_VERSION}" in message
    assert "audit" in message


def test_every_change_to_moto_is_in_the_patches_package() -> None:
    # Given the local stack's sources outside moto_patches
    embedded = ROOT / "src/fleetcast/embedded"
    outside = [p for p in embedded.rglob("*.py") if "moto_patches" not in p.parts]

    # Then none assigns to an attribute of a moto class or module
    assignment = re.compile(
        r"^\s*(setattr\((Table|DynamoDBBackend|sagemaker_models|moto_s3_models)"
        r"|(Table|DynamoDBBackend|moto_s3_models|sagemaker_models)\.\w+\s*=)",
        re.M,
    )
    offenders = [str(p.relative_to(ROOT)) for p in outside if assignment.search(p.read_text())]
    assert offenders == []
