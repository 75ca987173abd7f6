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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from fleetcast.embedded import persistence
from fleetcast.embedded.context import ServiceContext
from fleetcast.embedded.costs import LOCAL_PARAMETERS, LocalCosts, local_function_environment
from fleetcast.embedded.events import EventDelivery
from fleetcast.embedded.gateway import Gateway, bind_preferred
from fleetcast.embedded.iam import LocalIam
from fleetcast.embedded.lambdas import LocalFunction
from fleetcast.embedded.malloc import limit_arenas
from fleetcast.embedded.queues import EventSourceMapping, QueueDelivery, event_source_mappings
from fleetcast.embedded.sagemaker_jobs import JobRunner
from fleetcast.embedded.serving import LocalServing, ServingOptions
from fleetcast.embedded.template import ACCOUNT_ID, REGION, LocalTemplate

log = logging.getLogger("fleetcast.embedded")

DEFAULT_PORT = 4599
# Worker processes of a function behind an API: requests arrive concurrently.
API_FUNCTION_CONCURRENCY = 4
STATE_FILE = "stack.json"
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


def repo_root() -> Path:
    """The checkout that holds template.yaml (the local stack runs from the source tree)."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "template.yaml").is_file() and (parent / "functions").is_dir():
            return parent
    return Path.cwd()


def default_state_dir() -> Path:
    return Path(os.environ.get("FLEETCAST_HOME", repo_root() / ".fleetcast"))


@dataclass
class StackInfo:
    """Where a running local stack is, as clients need to know it."""

    endpoint_url: str
    stack_name: str
    raw_bucket: str
    artifacts_bucket: str
    registry_table: str
    job_name_prefix: str
    state_dir: str
    upload_queue_table: str = ""
    region: str = REGION
    account_id: str = ACCOUNT_ID
    pid: int = field(default_factory=os.getpid)
    extra: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        """What a standard client (boto3, the AWS CLI) needs to talk to this stack."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            **CREDENTIALS,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "FLEETCAST_RAW_BUCKET": self.raw_bucket,
            "FLEETCAST_ARTIFACTS_BUCKET": self.artifacts_bucket,
            "FLEETCAST_REGISTRY_TABLE": self.registry_table,
            "FLEETCAST_JOB_NAME_PREFIX": self.job_name_prefix,
            "FLEETCAST_UPLOAD_QUEUE_TABLE": self.upload_queue_table,
            **self.extra,
        }

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, state_dir: Path | None = None) -> StackInfo:
        path = (state_dir or default_state_dir()) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"no local stack is running (no {path}); start one with `fleetcast up`"
            )
        info = cls(**json.loads(path.read_text()))
        if not _alive(info.pid):
            raise FileNotFoundError(
                f"the local stack recorded in {path} (pid {info.pid}) is not running; start one with `fleetcast up`"
            )
        return info


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class EmbeddedStack:
    """``port`` None: 4599, or any free port when another program has it; 0: any free port.
    ``keep_state``: restore the buckets, tables and jobs of the last stop from the state
    folder, and save them at stop (:mod:`fleetcast.embedded.persistence`)."""

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
            parameter_overrides={**LOCAL_PARAMETERS, **(parameters or {})},
        )
        self._port = port
        self._function_concurrency = function_concurrency
        self._serving_options = serving
        self._keep_state = keep_state
        # IAM enforced (embedded/iam): off only for `fleetcast up --no-iam`.
        self.iam = LocalIam(self.template, iam, log_path=self.state_dir / "logs" / "iam.log")
        # True once moto holds this stack's state (restored or new): only then is it saved.
        self._state_loaded = False
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
        return self.state_dir / persistence.SNAPSHOT_FILE

    def start(self) -> StackInfo:
        self._refuse_a_second_stack_here()
        limit_arenas()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        gateway, notice = bind_preferred(
            self._port, DEFAULT_PORT, lambda port: Gateway(port=port), "the AWS APIs"
        )
        self.notices += [notice] if notice else []
        self.gateway = gateway
        gateway.guard(self.iam.guard)
        gateway.start()
        try:
            self.runner = JobRunner(
                s3=self.client("s3"),
                events=self.client("events"),
                workdir=self.state_dir,
                containers_dir=self.root / "containers",
                put_object=functools.partial(gateway.put_object, ACCOUNT_ID),
                download_object=functools.partial(gateway.download_object, ACCOUNT_ID),
                transfer_for=functools.partial(
                    self.iam.job_transfer,
                    endpoint_url=self.endpoint_url,
                    put_object=functools.partial(gateway.put_object, ACCOUNT_ID),
                    download_object=functools.partial(gateway.download_object, ACCOUNT_ID),
                ),
            )
            self.runner.install()
            self.gateway.wrap_aws_app(self.runner.keep_processing_environments)
            kept = self._restore_state()
            self._create_resources()
            self.delivery = EventDelivery(self.client("sqs"), self.client("events"))
            # Read once: they set their functions' concurrency and feed their pollers.
            event_sources = event_source_mappings(self.template)
            warming = self._create_functions(event_sources)
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
            self.info.save(self.state_dir / STATE_FILE)
        except BaseException:
            self.stop()
            raise
        return self.info

    def stop(self) -> None:
        # Every poller's long poll ends within a second: let them end together.
        for pollers in (self.delivery, self.queues):
            if pollers:
                pollers.request_stop()
        if self.costs:
            self.costs.stop()
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
            self.runner.uninstall()
        if self._keep_state and self._state_loaded:
            kept = persistence.save(self.snapshot_path, ACCOUNT_ID, REGION)
            log.info("kept in %s: %s", self.snapshot_path, kept.describe())
            self.notices.append(f"kept in {self.snapshot_path}: {kept.describe()}")
            self._state_loaded = False
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

    def _refuse_a_second_stack_here(self) -> None:
        try:
            running = StackInfo.load(self.state_dir)
        except FileNotFoundError:
            return
        if running.pid != os.getpid():
            raise RuntimeError(
                f"a local stack (pid {running.pid}) already runs from {self.state_dir}: "
                "stop it, or give this one a folder of its own (--state-dir)"
            )

    def _restore_state(self) -> persistence.KeptState | None:
        if not self._keep_state:
            self.notices.append(
                "nothing is kept: buckets, tables and jobs end when this stack stops"
            )
            return None
        try:
            kept = persistence.restore(self.snapshot_path, ACCOUNT_ID, REGION)
        except persistence.SnapshotUnreadableError as error:
            aside = persistence.set_aside(self.snapshot_path)
            self.notices.append(f"{error}; starting empty, the file is kept as {aside}")
            kept = None
        self._state_loaded = True
        self.notices.append(
            f"restored from {self.snapshot_path}: {kept.describe()}"
            if kept
            else f"a new stack; its buckets, tables and jobs are kept in {self.snapshot_path} at stop"
        )
        return kept

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

    # -- resources from template.yaml -------------------------------------------------

    def _properties(self, logical_id: str) -> dict[str, Any]:
        properties: dict[str, Any] = self.template.resolve(
            self.template.resources[logical_id].get("Properties", {})
        )
        return properties

    def _create_resources(self) -> None:
        """The template's roles, queues, buckets, tables and Glue catalog, one type each.

        Why not samtranslator's translation created through moto's CloudFormation (tried
        on 2026-12-01, moto 5.2.5): of the 71 translated resources moto's CloudFormation
        does not implement AWS::Glue::Database and ::Table, AWS::CloudWatch::Alarm and the
        S3, SQS and SNS policies, and ``create_stack`` fails outright at the first
        ``Fn::GetAtt`` of one (FailedJobsAlarm). A stack would also have to be created
        afresh, where buckets and tables restored from the last stop are kept here.
        Removing the unsupported resources and their references first would be more code
        than this, not less.
        """
        s3, dynamodb, sqs, iam = (self.client(s) for s in ("s3", "dynamodb", "sqs", "iam"))
        self.iam.create_roles(iam, self.client("sts"))  # SAM's roles too, as it makes them
        for logical_id in self.template.resources_of_type("AWS::SQS::Queue"):
            sqs.create_queue(QueueName=self.template.physical_name(logical_id))
        # Buckets and tables restored from the last stop are there already.
        buckets = {bucket["Name"] for bucket in s3.list_buckets()["Buckets"]}
        tables = set(dynamodb.list_tables()["TableNames"])
        for logical_id in self.template.resources_of_type("AWS::S3::Bucket"):
            if self.template.physical_name(logical_id) in buckets:
                continue
            self._create_bucket(
                s3, self.template.physical_name(logical_id), self._properties(logical_id)
            )
        for logical_id in self.template.resources_of_type("AWS::DynamoDB::Table"):
            if self.template.physical_name(logical_id) in tables:
                continue
            properties = self._properties(logical_id)
            request: dict[str, Any] = {
                "TableName": self.template.physical_name(logical_id),
                "KeySchema": properties["KeySchema"],
                "AttributeDefinitions": properties["AttributeDefinitions"],
                "BillingMode": properties.get("BillingMode", "PAY_PER_REQUEST"),
            }
            if "GlobalSecondaryIndexes" in properties:
                request["GlobalSecondaryIndexes"] = properties["GlobalSecondaryIndexes"]
            dynamodb.create_table(**request)
        self._create_glue_catalog()

    def _create_glue_catalog(self) -> None:
        """The template's Glue databases and tables (the run exports' catalog), so the
        CLI and tests see what Athena would; those restored from the last stop stay."""
        glue = self.client("glue")
        databases = {d["Name"] for d in glue.get_databases()["DatabaseList"]}
        for logical_id in self.template.resources_of_type("AWS::Glue::Database"):
            database_input = self._properties(logical_id)["DatabaseInput"]
            if database_input["Name"] not in databases:
                glue.create_database(DatabaseInput=database_input)
        for logical_id in self.template.resources_of_type("AWS::Glue::Table"):
            properties = self._properties(logical_id)
            database, table_input = properties["DatabaseName"], properties["TableInput"]
            existing = {t["Name"] for t in glue.get_tables(DatabaseName=database)["TableList"]}
            if table_input["Name"] not in existing:
                glue.create_table(DatabaseName=database, TableInput=table_input)

    @staticmethod
    def _create_bucket(s3: Any, name: str, properties: dict[str, Any]) -> None:
        s3.create_bucket(Bucket=name)
        if properties.get("VersioningConfiguration", {}).get("Status") == "Enabled":
            s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
        if "PublicAccessBlockConfiguration" in properties:
            s3.put_public_access_block(
                Bucket=name,
                PublicAccessBlockConfiguration=properties["PublicAccessBlockConfiguration"],
            )
        if "BucketEncryption" in properties:
            # CloudFormation's property names differ from the API's here.
            rules = [
                {
                    "ApplyServerSideEncryptionByDefault": rule["ServerSideEncryptionByDefault"],
                    **(
                        {"BucketKeyEnabled": rule["BucketKeyEnabled"]}
                        if "BucketKeyEnabled" in rule
                        else {}
                    ),
                }
                for rule in properties["BucketEncryption"]["ServerSideEncryptionConfiguration"]
                if "ServerSideEncryptionByDefault" in rule
            ]
            if rules:
                s3.put_bucket_encryption(
                    Bucket=name, ServerSideEncryptionConfiguration={"Rules": rules}
                )
        notifications = properties.get("NotificationConfiguration", {})
        if (
            str(
                notifications.get("EventBridgeConfiguration", {}).get("EventBridgeEnabled", "false")
            ).lower()
            == "true"
        ):
            s3.put_bucket_notification_configuration(
                Bucket=name, NotificationConfiguration={"EventBridgeConfiguration": {}}
            )

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
