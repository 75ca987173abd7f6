"""The pipeline's SageMaker stages, in order, named once.

An upload's run goes through these jobs, each started by the previous one's
"Completed" event (EventBridge rules in template.yaml, checked against this table by
tests/unit/test_template.py): processing validates the upload and merges it into the
customers' histories, handing training the run's manifest of customers to train;
training fits a model per customer, handing registration (a Lambda, not a job) the
model archives and the manifests of the chunks it finished. Everything that names a
stage (job names, their run ids, event detail types, the fields SageMaker's
descriptions and events use) derives from :data:`PIPELINE`.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetcast_contracts.ids import is_valid_run_id


@dataclass(frozen=True)
class Stage:
    """One SageMaker job of a run."""

    name: str
    # The letter that tells its jobs apart: ``{prefix}-{kind}-{run_id}``.
    kind: str
    # SageMaker's word for the job type, which names its API fields and events.
    job_type: str
    # What its output is to the stage after it.
    hands_on: str
    # Where its description (DescribeProcessingJob, DescribeTrainingJob) keeps the
    # instance count: the nested keys, the count's own last.
    instance_count_path: tuple[str, ...]

    @property
    def detail_type(self) -> str:
        """The EventBridge detail type of its job state changes."""
        return f"SageMaker {self.job_type} Job State Change"

    @property
    def name_field(self) -> str:
        return f"{self.job_type}JobName"

    @property
    def status_field(self) -> str:
        return f"{self.job_type}JobStatus"

    @property
    def describe_operation(self) -> str:
        """boto3's method that describes one of its jobs: ``describe_training_job``."""
        return f"describe_{self.job_type.lower()}_job"

    @property
    def start_time_field(self) -> str:
        return f"{self.job_type}StartTime"

    @property
    def end_time_field(self) -> str:
        return f"{self.job_type}EndTime"

    def job_name_prefix(self, prefix: str) -> str:
        """What each of its job names starts with (the rules match on it)."""
        return f"{prefix}-{self.kind}-"

    def job_name(self, prefix: str, run_id: str) -> str:
        return self.job_name_prefix(prefix) + run_id

    def run_id_of(self, prefix: str, job_name: str) -> str | None:
        """The run id inside one of this stage's job names; None for any other name."""
        head = self.job_name_prefix(prefix)
        if job_name.startswith(head) and is_valid_run_id(job_name[len(head) :]):
            return job_name[len(head) :]
        return None


PROCESSING = Stage(
    "processing",
    kind="p",
    job_type="Processing",
    hands_on="the run's histories and its manifest of customers to train",
    instance_count_path=("ProcessingResources", "ClusterConfig", "InstanceCount"),
)
TRAINING = Stage(
    "training",
    kind="t",
    job_type="Training",
    hands_on="model archives and the manifests of the chunks it finished, for registration",
    instance_count_path=("ResourceConfig", "InstanceCount"),
)
PIPELINE = (PROCESSING, TRAINING)
