"""A 1 GB upload is streamed: the processing container reads it block by block, in less
memory than the file itself, and accounts for every row.

The file is generated on disk (about 29 million hourly readings of 2,100 customers) and
the container's own entrypoint runs in a child process, as on SageMaker, so its peak
resident memory can be read from the operating system.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from fleetcast_contracts.opt_ml import OPT_ML_ENV
from fleetcast_contracts.processing import ProcessingPaths, ProcessingSummary

FILE_BYTES = 1_000_000_000
HOURS = 14_000  # about 19 months of hourly readings per customer
HEADER = b"customer_id,timestamp,consumption\n"
# The entrypoint as SageMaker runs it, reporting its own peak resident memory on exit.
MEASURED_ENTRYPOINT = """
import atexit, resource, runpy, sys
atexit.register(lambda: print(
    f"peak_rss_kib={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}", file=sys.stderr))
sys.argv = ["fleetcast_processing"]
runpy.run_module("fleetcast_processing", run_name="__main__")
"""


def write_upload(path: Path) -> tuple[int, int]:
    """A CSV of at least FILE_BYTES; returns (customers, rows)."""
    stamps = pd.date_range("2024-01-01", periods=HOURS, freq="h").strftime("%Y-%m-%dT%H:%M:%SZ")
    hourly = np.round(100 + 50 * np.sin(np.arange(HOURS) * 2 * np.pi / 24), 3).astype(str)
    # One customer's rows, with a fixed-width id to swap for each customer's own.
    template = "".join(f"m00000,{s},{v}\n" for s, v in zip(stamps, hourly, strict=True)).encode()
    customers, written = 0, 0
    with path.open("wb") as upload:
        upload.write(HEADER)
        while written < FILE_BYTES:
            upload.write(template.replace(b"m00000,", f"m{customers:05d},".encode()))
            written += len(template)
            customers += 1
    return customers, customers * HOURS


def test_a_1_gb_upload_is_processed_in_less_memory_than_its_size(tmp_path: Path) -> None:
    # Given a 1 GB upload
    paths = ProcessingPaths.under(tmp_path / "opt_ml")
    paths.raw_input.mkdir(parents=True)
    upload = paths.raw_input / "meters.csv"
    customers, rows = write_upload(upload)
    size = upload.stat().st_size
    assert size >= FILE_BYTES

    # When the processing container's entrypoint runs on it
    finished = subprocess.run(
        [sys.executable, "-c", MEASURED_ENTRYPOINT],
        env={**os.environ, OPT_ML_ENV: str(tmp_path / "opt_ml")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    upload.unlink()  # pytest keeps recent temporary folders; 1 GB is not worth keeping
    peak = re.search(r"peak_rss_kib=(\d+)", finished.stderr)
    assert peak is not None, finished.stderr[-2000:]
    peak_bytes = int(peak.group(1)) * 1024

    # Then every row is accepted and every customer has its file
    assert finished.returncode == 0, finished.stderr[-2000:]
    summary = ProcessingSummary.model_validate_json(
        (paths.report_output / "summary.json").read_text()
    )
    assert (summary.rows_read, summary.rows_accepted, summary.rows_rejected) == (rows, rows, 0)
    assert summary.customers == customers
    assert summary.train_parts == len(list(paths.train_output.glob("*.parquet"))) > 0
    assert summary.days_written == sum(
        pq.ParquetFile(part).metadata.num_rows for part in paths.train_output.glob("*.parquet")
    )
    # And it progressed block by block, logging as it went
    assert finished.stderr.count("rows read") >= 10
    # And it never held the file in memory: a pandas read of it needs several times its size
    assert peak_bytes < size, f"peak {peak_bytes / 1e6:,.0f} MB"
