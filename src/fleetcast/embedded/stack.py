"""The embedded local stack: AWS APIs from moto, wired from template.yaml, with the
SageMaker jobs really run and the functions really invoked.

Everything listens on 127.0.0.1 only. ``stack.json`` in the state folder tells clients
(``fleetcast env``, ``status``, the tests) where everything is.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from fleetcast.embedded import persistence
from fleetcast.embedded.aws_limits import AwsLimits
from fleetcast.embedded.context import ServiceContext
from fleetcast.embedded.costs import LOCAL_PARAMETERS, LocalCosts, local_function_environment
from fleetcast.embedded.events import EventDelivery
from fleetcast.embedded.gateway import Gateway, bind_preferred
from fleetcast.embedded.iam.local_iam import LocalIam
from fleetcast.embedded.info import (
    CREDENTIALS,
    DEFAULT_PORT,
    STATE_FILE,
    StackInfo,
    default_state_dir,
    repo_root,
)
from fleetcast.embedded.keeping import StateKeeping
from fleetcast.embedded.kept_frequency import check_kept_frequency
from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.lifecycle import LocalLifecycle
from fleetcast.embedded.malloc import limit_arenas
from fleetcast.embedded.parameters import LOCAL_IMAGE_PARAMETERS, validate
from fleetcast.embedded.queues import EventSourceMapping, QueueDelivery, event_source_mappings
from fleetcast.embedded.recovery import Recovery
from fleetcast.embedded.resources import create_resources
from fleetcast.embedded.sagemaker_jobs.runner import JobRunner
from fleetcast.embedded.serving import LocalServing, ServingOptions
from fleetcast.embedded.template import ACCOUNT_ID, REGION, LocalTemplate
from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.stages import PIPELINE

log = logging.getLogger("fleetcast.embedded")

# Worker processes of a function behind an API: requests arrive concurrently.
API_FUNCTION_CONCURRENCY = 4


class EmbeddedStack:
    """``port`` None: 4599, or any free port when another program has it; 0: any free port.
    ``keep_state``: restore the buckets, tables and jobs kept in the state folder, and
    keep them there as they change and at stop (:mod:`fleetcast.embedded.keeping`)."""

    def __init__(
        self,
        state_dir: Path | None = None,
        port: int | None = None,
        stack_name: str = "fleetcast",
        parameters: dict[str, str] | None = None,
        root: Path | None = None,
        function_concurrency: int = 1,
        serving: ServingOptions | None = None,
        keep_state: bool = False,
        iam: bool = True,
    ) -> None:
        self.root = root or repo_root()
        self.state_dir = state_dir or default_state_dir()
        self.template = LocalTemplate(
            self.root / "template.yaml",
            stack_name=stack_name,
            parameter_overrides={
                **LOCAL_PARAMETERS,
                **LOCAL_IMAGE_PARAMETERS,
                **(parameters or {}),
            },
        )
        # As CloudFormation would: a value a deploy refuses does not start a stack either.
        validate(self.template.body.get("Parameters", {}), self.template.parameter_overrides)
        self._port = port
        self._function_concurrency = function_concurrency
        self._serving_options = serving
        self.keeping = StateKeeping(
            self.state_dir,
            keep_state,
            ACCOUNT_ID,
            REGION,
            self.template.physical_name("UploadQueueTable")
            if "UploadQueueTable" in self.template.resources
            else "",
        )
        # IAM enforced (embedded/iam): off only for `fleetcast up --no-iam`.
        self.iam = LocalIam(self.template, iam, log_path=self.state_dir / "logs" / "iam.log")
        # What a user should be told at start: ports that were taken, what was restored.
        self.notices: list[str] = []
        self.gateway: Gateway | None = None
        self.runner: JobRunner | None = None
        self.delivery: EventDelivery | None = None
        self.queues: QueueDelivery | None = None  # SQS event sources (embedded/queues.py)
        self.functions: dict[str, LocalFunction] = {}
        self.info: StackInfo | None = None
        self.serving: LocalServing | None = None
        self.costs: LocalCosts | None = None
        self.lifecycle: LocalLifecycle | None = None
        self._clients: dict[str, Any] = {}
        self._clients_lock = threading.Lock()
        self._session: boto3.session.Session | None = None

    # -- lifecycle --------------------------------------------------------------------

    def __enter__(self) -> EmbeddedStack:
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def snapshot_path(self) -> Path:
        return self.keeping.snapshot_path

    def start(self) -> StackInfo:
        self.keeping.hold()
        limit_arenas()
        gateway, notice = bind_preferred(
            self._port, DEFAULT_PORT, lambda port: Gateway(port=port), "the AWS APIs"
        )
        self.notices += [notice] if notice else []
        self.gateway = gateway
        gateway.guard(self.iam.guard)
        gateway.start()
        try:
            self.runner = self._start_runner(gateway)
            kept = self.keeping.restore()
            if kept is not None:  # before anything is created, delivered or resumed
                check_kept_frequency(
                    persistence.sagemaker_backend(ACCOUNT_ID, REGION),
                    Frequency.parse(self.template.parameters["ModelFrequency"]),
                    str(self.state_dir),
                )
            create_resources(self.template, self.client, self.iam.create_roles)
            self.lifecycle = self._start_lifecycle()
            self.keeping.keep_run_numbers(self.client("dynamodb"))
            self.keeping.record_lost_runs(self.resource("dynamodb"), self._run_id_of)
            self.delivery = EventDelivery(self.client("sqs"), self.client("events"))
            # Read once: they set their functions' concurrency and feed their pollers.
            event_sources = event_source_mappings(self.template)
            warming = self._create_functions(event_sources)
            if kept is not None:  # before anything is delivered or resumed (recovery.py)
                self._redrive()
            self.delivery.start()
            # SQS event sources (embedded/queues.py)
            self.queues = QueueDelivery(
                self.client("sqs"),
                self.template,
                self.functions,
                event_sources,
                lambda function: self.client_as(self.iam.roles.of_function(function).arn, "sqs"),
            )
            self.queues.start()
            for kind, name in kept.unfinished if kept else ():
                self.runner.resume(kind, persistence.sagemaker_backend(ACCOUNT_ID, REGION), name)
            self.info = self._describe()
            context = self._service_context()
            self.serving = LocalServing(context, self._serving_options)
            self.info.extra.update(self.serving.start())
            self.costs = LocalCosts(context)
            self.info.extra.update(self.costs.start())
            for started in warming:
                started.result()
            self.keeping.run(
                gateway,
                frozenset({self.template.physical_name("RawBucket")})
                if "RawBucket" in self.template.resources
                else frozenset(),
            )
            self.info.save(self.state_dir / STATE_FILE)
        except BaseException:
            self.stop()
            raise
        finally:
            self.notices += self.keeping.notices
            self.keeping.notices.clear()
        return self.info

    def _start_runner(self, gateway: Gateway) -> JobRunner:
        """The local SageMaker jobs' runner, its hooks installed in the gateway's AWS."""
        put_object = functools.partial(gateway.put_object, ACCOUNT_ID)
        download_object = functools.partial(gateway.download_object, ACCOUNT_ID)
        runner = JobRunner(
            s3=self.client("s3"),
            events=self.client("events"),
            workdir=self.state_dir,
            containers_dir=self.root / "containers",
            put_object=put_object,
            download_object=download_object,
            transfer_for=functools.partial(
                self.iam.job_transfer,
                endpoint_url=self.endpoint_url,
                put_object=put_object,
                download_object=download_object,
            ),
        )
        runner.hooks.install()
        gateway.wrap_aws_app(runner.environments.wrap)
        gateway.wrap_aws_app(AwsLimits)  # what AWS refuses and moto does not
        return runner

    def _start_lifecycle(self) -> LocalLifecycle:
        """What the buckets' lifecycle rules expire goes, as on AWS (embedded/lifecycle.py)."""
        lifecycle = LocalLifecycle(
            self.client("s3"),
            [
                self.template.physical_name(b)
                for b in self.template.resources_of_type("AWS::S3::Bucket")
            ],
            lambda: datetime.now(UTC),
        )
        lifecycle.start()
        return lifecycle

    def _run_id_of(self, job_name: str) -> str | None:
        """The run of one of this stack's pipeline jobs (None for another job)."""
        prefix = self.template.parameters.get("JobNamePrefix", "fleetcast")
        return next(
            (run for stage in PIPELINE if (run := stage.run_id_of(prefix, job_name)) is not None),
            None,
        )

    def _redrive(self) -> None:
        assert self.runner is not None
        sagemaker = persistence.sagemaker_backend(ACCOUNT_ID, REGION)
        recovery = Recovery(self.template, self.client, self.resource, self.runner, sagemaker)
        if redriven := recovery.redrive():
            self.keeping.notices.append(redriven.describe())

    def stop(self) -> None:
        # Every poller's long poll ends within a second: let them end together.
        for pollers in (self.delivery, self.queues):
            if pollers:
                pollers.request_stop()
        if self.costs:
            self.costs.stop()
        if self.lifecycle:
            self.lifecycle.stop()
        if self.serving:
            self.serving.stop()
        if self.delivery:
            self.delivery.stop()
        if self.queues:  # SQS event sources (embedded/queues.py)
            self.queues.stop()
        for function in self.functions.values():
            function.close()
        if self.runner:
            self.runner.shutdown()
            self.runner.hooks.uninstall()
        self.keeping.save()
        if self.gateway:
            self.gateway.stop()
        state = self.state_dir / STATE_FILE
        if (
            state.is_file()
            and self.info
            and json.loads(state.read_text()).get("pid") == os.getpid()
        ):
            state.unlink()
        self.gateway = None
        self._clients.clear()
        self.keeping.release()
        self.notices += self.keeping.notices
        self.keeping.notices.clear()

    def _service_context(self) -> ServiceContext:
        assert self.gateway is not None, "the gateway starts first"
        return ServiceContext(
            template=self.template,
            root=self.root,
            state_dir=self.state_dir,
            endpoint_url=self.endpoint_url,
            client=self.client,
            client_as=self.client_as,
            add_route=self.gateway.add_route,
            functions=self.functions,
            notify=self.notices.append,
            ephemeral_ports=self._port == 0,
        )

    # -- clients ----------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        assert self.gateway is not None, "the local stack is not started"
        return self.gateway.url

    def client(self, service: str) -> Any:
        """A client of the stack's AWS APIs, made once per service (clients are thread-safe)."""
        with self._clients_lock:
            if service not in self._clients:
                self._clients[service] = self._shared_session().client(
                    service,
                    endpoint_url=self.endpoint_url,
                    config=Config(retries={"mode": "standard"}, max_pool_connections=32),
                )
            return self._clients[service]

    def client_as(self, role_arn: str, service: str) -> Any:
        """A client that calls as one of the template's roles."""
        return self.iam.client(role_arn, service, self.endpoint_url)

    def resource(self, service: str) -> Any:
        # A resource is not thread-safe: a new one each time, from the one session (a
        # session is not thread-safe either: made under the lock; a new session each time
        # loaded the service models again, about a tenth of a second).
        with self._clients_lock:
            return self._shared_session().resource(service, endpoint_url=self.endpoint_url)

    def _shared_session(self) -> boto3.session.Session:
        """The session the stack's clients and resources are made from (under the lock)."""
        if self._session is None:
            self._session = boto3.session.Session(
                aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                region_name=REGION,
            )
        return self._session

    def client_environment(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            **CREDENTIALS,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
        }

    def _create_functions(self, event_sources: list[EventSourceMapping]) -> list[Future[int]]:
        """Create the functions; their workers start while the rest of the stack does, and
        the futures returned say when each function has one ready."""
        assert self.delivery is not None
        sqs = self.client("sqs")
        default_dlq_url = sqs.create_queue(
            QueueName=f"{self.template.stack_name}-local-dead-letters"
        )["QueueUrl"]
        default_dlq = sqs.get_queue_attributes(
            QueueUrl=default_dlq_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        globals_ = self.template.body.get("Globals", {}).get("Function", {})
        batch_concurrency = {
            mapping.function_logical_id: mapping.maximum_concurrency for mapping in event_sources
        }
        for logical_id, resource in self.template.resources_of_type(
            "AWS::Serverless::Function"
        ).items():
            properties = resource["Properties"]
            code_dir = self.root / str(self.template.resolve(properties["CodeUri"]))
            environment = {
                **self.template.function_environment(logical_id),
                **self.client_environment(),
                **self.iam.function_credentials(logical_id),
                **local_function_environment(logical_id, self.state_dir),
                "AWS_LAMBDA_FUNCTION_NAME": self.template.physical_name(logical_id),
                "POWERTOOLS_TRACE_DISABLED": "true",
            }
            function = LocalFunction(
                name=self.template.physical_name(logical_id),
                code_dir=code_dir,
                handler=str(
                    properties.get("Handler", globals_.get("Handler", "app.lambda_handler"))
                ),
                environment=environment,
                log_path=self.state_dir / "logs" / f"{logical_id}.log",
                concurrency=self._concurrency(logical_id, properties, batch_concurrency),
                memory=int(properties.get("MemorySize", globals_.get("MemorySize", 512))),
                # Lambda's default when neither the function nor Globals sets one: 3 s.
                timeout=float(properties.get("Timeout", globals_.get("Timeout", 3))),
            )
            self.functions[logical_id] = function
            for event_name, event in properties.get("Events", {}).items():
                if event.get("Type") != "EventBridgeRule":
                    continue
                event_properties = self.template.resolve(event["Properties"])
                dead_letter = event_properties.get("DeadLetterConfig", {}).get("Arn", default_dlq)
                self.delivery.add_rule(
                    f"{self.template.stack_name}-{logical_id}-{event_name}"[:64],
                    event_properties["Pattern"],
                    function,
                    dead_letter,
                )
        return [function.warm_up() for function in self.functions.values()]

    def _concurrency(
        self,
        logical_id: str,
        properties: dict[str, Any],
        batch_concurrency: dict[str, int | None],
    ) -> int:
        """Warm workers for a function: the stack's default; an API's more (requests come
        in parallel); an SQS event source's its ``MaximumConcurrency``, up to the CPUs
        (Lambda runs batches side by side; here they share this machine)."""
        concurrency = self._function_concurrency
        if any(e.get("Type") == "Api" for e in properties.get("Events", {}).values()):
            concurrency = max(concurrency, API_FUNCTION_CONCURRENCY)
        batches = batch_concurrency.get(logical_id)
        if batches:
            concurrency = max(concurrency, min(batches, os.cpu_count() or 1))
        return concurrency

    def _describe(self) -> StackInfo:
        def resource_named(logical_id: str) -> str:
            return (
                self.template.physical_name(logical_id)
                if logical_id in self.template.resources
                else ""
            )

        return StackInfo(
            endpoint_url=self.endpoint_url,
            stack_name=self.template.stack_name,
            raw_bucket=resource_named("RawBucket"),
            artifacts_bucket=resource_named("ArtifactsBucket"),
            registry_table=resource_named("ModelRegistryTable"),
            upload_queue_table=resource_named("UploadQueueTable"),
            job_name_prefix=self.template.parameters.get("JobNamePrefix", "fleetcast"),
            state_dir=str(self.state_dir),
        )
