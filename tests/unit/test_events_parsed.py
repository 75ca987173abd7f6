"""Every event a function takes is parsed into a typed model (issues 28 and 43): by
``@event_parser``, or, for the forecast API and register-chunk, by the Powertools consumer
the handler hands it to whole (the validating resolver, the batch processor with its
model), which needs the event as it came. start-processing's two kinds are told apart by
detail-type, and a malformed event of either is refused naming its field, not a KeyError
inside the handler."""

from __future__ import annotations

import ast
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import parse
from pydantic import ValidationError
from template_helpers import REPO_ROOT

from fleetcast_common.jobs import Upload, processing_job_request
from fleetcast_common.sagemaker_events import (
    ObjectCreated,
    ProcessingJobEnded,
    StartProcessingEvent,
)
from fleetcast_common.settings import ProcessingSettings
from fleetcast_contracts import layout
from fleetcast_contracts.processing import source_key_from_environment
from fleetcast_contracts.stages import PROCESSING

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


# Powertools consumers that parse the raw event themselves: an event handler's resolver
# built with validation (pydantic models of the request), a batch processor with a model.
PARSING_CONSUMERS = {
    "resolve": ("APIGatewayRestResolver", "enable_validation"),
    "process_partial_response": ("BatchProcessor", "model"),
}


def _unparsed_event(source: str) -> str | None:
    """Why the module's ``lambda_handler`` reads its event unparsed, or None: it is parsed by
    ``@event_parser(model=...)``, or handed whole to a Powertools consumer that parses it
    (and touched nowhere else)."""
    tree = ast.parse(source)
    handler = next(
        node
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "lambda_handler"
    )
    imported = {
        f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    if any(".data_classes." in name for name in imported):
        return "imports Powertools' data classes"
    for decorator in handler.decorator_list:
        if (
            isinstance(decorator, ast.Call)
            and ast.unparse(decorator.func) == "event_parser"
            and any(k.arg == "model" for k in decorator.keywords)
        ):
            return None
    event = handler.args.args[0].arg
    uses = [n for n in ast.walk(handler) if isinstance(n, ast.Name) and n.id == event]
    body = handler.body
    call = body[0].value if len(body) == 1 and isinstance(body[0], ast.Return) else None
    if not isinstance(call, ast.Call) or len(uses) != 1:
        return "reads its event itself"
    name = ast.unparse(call.func).rsplit(".", 1)[-1]
    if name not in PARSING_CONSUMERS:
        return f"hands its event to {name}, which does not parse it"
    kind, parses = PARSING_CONSUMERS[name]
    # The consumer's object (the resolver, the processor), as the module builds it.
    if isinstance(call.func, ast.Attribute):
        target = ast.unparse(call.func.value)
    else:
        target = next(ast.unparse(k.value) for k in call.keywords if k.arg == "processor")
    built = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == target
    )
    classes = {
        node.name: {ast.unparse(base) for base in node.bases}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    assert isinstance(built, ast.Call)
    built_kind = ast.unparse(built.func)
    if kind != built_kind and kind not in classes.get(built_kind, set()):
        return f"hands its event to a {built_kind}, not a {kind}"
    if not any(k.arg == parses for k in built.keywords):
        return f"its {built_kind} is built without {parses}"
    return None


@pytest.mark.parametrize(
    "app", sorted((REPO_ROOT / "functions").glob("*/app.py")), ids=lambda app: app.parent.name
)
def test_every_handler_takes_its_event_parsed_into_a_model(app: Any) -> None:
    assert _unparsed_event(app.read_text()) is None


HANDLER = """
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.utilities.parser import event_parser
app = APIGatewayRestResolver({options})

{decorator}
def lambda_handler(event, context):
    {body}
"""


@pytest.mark.parametrize(
    ("options", "decorator", "body", "problem"),
    [
        ("", "", 'return event["detail"]["status"]', "reads its event itself"),
        ("", "", "return json.dumps(event)", "hands its event to dumps, which does not parse it"),
        ("", "", "return app.resolve(event, context)", "built without enable_validation"),
        ("enable_validation=True", "", "return app.resolve(event, context)", None),
        ("", "@event_parser(model=Ended)", "return event.detail", None),
    ],
)
def test_the_check_tells_a_raw_event_from_a_parsed_one(
    options: str, decorator: str, body: str, problem: str | None
) -> None:
    # Given a handler module
    source = HANDLER.format(options=options, decorator=decorator, body=body)
    # When the check reads it
    found = _unparsed_event(source)
    # Then it names the problem, or none
    assert (found is None) if problem is None else (found is not None and problem in found)


@pytest.mark.parametrize("name", ["processing_job_completed.json", "processing_job_failed.json"])
def test_the_sample_job_events_carry_the_request_start_processing_makes(name: str) -> None:
    # Given a sample processing job event, and the request start-processing would make for
    # its job and upload
    detail = _event(name)["detail"]
    run_id = PROCESSING.run_id_of("fleetcast", detail["ProcessingJobName"])
    key = source_key_from_environment(detail["Environment"])
    assert key is not None
    settings = ProcessingSettings.from_env(
        {
            "RAW_BUCKET": "fleetcast-raw-123456789012",
            "ARTIFACTS_BUCKET": "fleetcast-artifacts-123456789012",
            "REGISTRY_TABLE": "registry",
            "JOB_NAME_PREFIX": "fleetcast",
            "SAGEMAKER_ROLE_ARN": detail["RoleArn"],
            "PROCESSING_IMAGE_URI": detail["AppSpecification"]["ImageUri"],
            "UPLOAD_QUEUE_TABLE": "queue",
        }
    )
    upload = Upload(
        bucket="fleetcast-raw-123456789012",
        key=key,
        revision="-",
        size=1,
        uploaded_at=datetime(2026, 11, 29, tzinfo=UTC),
    )
    request = processing_job_request(
        settings, run_id, upload, layout.staged_upload_key(run_id, key), with_history=True
    )
    # Then the event's inputs, outputs, container and environment are the request's
    for field in ("ProcessingInputs", "ProcessingOutputConfig", "AppSpecification", "Environment"):
        assert detail[field] == request[field], field
