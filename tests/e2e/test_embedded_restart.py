"""`fleetcast up` as a user runs it, stopped and started again: what it keeps, the logs it
leaves alone, and a second stack beside the first.

Each stack is its own `fleetcast up` process (moto's state lives in its process), stopped
with Ctrl-C as a reader stops it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from template_helpers import REPO_ROOT
from test_pipeline import readings, to_csv

from fleetcast.embedded import lease
from fleetcast.embedded.sagemaker_jobs.containers import image_environment
from fleetcast.embedded.stack import StackInfo
from fleetcast.status import RunStatus, follow_run, run_ids, wait_for_new_run
from fleetcast_contracts.ids import upload_sequence
from fleetcast_contracts.stages import TRAINING

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]

# Generous: on a loaded machine a start takes minutes (eight worker processes import pandas).
START_SECONDS = 600
JOB_SECONDS = 120
# The jobs run as the template's execution role: SageMaker assumes no other.
ROLE = "arn:aws:iam::123456789012:role/fleetcast-SageMakerExecutionRole"
RESOURCES = {
    "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}
}


@dataclass
class Up:
    """A running `fleetcast up` and what it has printed so far."""

    process: subprocess.Popen[bytes]
    log: Path
    state_dir: Path

    def output(self) -> str:
        return self.log.read_text()

    def info(self) -> StackInfo:
        return StackInfo.load(self.state_dir)

    def client(self, service: str) -> Any:
        info = self.info()
        return boto3.client(
            service,
            endpoint_url=info.endpoint_url,
            region_name=info.region,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> str:
        """Ctrl-C, as a reader stops it; what it printed, all of it."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.output()


def start_up(
    state_dir: Path, log: Path, *options: str, wait: bool = True, sigint_ignored: bool = False
) -> Up:
    """``sigint_ignored``: started as a shell without job control starts ``fleetcast up &``
    (SIGINT ignored), which Ctrl-C must stop all the same."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FLEETCAST_"))}
    environment.update(COLUMNS="200", AWS_CONFIG_FILE=os.devnull)
    with log.open("w") as output:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "fleetcast"),
                "--state-dir",
                str(state_dir),
                "up",
                *options,
            ],
            cwd=REPO_ROOT,
            env=environment,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=ignore_sigint if sigint_ignored else None,
        )
    up = Up(process, log, state_dir)
    deadline = time.monotonic() + START_SECONDS
    while wait and "Ctrl-C" not in up.output():
        assert process.poll() is None, f"fleetcast up exited:\n{up.output()}"
        assert time.monotonic() < deadline, f"no stack after {START_SECONDS} s:\n{up.output()}"
        time.sleep(0.5)
    return up


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def ups() -> Iterator[list[Up]]:
    """The stacks a test starts, stopped at its end whatever happened."""
    started: list[Up] = []
    yield started
    for up in started:
        up.stop()


def wait_for_status(sagemaker: Any, name: str, wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_SECONDS
    while True:
        job: dict[str, Any] = sagemaker.describe_processing_job(ProcessingJobName=name)
        if job["ProcessingJobStatus"] == wanted:
            return job
        assert time.monotonic() < deadline, f"{name} is still {job['ProcessingJobStatus']}"
        time.sleep(0.5)


def test_a_restarted_stack_keeps_objects_items_and_finished_jobs_and_the_logs(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a stack with an object, a registry record and a job that finished (failed:
    # its input prefix is empty), and a job log a user may still want
    state_dir = tmp_path / "state"
    # (started with SIGINT ignored, as `fleetcast up &` in a script starts it)
    first = start_up(state_dir, tmp_path / "first.log", "--port", "0", sigint_ignored=True)
    ups.append(first)
    assert "a new stack" in first.output()
    info = first.info()
    first.client("s3").put_object(Bucket=info.raw_bucket, Key="kept/note.txt", Body=b"kept")
    registry = first.client("dynamodb")
    keys = registry.describe_table(TableName=info.registry_table)["Table"]["KeySchema"]
    record = {key["AttributeName"]: {"S": "restart-check"} for key in keys}
    registry.put_item(TableName=info.registry_table, Item=record)
    sagemaker = first.client("sagemaker")
    sagemaker.create_processing_job(
        ProcessingJobName="restart-finished",
        ProcessingResources=RESOURCES,
        AppSpecification={"ImageUri": "fleetcast-processing:latest"},
        RoleArn=ROLE,
        ProcessingInputs=[
            {
                "InputName": "raw",
                "S3Input": {
                    "S3Uri": f"s3://{info.raw_bucket}/nothing-here/",
                    "LocalPath": "/opt/ml/processing/input",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ],
    )
    finished = wait_for_status(sagemaker, "restart-finished", "Failed")
    earlier_log = state_dir / "jobs" / "an-earlier-job" / "algo-1.log"
    earlier_log.parent.mkdir(parents=True)
    earlier_log.write_text("what the user still wants to read\n")

    # When it is stopped and started again
    stopped = first.stop()
    assert "kept in" in stopped and "1 SageMaker jobs" in stopped, stopped
    second = start_up(state_dir, tmp_path / "second.log", "--port", "0")
    ups.append(second)

    # Then it says what it restored, and everything is there as it was
    assert "restored from" in second.output(), second.output()
    info = second.info()
    body = second.client("s3").get_object(Bucket=info.raw_bucket, Key="kept/note.txt")["Body"]
    assert body.read() == b"kept"
    found = second.client("dynamodb").get_item(TableName=info.registry_table, Key=record)
    assert found.get("Item") == record
    again = second.client("sagemaker").describe_processing_job(ProcessingJobName="restart-finished")
    # the finished job did not run again: the same outcome, at the same moment
    assert again["ProcessingJobStatus"] == "Failed"
    assert again["FailureReason"] == finished["FailureReason"]
    assert again["LastModifiedTime"] == finished["LastModifiedTime"]
    assert earlier_log.read_text() == "what the user still wants to read\n"


def test_a_job_running_when_the_stack_stops_runs_again_at_the_next_start(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a processing job whose container says it started, then waits (its second
    # run, seeing the first one's mark, finishes at once)
    state_dir = tmp_path / "state"
    mark = tmp_path / "started-once"
    # (and, in its mark, what its image's ENV set in its environment)
    image = image_environment("fleetcast-processing:latest", REPO_ROOT / "containers")
    script = (
        "import json, os, pathlib, sys, time\n"
        f"mark = pathlib.Path({str(mark)!r})\n"
        "if mark.exists(): sys.exit(0)\n"
        f"mark.write_text(json.dumps({{k: os.environ.get(k) for k in {sorted(image)!r}}}))\n"
        "time.sleep(3600)\n"
    )
    first = start_up(state_dir, tmp_path / "first.log", "--port", "0")
    ups.append(first)
    first.client("sagemaker").create_processing_job(
        ProcessingJobName="restart-running",
        ProcessingResources=RESOURCES,
        AppSpecification={
            "ImageUri": "fleetcast-processing:latest",
            "ContainerEntrypoint": ["python3", "-c", script],
        },
        RoleArn=ROLE,
    )
    deadline = time.monotonic() + JOB_SECONDS
    while not (mark.exists() and mark.read_text()):
        assert time.monotonic() < deadline, "the job's container never started"
        time.sleep(0.2)
    assert json.loads(mark.read_text()) == image

    # When the stack stops while it runs, and starts again
    stopped = first.stop()
    assert "1 unfinished" in stopped, stopped
    second = start_up(state_dir, tmp_path / "second.log", "--port", "0")
    ups.append(second)

    # Then the job runs again and completes, its first run's log kept beside the second
    wait_for_status(second.client("sagemaker"), "restart-running", "Completed")
    assert (state_dir / "jobs" / "restart-running" / "algo-1.log").is_file()


def test_a_second_stack_on_the_same_machine_takes_free_ports_and_says_so(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a stack on the default ports (or, if another program has them, on free ones)
    first = start_up(tmp_path / "first", tmp_path / "first.log")
    ups.append(first)
    # When a second one starts with the same defaults, from a folder of its own
    second = start_up(tmp_path / "second", tmp_path / "second.log")
    ups.append(second)
    # Then both run, on different ports, and the second says which default was taken
    one, two = first.info(), second.info()
    assert one.endpoint_url != two.endpoint_url
    assert one.extra["FLEETCAST_API_URL"] != two.extra["FLEETCAST_API_URL"]
    assert "port 4599 was taken" in second.output(), second.output()
    assert "port 3000 was taken" in second.output(), second.output()
    # and a third from the first one's folder is refused, saying why
    third = start_up(tmp_path / "first", tmp_path / "third.log", wait=False)
    assert third.process.wait(timeout=START_SECONDS) == 1
    assert "already runs from" in third.output(), third.output()


def test_a_killed_stack_is_said_at_the_next_start_keeps_its_completed_run_and_leaves_nothing(
    tmp_path: Path, ups: list[Up]
) -> None:
    # Given a stack with a completed, registered run, and a later one training
    state_dir = tmp_path / "state"
    first = start_up(state_dir, tmp_path / "first.log", "--port", "0", "--api-port", "0")
    ups.append(first)
    info = first.info()
    done = to_csv(readings(KEPT_CUSTOMERS, "2024-01-01", 90, seed=3))
    completed = upload_and_follow(first, "kept.csv", done)
    assert completed.customers_registered == len(KEPT_CUSTOMERS), completed
    training = upload_only(first, "later.csv", to_csv(readings(LATER, "2024-01-01", 120, seed=4)))
    job = TRAINING.job_name(info.job_name_prefix, training)
    sagemaker = first.client("sagemaker")
    deadline = time.monotonic() + JOB_SECONDS
    while True:
        try:
            described = sagemaker.describe_training_job(TrainingJobName=job)
        except sagemaker.exceptions.ClientError:
            described = {}
        if described.get("SecondaryStatus") == "Training":
            break
        assert time.monotonic() < deadline, f"{job} never trained: {described}"
        time.sleep(0.1)
    # (and a snapshot taken since: one follows each change within seconds)
    training_since = time.time()
    snapshot = state_dir / "aws-state.pickle"
    while snapshot.stat().st_mtime <= training_since:
        assert time.monotonic() < deadline, "no snapshot since the job started training"
        time.sleep(0.1)
    assert sagemaker.describe_training_job(TrainingJobName=job)["TrainingJobStatus"] == (
        "InProgress"
    ), "the later run finished training before the kill: give it more customers"
    dead = lease.Lease(**json.loads((state_dir / lease.LEASE_FILE).read_text()))
    left = lease.left_behind(dead)
    assert len(left) >= 5, left  # Lambda workers, their fork server, the inference server

    # When the stack process is killed (kill -9) while it trains, and started again
    os.kill(first.process.pid, signal.SIGKILL)
    first.process.wait()
    second = start_up(state_dir, tmp_path / "second.log", "--port", "0", "--api-port", "0")
    ups.append(second)
    said = " ".join(second.output().split())

    # Then the crash is said, with what was kept, what was lost and what runs again
    assert "did not stop cleanly" in said, said
    assert "restored its last snapshot, taken at" in said and "LOST:" in said, said
    assert f"run again now: training job {job}" in said, said
    # and nothing of the dead stack is left running
    # (how many: job instances' workers come and go, so not quite those counted above)
    assert re.search(r"stopped the \d+ processes it left running: .*fleetcast_inference", said)
    assert lease.left_behind(dead) == []
    assert not any(process.is_running() for process in left)
    # and the completed run's model is still served
    again = second.info()
    status, body = api_get(again, f"/customers/{KEPT_CUSTOMERS[0]}/model")
    assert status == 200, body
    assert body["run_id"] == completed.run_id
    # and no run id is handed out twice: the next upload's number is above every one before
    third = upload_only(second, "after.csv", done)
    before = [upload_sequence(completed.run_id), upload_sequence(training)]
    assert (upload_sequence(third) or 0) > max(number or 0 for number in before), (third, before)


KEPT_CUSTOMERS = [f"kept-{i}" for i in range(3)]
# Enough customers that their training is still running when the stack is killed.
LATER = [f"later-{i}" for i in range(1500)]


def upload_only(up: Up, name: str, body: bytes) -> str:
    """Drop a file under incoming/; the run id of the processing job it starts."""
    info, sagemaker = up.info(), up.client("sagemaker")
    known = run_ids(info.job_name_prefix, sagemaker)
    up.client("s3").put_object(Bucket=info.raw_bucket, Key=f"incoming/{name}", Body=body)
    return wait_for_new_run(info.job_name_prefix, sagemaker, known, timeout=JOB_SECONDS)


def upload_and_follow(up: Up, name: str, body: bytes) -> RunStatus:
    run_id = upload_only(up, name, body)
    info = up.info()
    dynamodb = boto3.resource(
        "dynamodb",
        endpoint_url=info.endpoint_url,
        region_name=info.region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return follow_run(
        run_id,
        info.job_name_prefix,
        info.artifacts_bucket,
        up.client("sagemaker"),
        up.client("s3"),
        dynamodb.Table(info.registry_table),
        START_SECONDS,
    )


def api_get(info: StackInfo, path: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        info.extra["FLEETCAST_API_URL"] + path,
        headers={"x-api-key": info.extra["FLEETCAST_API_KEY"]},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.parametrize(("kept", "asked"), [("D", "H"), ("H", "D")])
def test_a_stack_asked_for_another_frequency_than_its_kept_state_refuses_to_start(
    tmp_path: Path, ups: list[Up], kept: str, asked: str
) -> None:
    # Given a stack kept at one ModelFrequency, with a job that ran at it
    state_dir = tmp_path / "state"
    frequency = ["--parameter-overrides", f"ModelFrequency={kept}"]
    first = start_up(
        state_dir, tmp_path / "first.log", "--port", "0", "--api-port", "0", *frequency
    )
    ups.append(first)
    info = first.info()
    sagemaker = first.client("sagemaker")
    sagemaker.create_processing_job(
        ProcessingJobName="kept-frequency",
        ProcessingResources=RESOURCES,
        AppSpecification={
            "ImageUri": "fleetcast-processing:latest",
            "ContainerArguments": ["--frequency", kept],
        },
        RoleArn=ROLE,
        ProcessingInputs=[
            {
                "InputName": "raw",
                "S3Input": {
                    "S3Uri": f"s3://{info.raw_bucket}/nothing-here/",
                    "LocalPath": "/opt/ml/processing/input",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ],
    )
    wait_for_status(sagemaker, "kept-frequency", "Failed")
    first.stop()

    # When it is started again at the other frequency
    other = start_up(
        state_dir,
        tmp_path / "other.log",
        "--port",
        "0",
        "--api-port",
        "0",
        "--parameter-overrides",
        f"ModelFrequency={asked}",
        wait=False,
    )
    ups.append(other)
    assert other.process.wait(timeout=START_SECONDS) == 1

    # Then it does not start, and says what the state holds and how to keep it or not
    said = " ".join(other.output().split())
    assert f"ModelFrequency={kept}" in said and f"ModelFrequency={asked}" in said, said
    assert "--fresh" in said and "local stack stopped" not in said

    # And the state is as it was: started at its own frequency, the job is there
    again = start_up(
        state_dir, tmp_path / "again.log", "--port", "0", "--api-port", "0", *frequency
    )
    ups.append(again)
    assert "restored from" in again.output(), again.output()
    job = again.client("sagemaker").describe_processing_job(ProcessingJobName="kept-frequency")
    assert job["AppSpecification"]["ContainerArguments"] == ["--frequency", kept]
