"""moto's SageMaker, as the job runner needs it: created jobs wait for the runner, names
are unique, and what a create call says is kept. Written for moto 5.2.5 (see
:mod:`fleetcast.embedded.moto_patches`).

Why a patch of ``SageMakerModelBackend``: moto 5.2.5 has no public hook to learn of a
created SageMaker job nor to keep it from finishing. Its state manager
(``moto.moto_api.state_manager``) moves only models built on ``ManagedState``, and
FakeTrainingJob / FakeProcessingJob are not: they are Completed from their first line. A
WSGI wrapper (as :class:`ProcessingEnvironments` is) sees the request, but acts only after
moto has stored the job, so a DescribeTrainingJob in between would read Completed for a
job that never ran. moto 5.2.5 also overwrites a job of the same name (SageMaker refuses
it: ResourceInUse) and swaps CreateTrainingJob's MetricDefinitions for a canned one.
Wrapping the two create methods does all three under moto's own call. Upstream asks for
such callbacks in getmoto/moto#7126 (open); when moto has them, this patch goes.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from typing import Any

from moto.backends import get_backend
from moto.sagemaker import models as sagemaker_models
from moto.sagemaker.exceptions import ResourceInUseException

# Told of each job moto has just stored: its kind ("processing" | "training"), moto's
# SageMaker backend and the job's name.
JobSubmitter = Callable[[str, Any, str], None]
_CREATE_METHODS = ("create_processing_job", "create_training_job")


class JobHooks:
    """moto's two create-job calls, leaving each job InProgress for ``submit`` to run."""

    def __init__(self, submit: JobSubmitter) -> None:
        self._submit = submit
        self._originals: dict[str, Any] = {}

    def install(self) -> None:
        backend_class = sagemaker_models.SageMakerModelBackend
        self._originals = {name: getattr(backend_class, name) for name in _CREATE_METHODS}
        create_processing = self._originals["create_processing_job"]
        create_training = self._originals["create_training_job"]
        submit = self._submit

        def create_processing_job(backend: Any, *args: Any, **kwargs: Any) -> Any:
            name = kwargs["processing_job_name"]
            if name in backend.processing_jobs:
                raise ResourceInUseException(
                    message=f"Job name must be unique within an AWS account and region, and a job with this name already exists ({name})"
                )
            job = create_processing(backend, *args, **kwargs)
            job.processing_job_status = "InProgress"
            job.processing_end_time = None
            job.processing_start_time = None
            submit("processing", backend, name)
            return job

        def create_training_job(backend: Any, *args: Any, **kwargs: Any) -> Any:
            name = kwargs["training_job_name"]
            if name in backend.training_jobs:
                raise ResourceInUseException(
                    message=f"Training job names must be unique within an AWS account and region, and a training job with this name already exists ({name})"
                )
            requested_metrics = list(kwargs["algorithm_specification"].get("MetricDefinitions", []))
            job = create_training(backend, *args, **kwargs)
            # moto replaces the metric definitions with a canned one: put ours back.
            job.algorithm_specification["MetricDefinitions"] = requested_metrics
            job.training_job_status = "InProgress"
            job.secondary_status = "Starting"
            job.training_start_time = None
            job.training_end_time = None
            job.final_metric_data_list = []
            job.secondary_status_transitions = []
            job.model_artifacts = None
            submit("training", backend, name)
            return job

        setattr(backend_class, "create_processing_job", create_processing_job)  # noqa: B010 - patching moto
        setattr(backend_class, "create_training_job", create_training_job)  # noqa: B010

    def uninstall(self) -> None:
        backend_class = sagemaker_models.SageMakerModelBackend
        for name, original in self._originals.items():
            setattr(backend_class, name, original)
        self._originals = {}


class ProcessingEnvironments:
    """CreateProcessingJob's ``Environment`` by job name: moto's FakeProcessingJob keeps
    none, and the job's container must get the variables SageMaker would set (the
    processing limits, the run id)."""

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def wrap(self, aws_app: Any) -> Any:
        """``aws_app`` (moto), reading CreateProcessingJob's Environment on the way in."""

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            if str(environ.get("HTTP_X_AMZ_TARGET", "")).endswith(".CreateProcessingJob"):
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = environ["wsgi.input"].read(length)
                environ["wsgi.input"] = io.BytesIO(body)
                self._remember(body)
            return aws_app(environ, start_response)

        return app

    def _remember(self, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return
        name, variables = request.get("ProcessingJobName"), request.get("Environment")
        if isinstance(name, str) and isinstance(variables, dict):
            with self._lock:
                self._by_job[name] = {str(key): str(value) for key, value in variables.items()}

    def of(self, name: str) -> dict[str, str]:
        """The Environment a processing job was created with (empty if none)."""
        with self._lock:
            return dict(self._by_job.get(name, {}))


def omit_empty_data_capture(account_id: str, region: str, endpoint_name: str) -> None:
    """DescribeEndpoint leaves DataCaptureConfig out when none is configured; moto answers
    ``{}``, which the SageMaker Python SDK rejects. (moto runs in this process.)"""
    endpoint = get_backend("sagemaker")[account_id][region].endpoints.get(endpoint_name)
    if endpoint is not None and not endpoint.data_capture_config:
        endpoint.data_capture_config = None  # type: ignore[assignment]
