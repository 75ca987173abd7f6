"""What a start from a snapshot sends again for the upload queue (fleetcast.embedded.recovery),
against a moto server with the template's resources: the event it re-sends is the upload
as S3 described it, and start-processing, given it again and again, dispatches once."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import S3EventNotificationEventBridgeModel
from function_helpers import load_function
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sagemaker.models import sagemaker_backends
from test_registration import GOOD, trained

from fleetcast.embedded.events import normalise_event
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS
from fleetcast.embedded.recovery import Recovery
from fleetcast.embedded.resources import create_resources
from fleetcast.embedded.sagemaker_jobs.runner import JobRunner
from fleetcast.embedded.template import LocalTemplate
from fleetcast_common.chunk_queue import MAX_RECEIVES
from fleetcast_common.jobs import Upload
from fleetcast_common.pipeline import Outcome, start_processing
from fleetcast_common.registration import plan_registration, register_chunk, start_registration
from fleetcast_common.registry import FailedChunk, ModelRegistry
from fleetcast_common.settings import ProcessingSettings
from fleetcast_common.upload_queue import Lease, UploadQueue, WaitingUpload
from fleetcast_contracts.stages import PROCESSING, TRAINING

ROOT = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def _uploaded(s3: Any, bucket: str, name: str) -> Upload:
    put = s3.put_object(Bucket=bucket, Key=f"incoming/{name}", Body=b"customer_id\n")
    return Upload(
        bucket=bucket,
        key=f"incoming/{name}",
        revision=put["VersionId"],
        size=len(b"customer_id\n"),
        uploaded_at=T0,
        version_id=put["VersionId"],
        etag=put["ETag"].strip('"'),
        sequencer="617F08299329D189",
    )


def test_a_lease_whose_job_never_existed_is_freed_and_the_oldest_upload_sent_again(
    aws_env: str, tmp_path: Path
) -> None:
    # Given a stack's resources, and its upload queue as a crash left it: the lease taken
    # for an upload whose job was never created, that upload and a later one waiting
    prefix = f"rec{uuid.uuid4().hex[:6]}"
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name=prefix,
        parameter_overrides={**LOCAL_IMAGE_PARAMETERS, "JobNamePrefix": prefix},
    )
    # (no roles: this test's calls are the administrator's, as moto's are unsigned)
    create_resources(template, boto3.client, lambda iam, sts: None)
    s3, sqs, events = boto3.client("s3"), boto3.client("sqs"), boto3.client("events")
    raw = template.physical_name("RawBucket")
    queue = UploadQueue(
        boto3.resource("dynamodb").Table(template.physical_name("UploadQueueTable"))
    )
    uploads = [_uploaded(s3, raw, name) for name in ("first.csv", "second.csv")]
    runs = [queue.arrive(upload, T0).run_id for upload in uploads]
    for run_id, upload in zip(runs, uploads, strict=True):
        queue.add(WaitingUpload(run_id=run_id, upload=upload))
    lease = Lease(run_id=runs[0], job_name=PROCESSING.job_name(prefix, runs[0]), taken_at=T0)
    assert queue.take_lease(lease, replacing=None)
    # and an upload kept in the raw bucket whose event the queue never saw
    unseen = _uploaded(s3, raw, "third.csv")
    # (start-processing's rule, delivered to a queue this test reads)
    target = sqs.create_queue(QueueName=f"{prefix}-uploaded")["QueueUrl"]
    target_arn = sqs.get_queue_attributes(QueueUrl=target, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    rule = template.resolve(
        template.resources["StartProcessingFunction"]["Properties"]["Events"]["UploadedCsv"]
    )["Properties"]
    events.put_rule(Name=f"{prefix}-uploaded", EventPattern=json.dumps(rule["Pattern"]))
    events.put_targets(Rule=f"{prefix}-uploaded", Targets=[{"Id": "queue", "Arn": target_arn}])
    recovery = Recovery(
        template,
        boto3.client,
        boto3.resource,
        JobRunner(s3=s3, events=events, workdir=tmp_path, containers_dir=ROOT / "containers"),
        sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"],
    )

    # When the stack starts again
    redriven = recovery.redrive()

    # Then it frees the lease, sends the oldest upload's event again and says both
    assert (redriven.freed_lease, redriven.uploads) == (runs[0], [runs[0]])
    assert redriven.unqueued == [unseen.key]
    assert queue.lease() is None
    said = redriven.describe()
    assert f"lease of run {runs[0]} freed" in said and f"waiting upload {runs[0]}" in said
    assert "1 uploads the upload queue never saw (incoming/third.csv" in said
    unseen_event, message = sqs.receive_message(QueueUrl=target, MaxNumberOfMessages=10)["Messages"]
    sent = parse(
        event=normalise_event(json.loads(unseen_event["Body"])),
        model=S3EventNotificationEventBridgeModel,
    )
    assert (sent.detail.object.key, sent.detail.object.version_id) == (
        unseen.key,
        unseen.version_id,
    )
    # And the event is the upload as S3 described it, to start-processing's parsing
    event = parse(
        event=normalise_event(json.loads(message["Body"])),
        model=S3EventNotificationEventBridgeModel,
    )
    start_processing_app = load_function("start_processing")
    assert start_processing_app.upload_from(event) == uploads[0]
    # And start-processing, given it twice, starts the first upload's job once, in its place
    settings = ProcessingSettings.from_env(template.function_environment("StartProcessingFunction"))
    sagemaker = boto3.client("sagemaker")
    given = [
        start_processing(uploads[0], settings, sagemaker, s3, queue, T0).outcome for _ in range(2)
    ]
    assert given == [Outcome.STARTED, Outcome.ALREADY_STARTED]
    assert [waiting.run_id for waiting in queue.waiting()] == [runs[1]]
    # And a start after that (moto completes a job when it is created) publishes that
    # job's end, and frees no lease
    again = recovery.redrive()
    assert (again.processing_ends, again.freed_lease) == ([lease.job_name], None)


def test_a_start_sends_uncounted_chunks_again_but_not_dead_lettered_ones(
    aws_env: str, tmp_path: Path
) -> None:
    # Given a run whose training ended and whose registration has three chunks: one
    # counted, one that failed a delivery before the stack stopped, one dead-lettered
    prefix = f"rec{uuid.uuid4().hex[:6]}"
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name=prefix,
        parameter_overrides={**LOCAL_IMAGE_PARAMETERS, "JobNamePrefix": prefix},
    )
    create_resources(template, boto3.client, lambda iam, sts: None)
    s3, sqs = boto3.client("s3"), boto3.client("sqs")
    bucket = template.physical_name("ArtifactsBucket")
    registry = ModelRegistry(
        boto3.resource("dynamodb").Table(template.physical_name("ModelRegistryTable"))
    )
    run_id = "q0000000001-20261201t090000"
    trained(s3, bucket, run_id, {f"c{i}": GOOD for i in range(6)}, hosts=1)
    job = TRAINING.job_name(prefix, run_id)
    plan, chunks = plan_registration(run_id, job, bucket, 2, s3)
    start_registration(plan, s3, bucket, registry)
    register_chunk(chunks[2], bucket, s3, registry)
    for chunk, deliveries in ((chunks[0], MAX_RECEIVES), (chunks[1], 1)):
        registry.record_chunk_failure(
            run_id,
            FailedChunk(
                chunk_id=chunk.chunk_id,
                number=chunk.number,
                reason="ValueError: broken",
                deliveries=deliveries,
                failed_at=T0,
            ),
        )
    boto3.client("sagemaker").create_training_job(
        TrainingJobName=job,
        AlgorithmSpecification={
            "TrainingImage": "fleetcast-training:1",
            "TrainingInputMode": "File",
        },
        RoleArn="arn:aws:iam::123456789012:role/sagemaker",
        OutputDataConfig={"S3OutputPath": f"s3://{bucket}/"},
        ResourceConfig={"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    recovery = Recovery(
        template,
        boto3.client,
        boto3.resource,
        JobRunner(s3=s3, events=None, workdir=tmp_path, containers_dir=ROOT / "containers"),
        sagemaker_backends[DEFAULT_ACCOUNT_ID]["us-east-1"],
    )

    # When the stack starts again
    redriven = recovery.redrive()

    # Then the chunk that was still being retried is sent again, the dead-lettered one is
    # not (it would fail again at every start), and the notice says how to re-drive it
    assert redriven.chunks == {run_id: [1]}
    assert redriven.dead_lettered == {run_id: [0]}
    queue = sqs.get_queue_url(QueueName=template.physical_name("RegistrationChunksQueue"))
    sent = sqs.receive_message(QueueUrl=queue["QueueUrl"], MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["number"] for m in sent] == [1]
    said = redriven.describe()
    assert f"NOT re-driven: 1 registration chunks of run {run_id}" in said
    assert f"fleetcast redrive-chunks {run_id}" in said
