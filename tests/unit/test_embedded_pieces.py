"""The local stack's pure parts: template resolution, sharding, entrypoints, event fixes."""

import importlib.machinery
import io
import json
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fleetcast.embedded import persistence
from fleetcast.embedded import snapshots as snapshots_module
from fleetcast.embedded.events import normalise_event
from fleetcast.embedded.lambdas import LocalFunction, _main_module_by_name
from fleetcast.embedded.moto_patches.s3 import ObjectFiles
from fleetcast.embedded.queues import QueueDelivery, event_source_mappings
from fleetcast.embedded.sagemaker_jobs.containers import image_entrypoint, local_command
from fleetcast.embedded.sagemaker_jobs.runner import JobRunner
from fleetcast.embedded.sagemaker_jobs.transfer import shard, split_s3_uri, under_root
from fleetcast.embedded.snapshots import Snapshots
from fleetcast.embedded.template import ACCOUNT_ID, REGION, LocalTemplate

ROOT = Path(__file__).resolve().parents[2]


def test_shards_cover_every_key_once_and_are_within_one_of_even() -> None:
    keys = [f"runs/r/train/{i}.csv" for i in range(31)]
    shards = [shard(keys, 4, i) for i in range(4)]
    assert sorted(k for s in shards for k in s) == sorted(keys)
    sizes = [len(s) for s in shards]
    assert max(sizes) - min(sizes) <= 1


def test_image_entrypoint_is_read_from_the_dockerfile_that_ships(tmp_path: Path) -> None:
    # Given a containers folder with a Dockerfile per family
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "Dockerfile").write_text(
        'FROM x\nENTRYPOINT ["python3", "-m", "fleetcast_training"]\n'
    )
    # When an ECR image URI of that family is resolved
    command = image_entrypoint(
        "123456789012.dkr.ecr.us-east-1.amazonaws.com/fleetcast-training:abc", tmp_path
    )
    # Then it is the Dockerfile's entrypoint, run with this interpreter
    assert command == ["python3", "-m", "fleetcast_training"]
    assert local_command(command)[1:] == ["-m", "fleetcast_training"]
    with pytest.raises(LookupError, match="no container for image"):
        image_entrypoint("fleetcast-unknown:1", tmp_path)


def test_container_paths_map_under_the_instance_root(tmp_path: Path) -> None:
    assert under_root(tmp_path, "/opt/ml/processing/input/raw") == tmp_path / "processing/input/raw"
    assert split_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    with pytest.raises(ValueError, match="not an S3 URI"):
        split_s3_uri("bucket/a")


def test_moto_s3_event_is_put_back_into_the_documented_shape() -> None:
    event = {
        "source": "aws.s3",
        "detail": {"object": {"key": "k", "eTag": "abc", "version-id": "null"}},
    }
    fixed = normalise_event(event)
    assert fixed["detail"]["object"] == {"key": "k", "etag": "abc"}


def test_events_get_the_account_moto_leaves_out_of_the_envelope() -> None:
    # moto's EventBridge -> SQS delivery has no "account"; the handlers' parser needs it.
    event = {"version": "0", "id": "1", "source": "aws.sagemaker", "detail": {}}
    assert normalise_event(event)["account"] == "123456789012"


def test_template_resolves_names_refs_subs_and_function_environment() -> None:
    template = LocalTemplate(
        ROOT / "template.yaml",
        stack_name="demo",
        parameter_overrides={"TrainingInstanceCount": "3"},
    )
    env = template.function_environment("StartTrainingFunction")
    assert env["TRAINING_INSTANCE_COUNT"] == "3"
    assert env["ARTIFACTS_BUCKET"] == template.physical_name("ArtifactsBucket")
    assert env["SAGEMAKER_ROLE_ARN"] == "arn:aws:iam::123456789012:role/demo-SageMakerExecutionRole"
    pattern = template.resolve(
        template.resources["StartProcessingFunction"]["Properties"]["Events"]["UploadedCsv"][
            "Properties"
        ]["Pattern"]
    )
    assert pattern["detail"]["bucket"]["name"] == [template.physical_name("RawBucket")]
    json.dumps(pattern)  # fully resolved: no intrinsic left
    assert "Fn::" not in json.dumps(pattern) and '"Ref"' not in json.dumps(pattern)


# ---------------------------------------------------------------- what a restart keeps

JOB_RESOURCES = {
    "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}
}


def _clients() -> tuple[Any, Any, Any]:
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
    )
    return session.client("s3"), session.client("dynamodb"), session.client("sagemaker")


def test_a_snapshot_brings_back_objects_items_and_jobs_and_names_the_unfinished(
    tmp_path: Path,
) -> None:
    # Given moto holding an object, an item, a finished job and one still running
    snapshot = tmp_path / persistence.SNAPSHOT_FILE
    with mock_aws():
        s3, dynamodb, sagemaker = _clients()
        s3.create_bucket(Bucket="kept-bucket")
        s3.put_object(Bucket="kept-bucket", Key="incoming/a.csv", Body=b"customer_id,date\n")
        dynamodb.create_table(
            TableName="registry",
            KeySchema=[{"AttributeName": "customer_id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "customer_id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb.put_item(TableName="registry", Item={"customer_id": {"S": "42"}})
        for name in ("finished", "running"):
            sagemaker.create_processing_job(
                ProcessingJobName=name,
                ProcessingResources=JOB_RESOURCES,
                AppSpecification={"ImageUri": "fleetcast-processing:latest"},
                RoleArn="arn:aws:iam::123456789012:role/r",
            )
        backend = persistence.sagemaker_backend(ACCOUNT_ID, REGION)
        backend.processing_jobs["running"].processing_job_status = "InProgress"
        # When it is saved, and moto starts empty again
        saved = persistence.save(snapshot, ACCOUNT_ID, REGION)
    with mock_aws():
        s3, dynamodb, sagemaker = _clients()
        assert s3.list_buckets()["Buckets"] == []
        restored = persistence.restore(snapshot, ACCOUNT_ID, REGION)
        # Then everything is back, and the running job is the one to run again
        assert restored == saved
        assert restored.unfinished == (("processing", "running"),)
        # (a stop says it runs again at the next start; the start, that it runs again now)
        assert saved.describe().endswith("(1 unfinished: run again at the next start)")
        assert restored.describe(restored=True).endswith("(1 unfinished: run again now)")
        body = s3.get_object(Bucket="kept-bucket", Key="incoming/a.csv")["Body"].read()
        assert body == b"customer_id,date\n"
        item = dynamodb.get_item(TableName="registry", Key={"customer_id": {"S": "42"}})
        assert item["Item"] == {"customer_id": {"S": "42"}}
        finished = sagemaker.describe_processing_job(ProcessingJobName="finished")
        assert finished["ProcessingJobStatus"] == "Completed"


def test_a_snapshot_keeps_every_version_of_a_versioned_buckets_key(tmp_path: Path) -> None:
    # Given a versioned bucket holding three versions of one key
    snapshot = tmp_path / persistence.SNAPSHOT_FILE
    with mock_aws():
        s3, _, _ = _clients()
        s3.create_bucket(Bucket="raw")
        s3.put_bucket_versioning(Bucket="raw", VersioningConfiguration={"Status": "Enabled"})
        versions = [
            s3.put_object(Bucket="raw", Key="incoming/a.csv", Body=f"v{n}".encode())["VersionId"]
            for n in range(3)
        ]
        # When it is saved, and moto starts empty again and reads it back
        saved = persistence.save(snapshot, ACCOUNT_ID, REGION)
    with mock_aws():
        s3, _, _ = _clients()
        restored = persistence.restore(snapshot, ACCOUNT_ID, REGION)
        # Then each version is still there, readable by its id, the latest still latest
        assert restored == saved
        listed = s3.list_object_versions(Bucket="raw")["Versions"]
        assert sorted(v["VersionId"] for v in listed) == sorted(versions)
        for n, version in enumerate(versions):
            body = s3.get_object(Bucket="raw", Key="incoming/a.csv", VersionId=version)["Body"]
            assert body.read() == f"v{n}".encode()
        latest = s3.get_object(Bucket="raw", Key="incoming/a.csv")
        assert latest["VersionId"] == versions[-1] and latest["Body"].read() == b"v2"


def test_an_upload_is_answered_only_once_a_snapshot_holds_it(tmp_path: Path) -> None:
    # Given a stack's snapshots, taken at most every MIN_GAP_SECONDS, just after one
    snapshot = tmp_path / persistence.SNAPSHOT_FILE
    with mock_aws():
        s3, _, _ = _clients()
        s3.create_bucket(Bucket="raw")
        snapshots = Snapshots(
            snapshot,
            tmp_path,
            ACCOUNT_ID,
            REGION,
            ObjectFiles(tmp_path / "objects"),
            durable_buckets=frozenset({"raw"}),
        )
        snapshots.take()
        snapshots.start()
        try:

            def moto_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
                s3.put_object(Bucket="raw", Key="incoming/a.csv", Body=b"customer_id\n")
                start_response("200 OK", [])
                return [b""]

            app = snapshots.watch(moto_app)
            put = {"REQUEST_METHOD": "PUT", "PATH_INFO": "/raw/incoming/a.csv"}
            # When an upload to the raw bucket is answered
            started = time.monotonic()
            list(app(put, lambda *_: None))
            # Then a snapshot taken after its write was written first
            assert snapshots.times.count == 2
            # And for the next upload too, without waiting for the gap between snapshots
            list(app(put, lambda *_: None))
            assert snapshots.times.count == 3
            assert time.monotonic() - started < snapshots_module.MIN_GAP_SECONDS
        finally:
            snapshots.stop()
    with mock_aws():
        s3, _, _ = _clients()
        persistence.restore(snapshot, ACCOUNT_ID, REGION)
        assert s3.get_object(Bucket="raw", Key="incoming/a.csv")["Body"].read() == b"customer_id\n"
    # And only requests that create an object in an upload bucket wait
    raw = frozenset({"raw"})
    creates = snapshots_module.creates_object_in
    assert creates(
        {"REQUEST_METHOD": "POST", "PATH_INFO": "/raw/k", "QUERY_STRING": "uploadId=1"}, raw
    )
    assert not creates(
        {"REQUEST_METHOD": "PUT", "PATH_INFO": "/raw/k", "QUERY_STRING": "partNumber=1&uploadId=1"},
        raw,
    )
    assert not creates({"REQUEST_METHOD": "PUT", "PATH_INFO": "/artifacts/k"}, raw)
    assert not creates({"REQUEST_METHOD": "GET", "PATH_INFO": "/raw/k"}, raw)
    assert not creates({"REQUEST_METHOD": "PUT", "PATH_INFO": "/raw"}, raw)


def test_an_unreadable_snapshot_is_refused_naming_the_file(tmp_path: Path) -> None:
    snapshot = tmp_path / persistence.SNAPSHOT_FILE
    snapshot.write_bytes(b"cut short")
    with pytest.raises(persistence.SnapshotUnreadableError, match=str(snapshot)):
        persistence.restore(snapshot, ACCOUNT_ID, REGION)


def test_setting_a_snapshot_aside_renames_it_and_deletes_nothing(tmp_path: Path) -> None:
    snapshot = tmp_path / persistence.SNAPSHOT_FILE
    snapshot.write_bytes(b"state")
    aside = persistence.set_aside(snapshot)
    assert aside is not None and aside.read_bytes() == b"state"
    assert not snapshot.exists()
    assert persistence.set_aside(snapshot) is None
    # and the object files a snapshot names go aside with it, under the same stamp
    snapshot.write_bytes(b"state")
    objects = tmp_path / "s3-objects"
    objects.mkdir()
    (objects / "a-0").write_bytes(b"object")
    aside = persistence.set_aside(snapshot, objects)
    assert aside is not None and not objects.exists()
    stamp = aside.name.rpartition(".")[2]
    assert (tmp_path / f"s3-objects.{stamp}" / "a-0").read_bytes() == b"object"


def test_a_processing_jobs_environment_reaches_its_container_though_moto_drops_it(
    tmp_path: Path,
) -> None:
    # Given the job runner's wrapper around moto's application
    runner = JobRunner(s3=None, events=None, workdir=tmp_path, containers_dir=tmp_path)
    seen: list[bytes] = []

    def moto_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(environ["wsgi.input"].read())
        return [b"{}"]

    app = runner.environments.wrap(moto_app)
    request = {
        "ProcessingJobName": "fc-p-q0000000001-20261201t000000",
        "Environment": {"FLEETCAST_MAX_UPLOAD_BYTES": "1048576"},
    }
    body = json.dumps(request).encode()

    # When CreateProcessingJob passes through it, and another call too
    app(
        {
            "HTTP_X_AMZ_TARGET": "SageMaker.CreateProcessingJob",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.input": io.BytesIO(body),
        },
        lambda *_: None,
    )
    app({"HTTP_X_AMZ_TARGET": "SageMaker.ListProcessingJobs", "wsgi.input": io.BytesIO(b"x")}, None)

    # Then moto got the request unchanged, and the job's container will get the Environment
    assert seen == [body, b"x"]
    assert runner.environments.of("fc-p-q0000000001-20261201t000000") == {
        "FLEETCAST_MAX_UPLOAD_BYTES": "1048576"
    }
    assert runner.environments.of("another-job") == {}


def test_queue_delivery_serves_the_event_sources_it_is_handed(tmp_path: Path) -> None:
    """The stack reads the template's event source mappings once, for its functions'
    concurrency and for delivery alike: delivery takes them instead of reading again."""
    template = LocalTemplate(ROOT / "template.yaml")
    (mapping,) = event_source_mappings(template)
    function = LocalFunction(
        name="chunks",
        code_dir=tmp_path,
        handler="app.lambda_handler",
        environment={},
        log_path=tmp_path / "chunks.log",
    )
    with mock_aws():
        sqs = boto3.session.Session(
            aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
        ).client("sqs")
        # Given the chunks queue (and its dead-letter queue) with SQS's default attributes
        sqs.create_queue(QueueName=template.physical_name("RegistrationChunksDeadLetterQueue"))
        url = sqs.create_queue(QueueName=template.physical_name(mapping.queue_logical_id))[
            "QueueUrl"
        ]

        def visibility_timeout() -> str:
            attributes = sqs.get_queue_attributes(
                QueueUrl=url, AttributeNames=["VisibilityTimeout"]
            )["Attributes"]
            return str(attributes["VisibilityTimeout"])

        # When delivery is handed no event source, then it leaves the queue alone
        QueueDelivery(sqs, template, {}, [])
        assert visibility_timeout() == "30"

        # When it is handed the template's, then the queue gets the template's attributes
        QueueDelivery(sqs, template, {mapping.function_logical_id: function}, [mapping])
        assert visibility_timeout() == str(
            template.resources[mapping.queue_logical_id]["Properties"]["VisibilityTimeout"]
        )
    function.close()


def test_lambda_workers_preload_a_main_module_run_by_name_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # multiprocessing runs the main module again in each worker: preloaded, its imports
    # are done once in the forkserver. A path (a script) or a package's __main__ is not
    # importable by that name, and is left out.
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec("bench.scale", None)
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert _main_module_by_name() == ["bench.scale"]
    main.__spec__ = importlib.machinery.ModuleSpec("fleetcast.__main__", None)
    assert _main_module_by_name() == []
    main.__spec__ = None
    assert _main_module_by_name() == []


def test_the_fleetcast_commands_main_module_imports_nothing_of_the_cli() -> None:
    # Each Lambda worker of the local stack runs the program's main module again; for the
    # `fleetcast` command that must not cost the CLI's imports (moto, pandas, the stack).
    code = "import sys, fleetcast.__main__; print(sorted(m for m in sys.modules if m.startswith(('fleetcast.', 'moto', 'pandas', 'boto3'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['fleetcast.__main__']"
    # and it is the command: `python -m fleetcast` answers as `fleetcast` does
    helped = subprocess.run(
        [sys.executable, "-m", "fleetcast", "--help"], capture_output=True, text=True, check=True
    )
    assert helped.stdout.startswith("usage: fleetcast")


def test_the_stack_limits_malloc_arenas_on_glibc() -> None:
    # Given this machine's C library (glibc, as on every Linux the stack runs on here)
    from fleetcast.embedded.malloc import limit_arenas

    # When the limit is set, then glibc takes it
    assert limit_arenas() is True
