"""History shards and training parts: what an upload reads, rewrites and leaves alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from shard_helpers import parts_in, read_rows, write_history
from test_processing import HEADER, Job
from test_processing import job as job  # the fixture

from fleetcast_contracts.shards import (
    HISTORY_SHARDS,
    RUN_LAST_PERIOD_KEY,
    history_shard_name,
    history_shard_of,
)
from fleetcast_processing.spill import ShardSpill, compress_for


def _same_shard_as(customer_id: str, prefix: str) -> str:
    """Another id in ``customer_id``'s history shard."""
    wanted = history_shard_of(customer_id)
    return next(f"{prefix}{n}" for n in range(10_000) if history_shard_of(f"{prefix}{n}") == wanted)


def _other_shard_than(customer_id: str, prefix: str) -> str:
    avoid = history_shard_of(customer_id)
    return next(f"{prefix}{n}" for n in range(100) if history_shard_of(f"{prefix}{n}") != avoid)


def test_an_upload_rewrites_only_its_customers_shards_and_keeps_their_other_customers(
    job: Job,
) -> None:
    # Given a stored customer sharing a shard with the uploaded one, and one elsewhere
    neighbour, elsewhere = _same_shard_as("7", "n"), _other_shard_than("7", "e")
    write_history(job.paths.history_input, "7", [("2024-01-01", 1.0), ("2024-01-02", 2.0)])
    write_history(job.paths.history_input, neighbour, [("2024-01-01", 5.0)])
    write_history(job.paths.history_input, elsewhere, [("2024-01-01", 9.0)])
    # When an upload for 7 overlapping its history is processed
    job.upload(HEADER + "7,2024-01-02,20\n7,2024-01-03,30\n")
    assert job.run() == 0
    # Then only 7's shard is written: 7 merged (the upload wins), the neighbour unchanged
    written = {path.name for path in parts_in(job.paths.history_output)}
    assert written == {history_shard_name(history_shard_of("7"))}
    stored = read_rows(parts_in(job.paths.history_output))
    assert stored == {
        "7": [("2024-01-01", 1.0), ("2024-01-02", 20.0), ("2024-01-03", 30.0)],
        neighbour: [("2024-01-01", 5.0)],
    }
    # And the training input has 7 alone, with its whole history
    assert job.train_customers() == {"7"}
    assert job.train("7") == stored["7"]
    summary = job.summary
    assert (summary.history_shards_written, summary.train_parts) == (1, 1)
    assert (summary.new_customers, summary.days_written) == (0, 3)
    assert (summary.readings_new, summary.readings_replaced, summary.readings_changed) == (1, 1, 1)


def test_training_parts_are_a_multiple_of_the_instances_and_within_a_customer_of_even(
    job: Job,
) -> None:
    # Given 30 customers
    job.upload(HEADER + "".join(f"c{i},2024-01-0{d},{i}\n" for i in range(30) for d in (1, 2)))
    # When processed for a training job of 3 instances
    assert job.run("--training-instances", "3") == 0
    # Then there are 4 parts per instance, every customer in exactly one
    parts = parts_in(job.paths.train_output)
    assert [p.name for p in parts] == [f"part-{i:05d}.parquet" for i in range(12)]
    per_part = [set(read_rows([p])) for p in parts]
    assert sum(len(c) for c in per_part) == 30
    assert set().union(*per_part) == {f"c{i}" for i in range(30)}
    assert max(map(len, per_part)) - min(map(len, per_part)) <= 1
    assert job.summary.train_parts == 12


def test_fewer_customers_than_parts_give_one_part_each(job: Job) -> None:
    job.upload(HEADER + "a,2024-01-01,1\nb,2024-01-01,2\n")
    assert job.run("--training-instances", "4") == 0
    assert len(parts_in(job.paths.train_output)) == 2


def test_a_shard_with_other_columns_is_refused(job: Job) -> None:
    # Given a shard of totals (one row per customer and day), not readings
    name = history_shard_name(history_shard_of("a"))
    job.paths.history_input.mkdir(parents=True)
    totals = pa.table(
        {
            "customer_id": ["a"],
            "ds": pa.array([0], pa.timestamp("us")),
            "y": [24.0],
        }
    )
    pq.write_table(totals, job.paths.history_input / name)
    job.upload(HEADER + "a,2024-01-01,1\n")
    # When the job runs, it fails naming the shard, its columns and what to do
    assert job.run() == 1
    message = job.message
    assert (
        name in message and "['customer_id', 'ds', 'y'], not ['customer_id', 'ts', 'y']" in message
    )
    assert "Restore it from the bucket's versions" in message
    assert job.train_customers() == set()


def test_an_unreadable_shard_fails_the_job_naming_it(job: Job) -> None:
    name = history_shard_name(history_shard_of("a"))
    job.paths.history_input.mkdir(parents=True)
    (job.paths.history_input / name).write_bytes(b"PAR1 not really")
    job.upload(HEADER + "a,2024-01-01,1\n")
    assert job.run() == 1
    assert name in job.message and "not a readable Parquet file" in job.message
    assert job.train_customers() == set()


def test_a_shard_with_other_columns_fails_the_job_naming_it(job: Job) -> None:
    name = history_shard_name(history_shard_of("a"))
    job.paths.history_input.mkdir(parents=True)
    pq.write_table(pa.table({"customer": ["a"], "y": [1.0]}), job.paths.history_input / name)
    job.upload(HEADER + "a,2024-01-01,1\n")
    assert job.run() == 1
    assert name in job.message and "columns" in job.message


def test_a_store_in_another_number_of_shards_is_refused(job: Job) -> None:
    job.paths.history_input.mkdir(parents=True)
    other = HISTORY_SHARDS * 2
    (job.paths.history_input / f"shard-0001-of-{other:04d}.parquet").write_bytes(b"")
    job.upload(HEADER + "a,2024-01-01,1\n")
    assert job.run() == 1
    assert f"in {other} shards" in job.message


def test_hourly_rows_keep_their_hours_in_parts_and_shards(job: Job, tmp_path: Path) -> None:
    job.upload(HEADER + "a,2024-01-01T05:10:00Z,1\na,2024-01-01T05:50:00Z,2\n")
    assert job.run("--frequency", "H") == 0
    assert job.train("a") == [("2024-01-01T05:00:00", 3.0)]
    # And the history keeps the readings themselves
    assert job.history("a") == [("2024-01-01T05:10:00", 1.0), ("2024-01-01T05:50:00", 2.0)]


def test_every_training_part_says_the_runs_last_period(job: Job) -> None:
    # Given a stored customer whose history ends later than the upload's readings
    write_history(job.paths.history_input, "7", [("2024-01-01", 1.0), ("2024-03-05", 2.0)])
    # When an upload for it and for customers ending earlier is processed into several parts
    job.upload(HEADER + "7,2024-01-02,3\n8,2024-02-01,4\n9,2024-02-10,5\n10,2024-01-20,6\n")
    assert job.run() == 0
    parts = sorted(job.paths.train_output.glob("part-*.parquet"))
    assert len(parts) > 1
    # Then every part, those without that customer too, names the latest period of the run
    for part in parts:
        said = pq.ParquetFile(part).metadata.metadata[RUN_LAST_PERIOD_KEY.encode()]
        assert said == b"2024-03-05T00:00:00.000000"


@pytest.mark.parametrize("compressed", [False, True])
def test_the_spill_gives_back_the_text_of_the_rows_asked_for_in_their_order(
    tmp_path: Path, compressed: bool
) -> None:
    # Given three blocks of four rows set aside, the middle block's second row rejected
    spill = ShardSpill(tmp_path, compressed)
    ids = ["a", "b", "c", "d"]
    for block in range(3):
        accepted = np.array([0, 2, 3] if block == 1 else [0, 1, 2, 3])
        text = (
            pa.array([f"t{block}.{row}" for row in range(4)]),
            pa.array([f"v{block}.{row}" for row in range(4)]),
        )
        codes = accepted.astype(np.int64)
        spill.add(ids, codes, codes * 10, codes * 1.5, block * 4 + accepted + 2, text, accepted)
    spill.close()

    # When rows are asked for across the blocks, out of order and one twice
    rows = np.concatenate([spill.read(shard).column("row").to_numpy() for shard in spill.shards])
    asked = np.array([11, 0, 6, 4, 6])
    timestamps, consumption = spill.text(asked)

    # Then each row's own text comes back, in the order asked
    assert sorted(rows.tolist()) == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]
    assert timestamps.to_pylist() == ["t2.3", "t0.0", "t1.2", "t1.0", "t1.2"]
    assert consumption.to_pylist() == ["v2.3", "v0.0", "v1.2", "v1.0", "v1.2"]
    assert spill.text(np.array([], dtype=np.int64))[0].to_pylist() == []


@pytest.mark.parametrize("sorted_by_customer", [True, False], ids=["runs", "shuffled"])
def test_the_spill_keeps_each_shards_rows_in_file_order(
    tmp_path: Path, sorted_by_customer: bool
) -> None:
    # Given a block of 100 customers' rows, in runs by customer or shuffled (more runs
    # than the spill writes as they are)
    ids = [f"c{number}" for number in range(100)]
    codes = np.repeat(np.arange(100, dtype=np.int64), 12)
    if not sorted_by_customer:
        codes = np.random.default_rng(1).permutation(codes)
    rows = np.arange(len(codes), dtype=np.int64)
    text = (pa.array([""] * len(codes)), pa.array([""] * len(codes)))
    spill = ShardSpill(tmp_path)

    # When it is set aside
    spill.add(ids, codes, rows * 10, rows * 0.5, rows + 2, text, rows)
    spill.close()

    # Then each shard holds exactly its customers' rows, in file order
    for shard in range(HISTORY_SHARDS):
        mine = rows[[history_shard_of(ids[code]) == shard for code in codes]]
        read = spill.read(shard) if shard in spill.shards else None
        got = read.column("row").to_numpy() if read is not None else np.zeros(0, np.int64)
        assert got.tolist() == mine.tolist()
        if read is not None:
            assert read.column("code").to_numpy().tolist() == codes[mine].tolist()
            assert read.column("line").to_numpy().tolist() == (mine + 2).tolist()
    assert spill.codes.tolist() == list(range(100))


def test_the_spill_is_compressed_only_where_the_volume_needs_it() -> None:
    gb = 10**9
    # A plain upload whose readings fit half the free space uncompressed: not compressed
    assert not compress_for(2 * gb, gzip=False, free_bytes=28 * gb)
    # One that would not fit, or a gzip that might hold ten times its size of CSV: compressed
    assert compress_for(8 * gb, gzip=False, free_bytes=28 * gb)
    assert compress_for(1 * gb, gzip=True, free_bytes=28 * gb)
    assert not compress_for(100 * 2**20, gzip=True, free_bytes=28 * gb)
