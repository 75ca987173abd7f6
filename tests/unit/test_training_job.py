"""The training container end to end on a fake /opt/ml: ``python -m fleetcast_training train``."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prophet.serialize import model_from_json
from threadpoolctl import ThreadpoolController

from fleetcast_contracts.model_archive import read_archive, write_archive
from fleetcast_contracts.opt_ml import OPT_ML_ENV
from fleetcast_contracts.shards import RUN_LAST_PERIOD_KEY
from fleetcast_contracts.training import (
    FAILURE_FILE,
    FAILURE_LIMIT,
    METRIC_DEFINITIONS,
    manifest_name,
    manifest_page_name,
    manifest_summary_name,
    progress_name,
)
from fleetcast_contracts.training_manifest import (
    CustomerOutcome,
    CustomerResult,
    ManifestPage,
    ManifestSummary,
    TrainingManifest,
    TrainingProgress,
    manifest_pages,
)
from fleetcast_training import __main__ as entry_point
from fleetcast_training import worker_pool
from fleetcast_training.customer_training import CustomerTrainer
from fleetcast_training.hyperparameters import Hyperparameters
from fleetcast_training.progress import PROGRESS_FILE_SECONDS, Progress

DATA = Path(__file__).parent.parent / "data" / "training"
# Prophet served alone (seasonal naive still scored): these tests check its archives.
HYPERPARAMETERS = {
    **json.loads((DATA / "hyperparameters.json").read_text()),
    "candidates": "prophet",
}
RUN_ID = HYPERPARAMETERS["run_id"]
DAYS = 120
FIRST_DAY = pd.Timestamp("2025-01-01")


def weekly_series(seed: int, days: int = DAYS) -> pd.DataFrame:
    """Daily values with a level, a slight trend, a weekly pattern and noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(days)
    weekly = rng.uniform(20, 60) * np.sin(2 * np.pi * t / 7 + rng.uniform(0, 6))
    y = rng.uniform(200, 800) + 0.3 * t + weekly + rng.normal(0, 8, days)
    ds = pd.date_range(FIRST_DAY, periods=days, freq="D")
    return pd.DataFrame({"ds": ds.strftime("%Y-%m-%d"), "y": y.round(3)})


@dataclass
class Instance:
    """A fake ``/opt/ml`` for one training instance."""

    root: Path

    @classmethod
    def create(cls, root: Path, **hyperparameters: str) -> Instance:
        config = root / "input" / "config"
        config.mkdir(parents=True)
        (root / "input" / "data" / "train").mkdir(parents=True)
        (config / "hyperparameters.json").write_text(
            json.dumps({**HYPERPARAMETERS, **hyperparameters})
        )
        for name in ("resourceconfig.json", "inputdataconfig.json"):
            shutil.copy(DATA / name, config / name)
        return cls(root)

    @property
    def channel(self) -> Path:
        return self.root / "input" / "data" / "train"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    def add_customer(self, customer_id: str, frame: pd.DataFrame) -> None:
        """A customer file of its own, as runs processed before training parts have."""
        frame.to_csv(self.channel / f"{customer_id}.csv", index=False)

    def add_part(
        self,
        name: str,
        customers: dict[str, pd.DataFrame],
        run_last_period: str | None = None,
        channel: str = "train",
    ) -> None:
        """A training part of many customers, as processing writes it (contracts.shards),
        saying the run's last period when given; in ``channel`` (the fleet teachers'
        file is written as a part is)."""
        table = pa.concat_tables(
            pa.table(
                {
                    "customer_id": pa.array([customer_id] * len(frame), pa.string()),
                    "ds": pa.array(pd.to_datetime(frame["ds"]).to_numpy("datetime64[us]")),
                    "y": pa.array(frame["y"].to_numpy(np.float64)),
                    # One reading a period each, the meter's interval its usual step
                    "readings": pa.array([1] * len(frame), pa.int64()),
                    "interval_s": pa.array([_interval(frame)] * len(frame), pa.float64()),
                    "use": pa.array(
                        list(frame["use"]) if "use" in frame else ["ok"] * len(frame), pa.string()
                    ),
                }
            )
            for customer_id, frame in customers.items()
        )
        if run_last_period is not None:
            table = table.replace_schema_metadata({RUN_LAST_PERIOD_KEY: run_last_period})
        folder = self.root / "input" / "data" / channel
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, folder / name)

    def archive(self, customer_id: str) -> Path:
        return self.checkpoints / f"{customer_id}.tar.gz"

    def manifest(self) -> TrainingManifest:
        text = (self.checkpoints / manifest_name("algo-1")).read_text()
        return TrainingManifest.model_validate_json(text)

    def outcomes(self) -> dict[str, CustomerOutcome]:
        return {r.customer_id: r.outcome for r in self.manifest().customers}

    def failure(self) -> str | None:
        path = self.root / FAILURE_FILE
        return path.read_text() if path.exists() else None


def _interval(frame: pd.DataFrame) -> float:
    """A customer's reading interval as processing writes it: its median step, seconds
    (a day for a single row)."""
    steps = pd.to_datetime(frame["ds"]).diff().dropna().dt.total_seconds()
    return float(steps.median()) if len(steps) else 86_400.0


@dataclass
class Run:
    exit_code: int
    stdout: str


def run_container(instance: Instance, *argv: str) -> Run:
    """What SageMaker does: run the entry point with ``train`` against /opt/ml."""
    stdout = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(stdout):
        patch.setenv(OPT_ML_ENV, str(instance.root))
        code = entry_point.main(list(argv) or ["train"])
    return Run(code, stdout.getvalue())


def metrics(stdout: str) -> dict[str, float]:
    """The values SageMaker would scrape with the job's MetricDefinitions."""
    found = {}
    for definition in METRIC_DEFINITIONS:
        match = re.search(definition["Regex"], stdout)
        if match:
            found[definition["Name"]] = float(match.group(1))
    return found


GOOD = ["acme", "globex", "initech"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Instance, Run]:
    # Given two training parts with three good customers, one with 3 rows and an invalid
    # id, beside a file that is not a part
    instance = Instance.create(tmp_path_factory.mktemp("opt-ml"))
    series = {customer_id: weekly_series(seed) for seed, customer_id in enumerate(GOOD)}
    instance.add_part("part-00000.parquet", {c: series[c] for c in GOOD[:2]})
    instance.add_part(
        "part-00001.parquet",
        {
            GOOD[2]: series[GOOD[2]],
            "tiny": weekly_series(9, days=3),
            "bad name": weekly_series(10),
        },
    )
    (instance.channel / "notes.txt").write_text("not a customer")
    # When SageMaker runs the container
    return instance, run_container(instance)


def test_good_customers_get_readable_archives_with_servable_models(trained: tuple[Instance, Run]):
    instance, _ = trained
    for customer_id in GOOD:
        # Then each archive reads back and its model forecasts
        model_json, metadata = read_archive(instance.archive(customer_id))
        model = model_from_json(model_json)
        model.uncertainty_samples = 0
        forecast = model.predict(model.make_future_dataframe(periods=7, include_history=False))
        assert np.isfinite(forecast["yhat"]).all()
        # And the served model was refitted on the whole history, holdout included
        assert model.history is not None
        assert model.history["ds"].max() == FIRST_DAY + pd.Timedelta(days=DAYS - 1)
        assert metadata.customer_id == customer_id
        assert metadata.run_id == RUN_ID
        assert metadata.rows == DAYS
        assert metadata.frequency == "D"
        assert metadata.data_start == FIRST_DAY.date()
        assert metadata.data_end == (FIRST_DAY + pd.Timedelta(days=DAYS - 1)).date()
        assert metadata.metrics.holdout_days == 30  # the backtest: the export's horizon
        assert 0 <= metadata.metrics.smape < 0.2
        assert 0 <= metadata.metrics.naive_smape < 0.3
        assert {"prophet", "cmdstanpy", "pandas", "numpy"} <= metadata.library_versions.keys()


def test_customer_with_too_few_rows_fails_alone(trained: tuple[Instance, Run]):
    instance, run = trained
    # Then the job succeeds
    assert run.exit_code == 0
    assert instance.failure() is None
    # And the short customer is failed with its row count, without an archive
    result = {r.customer_id: r for r in instance.manifest().customers}["tiny"]
    assert result.outcome is CustomerOutcome.FAILED
    assert result.reason == "has 3 rows, needs at least 28"
    assert not instance.archive("tiny").exists()
    # And the manifest says what kind of failure it is, for `fleetcast status` to count
    assert result.kind == "too_few_rows"
    # (only failures carry one: the manifest lists every trained customer too)
    written = json.loads((instance.checkpoints / manifest_name("algo-1")).read_text())
    with_kind = [c["customer_id"] for c in written["customers"] if "kind" in c]
    assert with_kind == [c["customer_id"] for c in written["customers"] if c["outcome"] == "failed"]
    assert "tiny" in with_kind and not set(GOOD) & set(with_kind)


def test_invalid_file_names_are_failed_and_never_used(trained: tuple[Instance, Run]):
    instance, _ = trained
    outcomes = instance.outcomes()
    # Then each bad name is reported as failed under its file name
    assert outcomes["bad name"] is CustomerOutcome.FAILED
    assert outcomes["notes.txt"] is CustomerOutcome.FAILED
    # And nothing was written for them
    archives = sorted(p.name for p in instance.checkpoints.glob("*.tar.gz"))
    assert archives == [f"{c}.tar.gz" for c in GOOD]


def test_manifest_lists_every_customer_in_checkpoints_and_model_dir(trained: tuple[Instance, Run]):
    instance, _ = trained
    manifest = instance.manifest()
    # Then every file of the shard has an outcome
    assert instance.outcomes() == {
        **dict.fromkeys(GOOD, CustomerOutcome.TRAINED),
        "tiny": CustomerOutcome.FAILED,
        "bad name": CustomerOutcome.FAILED,
        "notes.txt": CustomerOutcome.FAILED,
    }
    assert (manifest.run_id, manifest.host, manifest.hosts) == (RUN_ID, "algo-1", ["algo-1"])
    # And trained customers carry their archive's metadata for registration
    for result in manifest.customers:
        if result.outcome is CustomerOutcome.TRAINED:
            assert result.metadata is not None
            assert result.metadata == read_archive(instance.archive(result.customer_id))[1]
    # And model.tar.gz will not be empty: the same manifest is in the model directory
    copy = instance.root / "model" / manifest_name("algo-1")
    assert copy.read_text() == (instance.checkpoints / manifest_name("algo-1")).read_text()
    assert not list(instance.checkpoints.rglob("*.partial"))
    # And the checkpoints hold it in pages too, for registration chunks to read
    pages = [
        ManifestPage.model_validate_json((instance.checkpoints / name).read_text())
        for name, _ in manifest_pages(manifest)
    ]
    assert [c for page in pages for c in page.customers] == manifest.customers
    # And its summary, what registration's coordinator reads of a completed job
    summary = (instance.checkpoints / manifest_summary_name("algo-1")).read_text()
    assert ManifestSummary.model_validate_json(summary) == ManifestSummary.of(manifest)
    assert ManifestSummary.of(manifest).trained == len(GOOD)


def test_manifest_pages_cover_the_manifest_in_order_each_saying_where_it_starts():
    customers = [
        CustomerResult(customer_id=f"c{i}", outcome=CustomerOutcome.FAILED, reason="few rows")
        for i in range(7)
    ]
    manifest = TrainingManifest(
        run_id=RUN_ID, host="algo-2", hosts=["algo-1", "algo-2"], customers=customers
    )
    pages = manifest_pages(manifest, size=3)
    assert [name for name, _ in pages] == [manifest_page_name("algo-2", n) for n in range(3)]
    assert [(page.first, len(page.customers)) for _, page in pages] == [(0, 3), (3, 3), (6, 1)]
    assert [c for _, page in pages for c in page.customers] == customers
    assert manifest_pages(manifest.model_copy(update={"customers": []})) == []


def test_the_progress_file_ends_with_every_customer_of_the_shard_done(
    trained: tuple[Instance, Run],
):
    instance, _ = trained
    progress = TrainingProgress.model_validate_json(
        (instance.checkpoints / progress_name("algo-1")).read_text()
    )
    assert progress == TrainingProgress(
        host="algo-1", done=len(instance.outcomes()), total=len(instance.outcomes())
    )


def test_progress_is_written_as_it_goes_and_at_most_every_few_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    now = [0.0]
    monkeypatch.setattr("fleetcast_training.progress.time.perf_counter", lambda: now[0])

    def written() -> int:
        path = tmp_path / progress_name("algo-2")
        return TrainingProgress.model_validate_json(path.read_text()).done

    progress = Progress("algo-2", total=100, directory=tmp_path)
    assert written() == 0
    # Within PROGRESS_FILE_SECONDS of the last write, a customer done is not written
    now[0] = 1.0
    progress.advance(1)
    assert written() == 0
    # After it, it is
    now[0] = PROGRESS_FILE_SECONDS + 0.5
    progress.advance(2)
    assert written() == 3
    # And a logged 5% step is written at once
    now[0] += 0.1
    progress.advance(2)
    assert written() == 5


def test_metric_lines_match_the_metric_definitions(trained: tuple[Instance, Run]):
    _, run = trained
    # Then SageMaker's regexes find every metric
    found = metrics(run.stdout)
    assert found["models_trained"] == 3
    assert found["models_failed"] == 3
    assert found["models_resumed"] == 0
    assert 0 < found["median_smape"] < 0.2
    assert 0 < found["median_naive_smape"] < 0.3
    assert found["median_mae"] > 0
    assert found["models_per_second"] > 0
    # And every fit of these linear, additive models ran in-process: a holdout fit and a refit each
    assert found["fits_in_process"] == 12
    assert found["fits_cmdstan"] == 0


def test_manifest_counts_each_customers_fits_by_method(trained: tuple[Instance, Run]):
    instance, _ = trained
    # Then each trained customer's two fits are counted as in-process
    fits = {r.customer_id: r.fit_methods for r in instance.manifest().customers}
    assert fits == {
        **{customer_id: {"in-process": 4} for customer_id in GOOD},
        **dict.fromkeys(["tiny", "bad name", "notes.txt"], None),
    }


def params(archive: Path) -> dict[str, np.ndarray]:
    return dict(model_from_json(read_archive(archive)[0]).params)


def test_parallel_workers_make_the_same_models_as_one(
    trained: tuple[Instance, Run], tmp_path: Path
):
    parallel, _ = trained
    # Given the same customers on an instance with one worker
    single = Instance.create(tmp_path, workers="1")
    for part in parallel.channel.glob("*.parquet"):
        shutil.copy(part, single.channel)
    # When it trains them
    assert run_container(single).exit_code == 0
    # Then the fitted parameters are those of the parallel run
    for customer_id in GOOD:
        expected = params(parallel.archive(customer_id))
        actual = params(single.archive(customer_id))
        assert expected.keys() == actual.keys()
        for name in expected:
            np.testing.assert_allclose(actual[name], expected[name], rtol=1e-6, atol=1e-9)


def test_restart_keeps_complete_archives_and_refits_the_rest(tmp_path: Path):
    # Given an instance restarted after a spot interruption: one customer's archive is
    # complete, one was being written (.partial), one is corrupt
    instance = Instance.create(tmp_path)
    for seed, customer_id in enumerate(["kept", "half", "broken"]):
        instance.add_customer(customer_id, weekly_series(seed))
    instance.checkpoints.mkdir()
    _, metadata = read_archive(_archive_of_a_trained_customer(tmp_path / "earlier", "kept"))
    write_archive(instance.archive("kept"), '{"placeholder": "not refitted"}', metadata)
    os.utime(instance.archive("kept"), (1_000_000_000, 1_000_000_000))
    instance.archive("half").with_name("half.tar.gz.partial").write_bytes(b"\x1f\x8b half")
    instance.archive("broken").write_bytes(b"not a tar file")
    # When the container runs again
    run = run_container(instance)
    # Then the complete archive is kept untouched, and the others are trained anew
    assert run.exit_code == 0
    assert instance.outcomes() == {
        "kept": CustomerOutcome.RESUMED,
        "half": CustomerOutcome.TRAINED,
        "broken": CustomerOutcome.TRAINED,
    }
    assert instance.archive("kept").stat().st_mtime == 1_000_000_000
    assert read_archive(instance.archive("kept"))[0] == '{"placeholder": "not refitted"}'
    for customer_id in ("half", "broken"):
        model_from_json(read_archive(instance.archive(customer_id))[0])
    assert not list(instance.checkpoints.glob("*.partial"))
    # And the resumed customer's metrics still count
    resumed = {r.customer_id: r for r in instance.manifest().customers}["kept"]
    assert resumed.metadata == metadata
    assert metrics(run.stdout)["models_resumed"] == 1


def _archive_of_a_trained_customer(root: Path, customer_id: str) -> Path:
    earlier = Instance.create(root, workers="1")
    earlier.add_customer(customer_id, weekly_series(0))
    assert run_container(earlier).exit_code == 0
    return earlier.archive(customer_id)


def test_an_instance_whose_customers_all_fail_succeeds_and_says_why_each_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    # Given a shard whose three customers are all too short (another instance of the
    # same job may hold healthy customers: failing this one would fail the whole job)
    instance = Instance.create(tmp_path)
    for customer_id in ("a", "b", "c"):
        instance.add_customer(customer_id, weekly_series(1, days=5))
    # When the container runs
    with caplog.at_level("WARNING", logger="fleetcast_training"):
        run = run_container(instance)
    # Then the instance succeeds, writing no failure file
    assert run.exit_code == 0
    assert instance.failure() is None
    # And its manifest says why each customer failed
    reasons = {r.customer_id: (r.outcome, r.reason) for r in instance.manifest().customers}
    assert reasons == dict.fromkeys(
        ("a", "b", "c"), (CustomerOutcome.FAILED, "has 5 rows, needs at least 28")
    )
    assert metrics(run.stdout)["models_failed"] == 3
    # And the log sums it up
    assert (
        "no model from this instance: all 3 customers failed: 3 had fewer than 28 rows "
        "(first: a: has 5 rows, needs at least 28)"
    ) in caplog.text


@pytest.mark.parametrize(
    ("hyperparameters", "expected"),
    [
        ({"holdout_days": "seven"}, "holdout_days='seven': Input should be a valid integer"),
        ({"min_rows": "1"}, "min_rows='1': Input should be greater than or equal to 2"),
        ({"seasonality_mode": "cubic"}, "seasonality_mode='cubic'"),
        ({"yearly_seasonality": "sometimes"}, "yearly_seasonality='sometimes': must be 'auto'"),
        ({"holdout_dayz": "7"}, "unknown hyperparameter 'holdout_dayz'"),
        ({"run_id": "run 1"}, "run_id 'run 1' is not a fleetcast run id"),
    ],
)
def test_bad_hyperparameters_fail_the_job_with_the_reason(
    tmp_path: Path, hyperparameters: dict[str, str], expected: str
):
    # Given a shard and a bad hyperparameter
    instance = Instance.create(tmp_path, **hyperparameters)
    instance.add_customer("acme", weekly_series(0))
    # When the container runs
    run = run_container(instance)
    # Then it fails before training anything, naming the problem
    assert run.exit_code != 0
    failure = instance.failure()
    assert failure is not None
    assert failure.startswith("invalid hyperparameters: ")
    assert expected in failure
    assert not instance.checkpoints.exists()


def test_missing_run_id_fails_the_job(tmp_path: Path):
    instance = Instance.create(tmp_path)
    config = instance.root / "input" / "config" / "hyperparameters.json"
    config.write_text(json.dumps({"holdout_days": "7"}))
    assert run_container(instance).exit_code != 0
    assert instance.failure() == "invalid hyperparameters: run_id is required"


def test_no_input_files_fails_the_job(tmp_path: Path):
    # Given a single-instance job whose channel is empty
    instance = Instance.create(tmp_path)
    # When the container runs, then it fails saying there is no data
    assert run_container(instance).exit_code != 0
    assert (instance.failure() or "").startswith(
        "no training data: the 'train' channel has no files"
    )


def test_empty_shard_of_a_multi_instance_job_succeeds_with_an_empty_manifest(tmp_path: Path):
    # Given the second of two instances, which ShardedByS3Key gave no file
    instance = Instance.create(tmp_path)
    resources = {"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}
    (instance.root / "input" / "config" / "resourceconfig.json").write_text(json.dumps(resources))
    # When the container runs
    assert run_container(instance).exit_code == 0
    # Then it reports an empty shard
    manifest = TrainingManifest.model_validate_json(
        (instance.checkpoints / manifest_name("algo-2")).read_text()
    )
    assert manifest.customers == []


def test_unexpected_crash_is_reported_in_the_failure_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Given a job that crashes for a reason nobody planned for
    instance = Instance.create(tmp_path)
    instance.add_customer("acme", weekly_series(0))

    def crash(*_: object) -> None:
        raise RuntimeError("disk on fire " + "x" * 2000)

    monkeypatch.setattr(entry_point, "run_job", crash)
    # When the container runs
    run = run_container(instance)
    # Then the failure file says what happened, within SageMaker's limit
    assert run.exit_code != 0
    failure = instance.failure() or ""
    assert failure.startswith(
        "unexpected error in the training container: RuntimeError: disk on fire"
    )
    assert len(failure) == FAILURE_LIMIT


def test_unknown_command_fails_the_job(tmp_path: Path):
    instance = Instance.create(tmp_path)
    assert run_container(instance, "serve").exit_code != 0
    assert "unknown arguments ['serve']" in (instance.failure() or "")


@pytest.fixture
def worker_dies_on_customer_boom(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Workers are forked, so they inherit this patch: training 'boom' kills the process
    the way the kernel's out-of-memory killer would."""
    load = CustomerTrainer._load

    def load_or_die(self: CustomerTrainer, customer_id: str, source: Path) -> object:
        if customer_id == "boom":
            os._exit(137)
        return load(self, customer_id, source)

    monkeypatch.setattr(CustomerTrainer, "_load", load_or_die)
    yield


@pytest.mark.usefixtures("worker_dies_on_customer_boom")
def test_a_customer_that_kills_its_worker_fails_alone(tmp_path: Path):
    # Given a shard where one customer kills the worker process training it
    instance = Instance.create(tmp_path, workers="2")
    for seed, customer_id in enumerate(["acme", "boom", "globex", "initech"]):
        instance.add_customer(customer_id, weekly_series(seed))
    # When the container runs
    run = run_container(instance)
    # Then only that customer fails, and the job completes
    assert run.exit_code == 0
    outcomes = instance.outcomes()
    assert outcomes.pop("boom") is CustomerOutcome.FAILED
    assert set(outcomes) == {"acme", "globex", "initech"}
    assert CustomerOutcome.FAILED not in outcomes.values()
    reason = {r.customer_id: r.reason for r in instance.manifest().customers}["boom"]
    assert reason is not None and "worker process died" in reason


def test_a_worker_runs_its_matrix_products_on_one_blas_thread(tmp_path: Path):
    # Given a process whose BLAS may use several threads (the default outside the image)
    controller = ThreadpoolController()
    with controller.limit(limits=2, user_api="blas"):
        assert max(pool["num_threads"] for pool in controller.info()) == 2
        # When it starts as a training worker
        worker_pool._start_worker(Hyperparameters.parse({"run_id": RUN_ID}), tmp_path, tmp_path)
        # Then every BLAS and OpenMP pool it has runs one thread
        assert {pool["num_threads"] for pool in controller.info()} == {1}


def test_customer_files_from_before_parts_still_train_and_a_customer_twice_is_refused(
    tmp_path: Path,
):
    # Given a run processed before training parts (a file per customer), a part, and a
    # customer found in two parts
    instance = Instance.create(tmp_path / "opt-ml")
    instance.add_customer("old", weekly_series(1))
    instance.add_part("part-00000.parquet", {"new": weekly_series(2), "twice": weekly_series(3)})
    instance.add_part("part-00001.parquet", {"twice": weekly_series(4)})
    # When the job runs
    run = run_container(instance)
    # Then the file and the part's customer are trained; the doubled one fails, saying why
    assert run.exit_code == 0
    outcomes = instance.outcomes()
    assert outcomes["old"] is CustomerOutcome.TRAINED
    assert outcomes["new"] is CustomerOutcome.TRAINED
    assert outcomes["twice"] is CustomerOutcome.FAILED
    reason = {r.customer_id: r.reason for r in instance.manifest().customers}["twice"]
    assert reason is not None and "another part" in reason
    assert not instance.archive("twice").exists()


def test_an_unreadable_part_fails_under_its_name(tmp_path: Path):
    instance = Instance.create(tmp_path / "opt-ml")
    instance.add_part("part-00000.parquet", {"good": weekly_series(1)})
    (instance.channel / "part-00001.parquet").write_bytes(b"not parquet")
    run = run_container(instance)
    assert run.exit_code == 0
    outcomes = instance.outcomes()
    assert outcomes == {
        "good": CustomerOutcome.TRAINED,
        "part-00001.parquet": CustomerOutcome.FAILED,
    }
