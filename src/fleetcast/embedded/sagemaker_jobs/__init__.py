"""Really running the SageMaker jobs that moto only records, one module per part:
``runner`` (the moto hooks and both job kinds), ``training`` (a training instance's
contract), ``checkpoints``, ``transfer`` (S3 in and out) and ``containers`` (a job's
container as a local process)."""

from fleetcast.embedded.sagemaker_jobs.containers import image_entrypoint, local_command
from fleetcast.embedded.sagemaker_jobs.runner import JobRunner
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, shard, split_s3_uri, under_root

__all__ = [
    "JobRunner",
    "S3Transfer",
    "image_entrypoint",
    "local_command",
    "shard",
    "split_s3_uri",
    "under_root",
]
