"""Every change the local stack makes to moto's own behaviour, by service, and the moto
version they were written for.

moto answers the local stack's AWS APIs. Where moto departs from AWS in a way the
pipeline would notice, or is too slow at a fleet's size, the stack changes moto in its
own process; each such change is here, one module per service, so that an upgrade of
moto is one audit of this package:

- :mod:`.dynamodb`: a Query reads its one partition; a transaction backs up only the
  partitions it writes; a new item's size is summed once, not once per attribute, its
  attribute names are shared with every other item's and its long texts with a recent
  item's equal ones; a condition expression is parsed once for its names and values,
  not on every write; writes run one at a time (atomic, as DynamoDB's are), and the
  stack's own observers are told of each UpdateItem (the run counter's record).
- :mod:`.core`: moto keeps no list of every S3 key and DynamoDB item it ever made.
- :mod:`.s3`: objects' bytes live in files, not in the stack's memory.
- :mod:`.sagemaker`: a created job is run (InProgress until the job runner ends it), job
  names are unique, a training job keeps its metric definitions and a processing job its
  Environment; an endpoint without data capture describes none.
- :mod:`.server`: moto's dispatcher remembers which backend serves each host name.

:data:`MOTO_VERSION` is the moto every patch was read against. :func:`check_moto_version`
says when the installed moto is another: the stack logs it at start, and a unit test
fails on it, so a moto upgrade lands only with this package audited and the version
moved. (Code that reads moto's models without changing them, such as the snapshot's
pickling in :mod:`fleetcast.embedded.persistence`, names moto's classes where it uses
them; the same audit covers it by a search for ``moto.``.)
"""

from __future__ import annotations

import importlib.metadata
import logging

from fleetcast.embedded.moto_patches import core, dynamodb, s3

log = logging.getLogger("fleetcast.embedded.moto_patches")

# requirements/lock.txt pins this moto; each patch here was read against its source.
MOTO_VERSION = "5.2.5"


def check_moto_version() -> str | None:
    """None when the installed moto is :data:`MOTO_VERSION`; else what to do about it."""
    installed = importlib.metadata.version("moto")
    if installed == MOTO_VERSION:
        return None
    return (
        f"moto {installed} is installed, and the local stack's patches of moto "
        f"(fleetcast.embedded.moto_patches) were written for moto {MOTO_VERSION}: "
        "audit each against the new moto, then move MOTO_VERSION"
    )


def install() -> None:
    """The process-wide patches, for a stack's gateway (idempotent): DynamoDB's and S3's.
    SageMaker's belong to a job runner (:class:`.sagemaker.JobHooks`)."""
    mismatch = check_moto_version()
    if mismatch:
        log.warning(mismatch)
    core.fewer_models_tracked()
    dynamodb.query_partitions_only()
    dynamodb.transactions_back_up_partitions()
    dynamodb.items_sized_once()
    dynamodb.conditions_parsed_once()
    dynamodb.dynamodb_writes_one_at_a_time()
    s3.keep_objects_in_files()
    s3.delete_markers_copied_alone()
