"""Really running the SageMaker jobs that moto only records.

moto's SageMaker control plane stores CreateProcessingJob / CreateTrainingJob requests and
marks them Completed at once. The local stack hooks those two calls
(:mod:`fleetcast.embedded.moto_patches.sagemaker`): the job is set InProgress, and a
runner executes the job's container entrypoint under the SageMaker container contract (an
``/opt/ml`` tree per instance, inputs downloaded from S3, ``ShardedByS3Key`` shares,
checkpoints synced both ways, outputs uploaded), updates the job as
DescribeProcessingJob/DescribeTrainingJob report it, and publishes the documented
"SageMaker ... Job State Change" events so the chain goes on by itself.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fleetcast.embedded.moto_patches.sagemaker import JobHooks, ProcessingEnvironments
from fleetcast.embedded.sagemaker_jobs import training
from fleetcast.embedded.sagemaker_jobs.checkpoints import CheckpointSync, checkpoint_dir
from fleetcast.embedded.sagemaker_jobs.containers import (
    FAILURE_REASON_LIMIT,
    hold_instance,
    image_entrypoint,
    image_environment,
    kill_instance,
    killed_reason,
    local_command,
    log_tail,
    read_limited,
)
from fleetcast.embedded.sagemaker_jobs.training import now
from fleetcast.embedded.sagemaker_jobs.transfer import S3Transfer, split_s3_uri, under_root
from fleetcast_contracts import opt_ml
from fleetcast_contracts import processing as processing_contract
from fleetcast_contracts import training as training_contract
from fleetcast_contracts.layout import MODEL_ARCHIVE_SUFFIX
from fleetcast_contracts.stages import PROCESSING, TRAINING

log = logging.getLogger("fleetcast.embedded.jobs")

# Both containers read their /opt/ml root from the same variable.
OPT_ML_ENV = opt_ml.OPT_ML_ENV


def _epoch_ms(value: Any) -> Any:
    return int(value.timestamp() * 1000) if isinstance(value, datetime) else value


def _jsonable(value: Any, as_string: bool) -> Any:
    if isinstance(value, datetime):
        millis = _epoch_ms(value)
        return str(millis) if as_string else millis
    if isinstance(value, dict):
        return {k: _jsonable(v, as_string) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v, as_string) for v in value]
    return value


@dataclass
class RunningJob:
    kind: str  # "processing" | "training"
    name: str
    future: Future[None] | None = None
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # Each instance's local checkpoint folder (training jobs with a CheckpointConfig).
    checkpoints: list[Path] = field(default_factory=list)
    interrupted: threading.Event = field(default_factory=threading.Event)
    # Spot interruptions the job restarted from (training jobs).
    interruptions: int = 0


# SageMaker's FailureReason for a processing container that exits non-zero: its own
# words, whatever the container said; the container's message is the job's ExitMessage.
PROCESSING_ALGORITHM_ERROR = "AlgorithmError: See job logs for more information"


def processing_failure(message: str | None, tail: str | None) -> tuple[str | None, str]:
    """(ExitMessage, FailureReason) of a processing job whose container exited non-zero,
    as SageMaker reports them: the message file's first KB is the ExitMessage (none when
    the container wrote none), and the FailureReason is SageMaker's generic text. The
    log's tail goes to the stack's log instead, where a reader of the job's logs finds it.
    """
    if not message and tail:
        log.info("processing container wrote no message; its log ends: %s", tail)
    return message or None, PROCESSING_ALGORITHM_ERROR


class JobRunner:
    """Executes the jobs that the hooked moto backend records."""

    def __init__(
        self,
        s3: Any,
        events: Any,
        workdir: Path,
        containers_dir: Path,
        cpus: int | None = None,
        put_object: Callable[[str, str, bytes], None] | None = None,
        download_object: Callable[[str, str, Path], None] | None = None,
        transfer_for: Callable[[str], S3Transfer] | None = None,
    ) -> None:
        # ``put_object``: small objects written in process, not as requests; likewise
        # ``download_object`` for the jobs' inputs (S3Transfer).
        self._transfer = S3Transfer(s3, put_object, download_object)
        # A job's copies by its execution role (RoleArn), as SageMaker makes them.
        self._transfer_for = transfer_for
        self._events = events
        self._workdir = workdir
        self._containers_dir = containers_dir
        self._cpus = cpus or max(1, len(os.sched_getaffinity(0)))
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="sagemaker-job")
        self._jobs: dict[str, RunningJob] = {}
        self._lock = threading.Lock()
        # Installed in moto by the stack: each job moto stores is submitted here.
        self.hooks = JobHooks(self.submit)
        self.environments = ProcessingEnvironments()
        # Set by shutdown: a job whose instances stop then stays InProgress, to run again
        # at the next start (see persistence.py), rather than failing for the stack's sake.
        self._stopping = threading.Event()

    def shutdown(self) -> None:
        self._stopping.set()
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            for process in job.processes:
                if process.poll() is None:
                    kill_instance(process)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def submit(self, kind: str, backend: Any, name: str) -> None:
        earlier = self._workdir / "jobs" / name
        if earlier.exists():
            # A job of this name from an earlier, forgotten stack: its logs are kept.
            earlier.rename(earlier.with_name(f"{name}.earlier-{now():%Y%m%dT%H%M%S%fZ}"))
        self._start(kind, backend, name)

    def resume(self, kind: str, backend: Any, name: str) -> None:
        """Run again a job the stack stopped during (its folder, data and logs kept)."""
        log.info("running %s job %s again: the local stack stopped while it ran", kind, name)
        self._start(kind, backend, name)

    def _start(self, kind: str, backend: Any, name: str) -> None:
        job = RunningJob(kind=kind, name=name)
        with self._lock:
            self._jobs[name] = job
        run = self._run_processing if kind == "processing" else self._run_training
        job.future = self._pool.submit(self._guarded, run, backend, name)

    def interrupt(
        self,
        name: str,
        after_archives: int = 0,
        timeout: float = 300.0,
        *,
        every_instance: bool = False,
    ) -> bool:
        """Emulate a spot interruption of a running training job: its instances are
        stopped, then the job resumes from its checkpoints, as SageMaker does.

        With ``after_archives``, first wait as :meth:`crash` does: the interruption lands
        in the middle of the job's work however fast it trains. ``every_instance``: wait
        until each instance, not only the first, has written that many."""
        held: set[int] = set()
        job = None
        try:
            job = self._when_archived(
                name, after_archives, timeout, every_instance=every_instance, held=held
            )
        finally:
            if job is None:  # (the wait failed: let the instances it held go on)
                for pid in held:
                    hold_instance(pid, held=False)
        if job is None:
            return False
        job.interrupted.set()
        for process in job.processes:
            if process.poll() is None:
                kill_instance(process)
        return True

    def crash(self, name: str, after_archives: int = 0, timeout: float = 300.0) -> bool:
        """Kill a running training job's first instance, container and workers, as the
        kernel's out-of-memory killer would: the job fails, as it would on SageMaker.

        With ``after_archives``, first wait (up to ``timeout`` seconds) for the job to start
        and for that instance to write that many model archives to its checkpoint folder,
        then kill it at once: the kill lands in the middle of its work however fast it
        trains."""
        job = self._when_archived(name, after_archives, timeout)
        if job is None:
            return False
        kill_instance(job.processes[0])
        return True

    def _when_archived(
        self,
        name: str,
        after_archives: int,
        timeout: float,
        every_instance: bool = False,
        held: set[int] | None = None,
    ) -> RunningJob | None:
        """The running training job ``name`` once its first instance is running and has
        written ``after_archives`` model archives to its checkpoint folder (with
        ``every_instance``, each of its instances has); None if the job is not running (or
        has finished, or the wait timed out).

        With ``held``, an instance that has written its count is held still (its process
        group stopped, its pid added to ``held``) while the others catch up: on a fast
        machine one instance could otherwise finish its whole shard before another wrote
        its first archives, and the interruption would have nothing left to land on."""
        deadline = time.monotonic() + timeout
        while True:
            job = self._running_training(name)
            if job is None:
                with self._lock:
                    started = name in self._jobs
                if started or after_archives <= 0 or time.monotonic() > deadline:
                    return None
                time.sleep(0.01)
                continue
            first = job.processes[0] if job.processes else None
            if first is not None and first.poll() is not None:
                return None
            watched = job.checkpoints if every_instance else job.checkpoints[:1]
            if held is not None and after_archives > 0:
                for process, folder in zip(job.processes, watched, strict=False):
                    if process.pid not in held and _archives_in(folder) >= after_archives:
                        hold_instance(process.pid, held=True)
                        held.add(process.pid)
            if first is not None and (
                after_archives <= 0
                or (watched and all(_archives_in(c) >= after_archives for c in watched))
            ):
                return job
            if time.monotonic() > deadline:
                return None
            time.sleep(0.01)

    def _running_training(self, name: str) -> RunningJob | None:
        with self._lock:
            job = self._jobs.get(name)
        if job is None or job.kind != "training" or job.future is None or job.future.done():
            return None
        return job

    def _guarded(self, run: Callable[[Any, str], None], backend: Any, name: str) -> None:
        try:
            run(backend, name)
        except Exception:
            log.exception("local stack failed to run job %s", name)

    # -- events -----------------------------------------------------------------------

    def _publish(self, detail_type: str, arn: str, detail: dict[str, Any]) -> None:
        response = self._events.put_events(
            Entries=[
                {
                    "Source": "aws.sagemaker",
                    "DetailType": detail_type,
                    "Resources": [arn],
                    "Detail": json.dumps(detail, default=str),
                }
            ]
        )
        if response.get("FailedEntryCount"):
            log.error("could not publish %s for %s: %s", detail_type, arn, response)

    # -- processing -------------------------------------------------------------------

    def _job_transfer(self, job: Any) -> S3Transfer:
        if self._transfer_for is None:
            return self._transfer
        return self._transfer_for(str(job.role_arn))

    def _run_processing(self, backend: Any, name: str) -> None:
        job = backend.processing_jobs[name]
        job.processing_start_time = now()
        job.last_modified_time = now()
        self.publish_processing(job)
        root = self._workdir / "jobs" / name / "algo-1"
        log_file = self._workdir / "jobs" / name / "algo-1.log"
        status, exit_message, failure = "Failed", None, None
        try:
            transfer = self._job_transfer(job)
            for entry in job.processing_inputs or []:
                s3_input = entry.get("S3Input")
                if not s3_input:
                    continue
                bucket, prefix = split_s3_uri(s3_input["S3Uri"])
                keys = transfer.keys(bucket, prefix)
                if not keys:
                    raise LookupError(f"no S3 objects found under S3 URL {s3_input['S3Uri']!r}")
                target = under_root(root, s3_input["LocalPath"])
                target.mkdir(parents=True, exist_ok=True)
                transfer.download(bucket, prefix, keys, target)
            outputs = (
                job.processing_output_config.get("Outputs", [])
                if job.processing_output_config
                else []
            )
            for entry in outputs:
                under_root(root, entry["S3Output"]["LocalPath"]).mkdir(parents=True, exist_ok=True)
            app = job.app_specification
            command = list(
                app.get("ContainerEntrypoint")
                or image_entrypoint(app["ImageUri"], self._containers_dir)
            )
            command = local_command(command) + list(app.get("ContainerArguments") or [])
            env = {
                **os.environ,
                **image_environment(app["ImageUri"], self._containers_dir),
                **self.environments.of(name),
                OPT_ML_ENV: str(root),
                training_contract.INSTANCE_CPUS_ENV: str(self._cpus),
            }
            returncode = self._run_instances(self._jobs[name], [(command, env, log_file)])[0]
            if self._stopping.is_set():
                return
            message = read_limited(
                under_root(root, processing_contract.MESSAGE_FILE),
                processing_contract.MESSAGE_LIMIT,
            )
            if returncode == 0:
                for entry in outputs:
                    bucket, prefix = split_s3_uri(entry["S3Output"]["S3Uri"])
                    transfer.upload_tree(
                        under_root(root, entry["S3Output"]["LocalPath"]), bucket, prefix
                    )
                status, exit_message = "Completed", message
            else:
                exit_message, failure = processing_failure(message, log_tail(log_file))
        except Exception as error:
            failure = f"ClientError: {error}"
            log.exception("processing job %s failed in the local stack", name)
        job.processing_job_status = status
        job.exit_message = exit_message
        job.failure_reason = failure[:FAILURE_REASON_LIMIT] if failure else None
        job.processing_end_time = now()
        job.last_modified_time = now()
        self.publish_processing(job)

    def publish_processing(self, job: Any) -> None:
        detail = _jsonable(job.response_object, as_string=False)
        self._publish(PROCESSING.detail_type, job.arn, detail)

    # -- training ---------------------------------------------------------------------

    def _run_training(self, backend: Any, name: str) -> None:
        job = backend.training_jobs[name]
        running = self._jobs[name]
        hosts = training_contract.host_names(int(job.resource_config.get("InstanceCount", 1)))
        job_dir = self._workdir / "jobs" / name
        training.transition(job, "Starting", "Preparing the instances for training")
        self.publish_training(job)
        started = time.monotonic()
        failure: str | None = None
        try:
            transfer = self._job_transfer(job)
            codes = self._train_until_uninterrupted(transfer, job, running, hosts, job_dir)
            if codes is None:
                return
            failure = _instance_failure(job_dir, hosts, codes)
            if failure is None:
                training.transition(job, "Uploading", "Uploading generated training model")
                training.upload_model(transfer, job, job_dir / hosts[0])
        except Exception as error:
            log.exception("training job %s failed in the local stack", name)
            failure = f"ClientError: {error}"
        self._finish_training(job, running, [job_dir / f"{h}.log" for h in hosts], started, failure)

    def _train_until_uninterrupted(
        self, transfer: S3Transfer, job: Any, running: RunningJob, hosts: list[str], job_dir: Path
    ) -> list[int] | None:
        """Run every instance's container, again from the last checkpoint after each spot
        interruption; their exit codes, or None when the runner is stopping."""
        image = job.algorithm_specification["TrainingImage"]
        command = local_command(image_entrypoint(image, self._containers_dir))
        command.append("train")
        # The image's ENV too: one BLAS thread per process, say (each forked worker would
        # otherwise start a pool of BLAS threads that spin before they sleep).
        image_env = image_environment(image, self._containers_dir)
        cpus = str(max(1, self._cpus // len(hosts)))
        while True:
            training.transition(job, "Downloading", "Downloading input data")
            job.training_start_time = job.training_start_time or now()
            roots = [
                training.prepare_instance(transfer, job, job_dir / host, host, hosts)
                for host in hosts
            ]
            training.transition(
                job, "Training", "Training image download completed. Training in progress."
            )
            syncs = self._start_checkpoint_syncs(transfer, job, roots)
            running.checkpoints = [sync.local for sync in syncs]
            launches = [
                (
                    command,
                    {
                        **os.environ,
                        **image_env,
                        OPT_ML_ENV: str(root),
                        training_contract.INSTANCE_CPUS_ENV: cpus,
                    },
                    job_dir / f"{host}.log",
                )
                for root, host in zip(roots, hosts, strict=True)
            ]
            codes = self._run_instances(running, launches)
            for sync in syncs:
                sync.stop()
            if self._stopping.is_set():
                return None
            if not running.interrupted.is_set():
                return codes
            running.interrupted.clear()
            running.interruptions += 1
            training.transition(
                job, "Interrupted", "Training job interrupted (spot capacity reclaimed)"
            )
            training.transition(job, "Restarting", "Restarting from the last checkpoint")

    def _finish_training(
        self,
        job: Any,
        running: RunningJob,
        logs: list[Path],
        started: float,
        failure: str | None,
    ) -> None:
        elapsed = max(1, round(time.monotonic() - started))
        job.training_end_time = now()
        job.training_time_in_seconds = elapsed
        # AWS reports wall-clock time here; the bill is this times the instance count.
        job.billable_time_in_seconds = elapsed
        job.final_metric_data_list = training.scrape_metrics(job, logs)
        if running.interruptions:
            job.interruptions = running.interruptions
        if failure:
            job.training_job_status = "Failed"
            job.failure_reason = failure[:FAILURE_REASON_LIMIT]
            training.transition(job, "Failed", "Training job failed")
        else:
            job.training_job_status = "Completed"
            training.transition(job, "Completed", "Training job completed")
        job.secondary_status_transitions[-1]["EndTime"] = job.training_end_time
        self.publish_training(job)

    def _start_checkpoint_syncs(
        self, transfer: S3Transfer, job: Any, roots: list[Path]
    ) -> list[CheckpointSync]:
        checkpoint = job.checkpoint_config
        if not checkpoint:
            return []
        syncs = [
            CheckpointSync(transfer, checkpoint_dir(root, checkpoint), checkpoint["S3Uri"])
            for root in roots
        ]
        for sync in syncs:
            sync.start()
        return syncs

    def _run_instances(
        self, job: RunningJob, launches: list[tuple[list[str], dict[str, str], Path]]
    ) -> list[int]:
        processes = []
        handles = []
        for command, env, log_file in launches:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handle = log_file.open("ab")
            handles.append(handle)
            processes.append(
                # Its own process group: an instance is killed with every worker it started.
                subprocess.Popen(
                    command,
                    env=env,
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        job.processes = processes
        try:
            return [process.wait() for process in processes]
        finally:
            for handle in handles:
                handle.close()

    def publish_training(self, job: Any) -> None:
        detail = _jsonable(job.response_object, as_string=True)
        self._publish(TRAINING.detail_type, job.arn, detail)


def _archives_in(folder: Path) -> int:
    """Model archives written to a checkpoint folder (whole files only: the container
    writes each under a temporary name and renames it)."""
    return sum(1 for _ in folder.rglob(f"*{MODEL_ARCHIVE_SUFFIX}"))


def _instance_failure(job_dir: Path, hosts: list[str], codes: list[int]) -> str | None:
    """SageMaker's FailureReason for the first instance that exited non-zero, if any: how it
    was killed, else its failure file, else its log's tail."""
    failed = [(host, code) for host, code in zip(hosts, codes, strict=True) if code != 0]
    if not failed:
        return None
    host, code = failed[0]
    reason = (
        killed_reason(code)
        or read_limited(
            job_dir / host / training_contract.FAILURE_FILE, training_contract.FAILURE_LIMIT
        )
        or log_tail(job_dir / f"{host}.log")
    )
    return f"AlgorithmError: {reason or f'exit code {code}'} (host {host})"
