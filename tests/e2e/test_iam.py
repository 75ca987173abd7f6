"""template.yaml's grants, end to end on the local stack with IAM enforced: what each role
is not allowed fails as on AWS, so a missing grant shows here before a first deploy
(issue 27, findings 1 and 2)."""

from __future__ import annotations

import time

import pytest
from botocore.exceptions import ClientError
from test_pipeline import TIMEOUT, finished, readings, registry, to_csv, upload, wait_for_events

from fleetcast.embedded.iam.policy import Request, evaluate
from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_contracts import layout
from fleetcast_contracts.stages import TRAINING
from fleetcast_contracts.training import manifest_summary_name
from fleetcast_cost.settings import CostReportSettings

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:prophet.*"),
]


def denials_of(stack: EmbeddedStack, function: str, run_id: str = "") -> list[str]:
    role = stack.iam.roles.of_function(function).name
    return [
        f"{d.action} on {d.resource}"
        for d in stack.iam.denials
        if d.role == role and run_id in d.resource + d.action
    ]


def training_job_status(stack: EmbeddedStack, job: str, wanted: set[str]) -> str:
    """The training job's status once it is one of ``wanted`` (it may not exist yet)."""
    sagemaker = stack.client("sagemaker")
    deadline = time.monotonic() + TIMEOUT
    while True:
        try:
            status = str(sagemaker.describe_training_job(TrainingJobName=job)["TrainingJobStatus"])
        except ClientError:  # (moto: ValidationException, "Could not find training job")
            status = ""
        if status in wanted:
            return status
        assert time.monotonic() < deadline, f"{job} is {status or 'not there'}"
        time.sleep(0.2)


def test_a_training_job_that_wrote_nothing_is_marked_registered(stack: EmbeddedStack) -> None:
    """Finding 1: a run with no chunks reaches GetItem, which register-models' role lacked:
    AccessDenied, retries, the dead-letter queue, and a run never marked registered."""
    assert stack.runner is not None and stack.info is not None
    # Given a one-customer upload, so its training job has one instance
    run_id = upload(
        stack, "iam-nothing.csv", to_csv(readings(["iam-nothing"], "2024-01-01", 60, seed=4))
    )
    job = f"{stack.info.job_name_prefix}-t-{run_id}"
    training_job_status(stack, job, {"InProgress"})
    # When that instance is killed before it writes anything
    assert stack.runner.crash(job)
    assert training_job_status(stack, job, {"Failed", "Completed"}) == "Failed"
    # (register-models has started the run's record, and each delivery of the job's end
    # to it has been handled, retries included)
    deadline = time.monotonic() + TIMEOUT
    while registry(stack).run(run_id) is None:
        assert time.monotonic() < deadline, "register-models never started the run's record"
        time.sleep(0.2)
    wait_for_events(stack, "RegisterModelsFunction")
    # Then the job had nothing to register, and the run is marked registered
    progress = registry(stack).run(run_id)
    assert progress is not None and progress.chunks_total == 0
    assert progress.complete, "the run was never marked registered"
    assert progress.lost == 1
    # And register-models was refused nothing on the way
    assert denials_of(stack, "RegisterModelsFunction", run_id) == []


def test_register_models_reads_the_page_summaries_it_plans_from(stack: EmbeddedStack) -> None:
    """Finding 1: the role's S3 read covered the manifests, not the per-host page summaries
    read first; that AccessDenied passed for "missing" and every run fell back to reading
    each whole manifest."""
    assert stack.info is not None
    # Given a completed run
    run_id = upload(
        stack,
        "iam-pages.csv",
        to_csv(readings(["iam-p1", "iam-p2", "iam-p3"], "2024-01-01", 60, seed=5)),
    )
    status = finished(stack, run_id)
    assert status.job(TRAINING).status == "Completed"
    assert status.registration == "registered"
    # Then register-models read each instance's summary: nothing was refused
    assert denials_of(stack, "RegisterModelsFunction", run_id) == []
    # (and its role allows exactly that read, which the template's grant is checked by)
    role = stack.iam.roles.of_function("RegisterModelsFunction")
    summary = layout.checkpoint_prefix(run_id) + manifest_summary_name("algo-1")
    read = Request("s3:GetObject", f"arn:aws:s3:::{stack.info.artifacts_bucket}/{summary}")
    assert evaluate(role.documents(), read).allowed


def test_the_cost_report_may_send_to_its_recipients_in_the_ses_sandbox(
    stack: EmbeddedStack,
) -> None:
    """Finding 2: in the SES sandbox SES authorises SendRawEmail against each recipient's
    verified identity too, not only the sender's."""
    assert stack.costs is not None
    settings = CostReportSettings.from_env(stack.costs.environment())
    # Given the cost report's role, and its sender and recipients (verified, as the
    # sandbox needs)
    role = stack.iam.roles.of_function("CostReportFunction")
    ses = stack.client_as(role.arn, "ses")
    # When it sends as the function does
    sent = ses.send_raw_email(
        Source=settings.sender,
        Destinations=list(settings.recipients),
        RawMessage={"Data": b"Subject: iam test\r\n\r\nsandbox"},
    )
    # Then SES took it
    assert sent["MessageId"]
    assert denials_of(stack, "CostReportFunction") == []


def test_a_job_whose_role_the_stack_does_not_have_fails_saying_so(stack: EmbeddedStack) -> None:
    # Given a processing job created with a role no template declares
    name = "iam-unknown-role"
    stack.client("sagemaker").create_processing_job(
        ProcessingJobName=name,
        ProcessingResources={
            "ClusterConfig": {
                "InstanceCount": 1,
                "InstanceType": "ml.m5.large",
                "VolumeSizeInGB": 1,
            }
        },
        AppSpecification={"ImageUri": "fleetcast-processing:latest"},
        RoleArn="arn:aws:iam::123456789012:role/nobody",
    )
    # Then it fails, as SageMaker fails a job it cannot assume the role of
    sagemaker = stack.client("sagemaker")
    deadline = time.monotonic() + TIMEOUT
    while (job := sagemaker.describe_processing_job(ProcessingJobName=name))[
        "ProcessingJobStatus"
    ] == "InProgress":
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.2)
    assert job["ProcessingJobStatus"] == "Failed"
    assert "could not assume the role arn:aws:iam::123456789012:role/nobody" in job["FailureReason"]
