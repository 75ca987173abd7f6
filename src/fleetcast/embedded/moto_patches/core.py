"""moto's record of every model object it ever made, kept for fewer classes. Written for
moto 5.2.5 (see :mod:`fleetcast.embedded.moto_patches`).

moto appends every instance of its models to a list on the model's class
(``BaseModel.__new__``: ``instances_tracked``), for its dashboard (``GET
/moto-api/data.json``) and for disposing of S3 keys at a reset, and nothing leaves those
lists before a reset. So every S3 object the stack ever wrote (a training job's
checkpoints and progress files, written again and again; each run's shards) and every
DynamoDB item ever made (each registry record rewritten, each copy a transaction makes of
the items it may have to roll back) stayed in the stack's memory as long as it ran, long
after moto had replaced or deleted it: 2,500 writes of S3 objects, 10 of them still
there, held 11 MB of moto's objects against 1.6 MB untracked.

The stack reads SES's tracked messages from the dashboard (the cost e-mail's outbox) and
never another service's there. S3's keys and DynamoDB's items are no longer tracked: moto
disposes of a replaced or deleted key itself (its file goes then), and a model object
nothing else holds is freed. A reset still disposes of every key its buckets hold.
"""

from __future__ import annotations

from typing import Any

from moto.core.common_models import BaseModel
from moto.dynamodb.models.dynamo_type import Item
from moto.s3.models import FakeKey

# Model classes (and their subclasses) whose instances moto does not keep a list of.
UNTRACKED: tuple[type, ...] = (FakeKey, Item)


def _new_tracking_fewer(cls: type, *args: Any, **kwargs: Any) -> Any:
    """moto's ``BaseModel.__new__``, leaving :data:`UNTRACKED` instances out of its lists."""
    instance: Any = object.__new__(cls)
    if not issubclass(cls, UNTRACKED):
        cls.instances_tracked.append(instance)  # type: ignore[attr-defined]
    return instance


def fewer_models_tracked() -> None:
    """Install :func:`_new_tracking_fewer` in moto (idempotent)."""
    BaseModel.__new__ = staticmethod(_new_tracking_fewer)  # type: ignore[method-assign]
