"""Every event a function takes is parsed by Powertools' parser into a typed model (issue
28, item 4): start-processing's two kinds are told apart by detail-type, and a malformed
event of either is refused naming its field, not a KeyError inside the handler."""

from __future__ import annotations

import ast
import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import parse
from pydantic import ValidationError
from template_helpers import REPO_ROOT

from fleetcast_common.sagemaker_events import (
    ObjectCreated,
    ProcessingJobEnded,
    StartProcessingEvent,
)

EVENTS = REPO_ROOT / "events"


def _event(name: str) -> dict[str, Any]:
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def test_an_upload_and_a_job_end_are_each_parsed_as_their_own_kind() -> None:
    created = parse(event=_event("s3_object_created_plus_key.json"), model=StartProcessingEvent)
    ended = parse(event=_event("processing_job_completed.json"), model=StartProcessingEvent)
    assert isinstance(created, ObjectCreated)
    assert "+" in created.detail.object.key  # kept as stored, not unquoted
    assert isinstance(ended, ProcessingJobEnded)
    assert ended.detail.status == "Completed"
    assert ended.detail.job_name.startswith("fleetcast")


def test_a_malformed_event_is_refused_naming_its_field() -> None:
    ended = _event("processing_job_completed.json")
    del ended["detail"]["ProcessingJobName"]
    with pytest.raises(ValidationError, match="ProcessingJobName"):
        parse(event=ended, model=StartProcessingEvent)
    other = {**_event("s3_object_created.json"), "detail-type": "Object Deleted"}
    with pytest.raises(ValidationError, match="detail-type"):
        parse(event=other, model=StartProcessingEvent)


def test_no_handler_reads_its_event_as_a_raw_dict_or_a_data_class() -> None:
    for app in sorted((REPO_ROOT / "functions").glob("*/app.py")):
        tree = ast.parse(app.read_text())
        imported = {
            f"{node.module}.{alias.name}"
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            for alias in node.names
        }
        assert not any(".data_classes." in name for name in imported), app
