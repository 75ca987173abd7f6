"""A SageMaker multi-model endpoint on the local stack: what SageMaker's hosting platform
does in front of a multi-model container, in front of the real inference container.

moto records CreateModel / CreateEndpointConfig / CreateEndpoint, but answers
InvokeEndpoint with canned bodies. Here the SageMaker runtime's InvokeEndpoint
(``POST /endpoints/{EndpointName}/invocations``) reaches a :class:`LocalEndpoint`, which,
as the platform does on an instance:

- on the first use of a TargetModel, downloads ``<ModelDataUrl><TargetModel>`` from S3
  and unpacks it into a bounded disk cache (the cold start), then asks the container to
  load it (``POST /models``);
- when the container answers 507, unloads the least recently used models and loads again;
- invokes ``POST /models/{name}/invoke``, and loads again when the container no longer
  holds the model (404: it was restarted, or the model unloaded meanwhile);
- answers with the errors a real endpoint gives: ``ValidationError`` for an unknown
  endpoint, a missing TargetModel header or a TargetModel not in S3, ``ModelError`` (424,
  with the container's status and message) for a container error, ``ServiceUnavailable``
  while the container is down. A container that dies is started again, as SageMaker
  replaces a failed instance.

Laid out like a moto service: ``exceptions`` (the AWS error codes), ``container`` (the
container process), ``model_cache`` (the instance's disk), ``models`` (the endpoint) and
``responses`` (the WSGI side, :class:`EndpointRuntime`).
"""

from fleetcast.embedded.endpoint.container import ContainerAnswer, InferenceContainer
from fleetcast.embedded.endpoint.exceptions import (
    ContainerUnavailableError,
    ModelError,
    ModelNotReadyException,
    RuntimeServiceError,
    ServiceUnavailable,
    ValidationError,
)
from fleetcast.embedded.endpoint.model_cache import ModelDiskCache
from fleetcast.embedded.endpoint.models import EndpointStats, LocalEndpoint
from fleetcast.embedded.endpoint.responses import EndpointRuntime

__all__ = [
    "ContainerAnswer",
    "ContainerUnavailableError",
    "EndpointRuntime",
    "EndpointStats",
    "InferenceContainer",
    "LocalEndpoint",
    "ModelDiskCache",
    "ModelError",
    "ModelNotReadyException",
    "RuntimeServiceError",
    "ServiceUnavailable",
    "ValidationError",
]
