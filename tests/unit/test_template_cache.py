"""template.yaml is decoded by cfn-lint once per text (and cfn-lint version), then read
back from the cache folder (fleetcast.embedded.template.load_template)."""

from __future__ import annotations

from pathlib import Path

import pytest
from template_helpers import REPO_ROOT

from fleetcast.embedded import template


def test_a_template_is_decoded_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the project's template and an empty cache folder
    source, cache = tmp_path / "template.yaml", tmp_path / "cache"
    source.write_text((REPO_ROOT / "template.yaml").read_text())
    expected = template.loads_template(source.read_text())
    # When it is loaded twice, cfn-lint unavailable the second time
    first = template.load_template(source, cache)
    assert len(list(cache.glob("template-*.json"))) == 1

    def no_decoder(text: str, source: str = "") -> dict[str, object]:
        raise AssertionError("decoded again")

    monkeypatch.setattr(template, "loads_template", no_decoder)
    second = template.load_template(source, cache)
    # Then both are cfn-lint's reading of it
    assert first == second == expected


def test_a_changed_or_damaged_template_is_decoded_again(tmp_path: Path) -> None:
    source, cache = tmp_path / "template.yaml", tmp_path / "cache"
    source.write_text("Resources:\n  Bucket:\n    Type: AWS::S3::Bucket\n")
    assert template.load_template(source, cache) == {
        "Resources": {"Bucket": {"Type": "AWS::S3::Bucket"}}
    }
    # A changed text: its own entry, read by cfn-lint (the short tag in its long form)
    source.write_text("Resources:\n  Bucket:\n    Type: !Ref Kind\n")
    assert template.load_template(source, cache) == {
        "Resources": {"Bucket": {"Type": {"Ref": "Kind"}}}
    }
    # A damaged entry: read again and replaced
    for kept in cache.glob("template-*.json"):
        kept.write_text("{not json")
    assert template.load_template(source, cache) == {
        "Resources": {"Bucket": {"Type": {"Ref": "Kind"}}}
    }
    assert not list(cache.glob(".template-*"))
