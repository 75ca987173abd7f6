"""Serving on the local stack, from template.yaml: each ``AWS::SageMaker::Endpoint`` runs
the real inference container behind the local SageMaker runtime
(:mod:`fleetcast.embedded.endpoint`), and each ``AWS::Serverless::Api`` is served on
127.0.0.1 in front of its functions (:mod:`fleetcast.embedded.api`).

The endpoints' Model, EndpointConfig and Endpoint are created in moto too, so
``describe_endpoint`` and friends answer as they would on AWS.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetcast.embedded.api import LocalRestApi
from fleetcast.embedded.endpoint import (
    EndpointRuntime,
    InferenceContainer,
    LocalEndpoint,
    ModelDiskCache,
)
from fleetcast.embedded.moto_patches.sagemaker import omit_empty_data_capture
from fleetcast.embedded.sagemaker_jobs.containers import (
    image_entrypoint,
    image_environment,
    local_command,
)
from fleetcast.embedded.sagemaker_jobs.transfer import split_s3_uri
from fleetcast.embedded.template import ACCOUNT_ID, REGION

if TYPE_CHECKING:
    from fleetcast.embedded.context import ServiceContext

log = logging.getLogger("fleetcast.embedded.serving")

# SageMaker starts a hosting container with this argument.
SERVE_COMMAND = "serve"


@dataclass(frozen=True)
class ServingOptions:
    """How the local stack serves. ``api_port`` None: 3000 (any free port when that is
    taken), or any free port when the stack's AWS gateway itself is on an ephemeral port
    (tests, ``fleetcast demo``)."""

    api_port: int | None = None
    # The container's FLEETCAST_MEMORY_BUDGET_MB; 256 MiB holds ~10,000 daily models.
    memory_budget_mb: float = 256.0
    disk_cache_mb: float = 2048.0
    # SageMaker takes minutes to replace a failed instance; a second is enough to see it.
    restart_delay_seconds: float = 1.0


class LocalServing:
    def __init__(self, context: ServiceContext, options: ServingOptions | None = None) -> None:
        self._context = context
        self.options = options or ServingOptions()
        self.runtime: EndpointRuntime | None = None
        self.endpoints: dict[str, LocalEndpoint] = {}
        self.apis: dict[str, LocalRestApi] = {}

    def start(self) -> dict[str, str]:
        """Start serving; return the extra ``fleetcast env`` variables."""
        context = self._context
        template = context.template
        exported: dict[str, str] = {}
        self.runtime = EndpointRuntime(context.client("sagemaker"), ACCOUNT_ID, REGION)
        for logical_id in template.resources_of_type("AWS::SageMaker::Endpoint"):
            endpoint = self._deploy(logical_id)
            self.endpoints[logical_id] = endpoint
            self.runtime.add(endpoint)
            exported.setdefault("FLEETCAST_ENDPOINT_NAME", endpoint.name)
        context.add_route(self.runtime.matches, self.runtime)

        apigateway = context.client("apigateway")
        for logical_id in template.resources_of_type("AWS::Serverless::Api"):
            api, key = LocalRestApi.from_template(
                template, logical_id, context.functions, apigateway, self._api_port()
            )
            api.start()
            if api.port_notice:
                context.notify(api.port_notice)
            self.apis[logical_id] = api
            log.info("API %s on %s", api.name, api.url)
            exported.setdefault("FLEETCAST_API_URL", api.url)
            if key:
                exported.setdefault("FLEETCAST_API_KEY", key)
        return exported

    def stop(self) -> None:
        for api in self.apis.values():
            api.stop()
        for endpoint in self.endpoints.values():
            endpoint.container.stop()
        self.apis.clear()
        self.endpoints.clear()

    def endpoint(self, name: str | None = None) -> LocalEndpoint:
        """The endpoint named ``name``, or the only one."""
        if name is None and len(self.endpoints) == 1:
            return next(iter(self.endpoints.values()))
        for endpoint in self.endpoints.values():
            if endpoint.name == name:
                return endpoint
        raise KeyError(f"no local endpoint {name!r}")

    def _api_port(self) -> int | None:
        if self.options.api_port is not None:
            return self.options.api_port
        return 0 if self._context.ephemeral_ports else None

    def _deploy(self, endpoint_id: str) -> LocalEndpoint:
        """Create the endpoint's resources in moto and start its container."""
        context = self._context
        template = context.template
        sagemaker = context.client("sagemaker")
        endpoint = self._properties(endpoint_id)
        config_id = self._logical_id(
            "AWS::SageMaker::EndpointConfig", endpoint["EndpointConfigName"]
        )
        config = self._properties(config_id)
        (variant,) = config["ProductionVariants"]  # one variant is all the template has
        model_id = self._logical_id("AWS::SageMaker::Model", variant["ModelName"])
        model = self._properties(model_id)
        container = model["PrimaryContainer"]
        if container.get("Mode") != "MultiModel":
            raise ValueError(f"{model_id}: the local stack serves multi-model endpoints only")

        sagemaker.create_model(
            ModelName=template.physical_name(model_id),
            ExecutionRoleArn=model["ExecutionRoleArn"],
            PrimaryContainer=container,
            EnableNetworkIsolation=str(model.get("EnableNetworkIsolation", False)).lower()
            == "true",
        )
        sagemaker.create_endpoint_config(
            EndpointConfigName=template.physical_name(config_id),
            ProductionVariants=[_variant(variant)],
        )
        name = template.physical_name(endpoint_id)

        home = context.state_dir / "endpoints" / name
        shutil.rmtree(home, ignore_errors=True)
        containers = context.root / "containers"
        command = local_command([*image_entrypoint(container["Image"], containers), SERVE_COMMAND])
        process = InferenceContainer(
            command=command,
            environment=image_environment(container["Image"], containers),
            opt_ml=home / "opt_ml",
            log_path=context.state_dir / "logs" / f"{endpoint_id}.log",
            memory_budget_mb=self.options.memory_budget_mb,
            restart_delay=self.options.restart_delay_seconds,
        )
        bucket, prefix = split_s3_uri(container["ModelDataUrl"])
        cache = ModelDiskCache(
            process.models_root,
            int(self.options.disk_cache_mb * 1024 * 1024),
            # SageMaker fetches the models with the model's execution role.
            context.client_as(model["ExecutionRoleArn"], "s3"),
            bucket,
            prefix,
        )
        local = LocalEndpoint(name, process, cache, str(variant["VariantName"]), ACCOUNT_ID, REGION)
        process.on_restart = local.forget_loaded
        process.start()
        # InService once the container answers /ping, as SageMaker reports it.
        sagemaker.create_endpoint(
            EndpointName=name, EndpointConfigName=template.physical_name(config_id)
        )
        omit_empty_data_capture(ACCOUNT_ID, REGION, name)
        log.info("endpoint %s: container pid %s on port %d", name, process.pid, process.port)
        return local

    def _properties(self, logical_id: str) -> dict[str, Any]:
        template = self._context.template
        resolved: dict[str, Any] = template.resolve(template.resources[logical_id]["Properties"])
        return resolved

    def _logical_id(self, resource_type: str, physical_name: str) -> str:
        template = self._context.template
        for logical_id in template.resources_of_type(resource_type):
            if template.physical_name(logical_id) == physical_name:
                return logical_id
        raise KeyError(f"template.yaml has no {resource_type} named {physical_name!r}")


def _variant(variant: dict[str, Any]) -> dict[str, Any]:
    """CloudFormation's (string) parameter values as the API's types."""
    converted = dict(variant)
    if "InitialInstanceCount" in converted:
        converted["InitialInstanceCount"] = int(converted["InitialInstanceCount"])
    if "InitialVariantWeight" in converted:
        converted["InitialVariantWeight"] = float(converted["InitialVariantWeight"])
    return converted
