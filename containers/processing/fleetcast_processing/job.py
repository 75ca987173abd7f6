"""One processing job: validate an upload, merge its readings into each customer's stored
history, write the training parts (totals per customer and period) and the report.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from fleetcast_contracts.frequency import Frequency
from fleetcast_contracts.processing import (
    CHANGED_FILE,
    RAW_INPUT,
    REJECTED_FILE,
    SUMMARY_FILE,
    JobLimits,
    ProcessingPaths,
    ProcessingSummary,
)
from fleetcast_processing.changes import ChangedReadings
from fleetcast_processing.duplicates import MAX_CUSTOMERS
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.merging import MergeCounts, MergeSettings, TrainingOutput, merge_upload
from fleetcast_processing.metadata_store import load_store, write_calendars
from fleetcast_processing.report import RejectedRows, write_summary
from fleetcast_processing.shards import (
    TrainParts,
    fleet_teacher_limit,
    part_assignment,
    write_fleet_teachers,
)
from fleetcast_processing.source import (
    DEFAULT_BLOCK_SIZE,
    RowBlock,
    read_blocks,
    read_header,
)
from fleetcast_processing.spill import ShardSpill, compress_for
from fleetcast_processing.upload import UploadReader
from fleetcast_processing.usage import UseRules
from fleetcast_processing.validation import (
    ACCEPTED,
    FUTURE_TOLERANCE,
    CheckedBlock,
    CustomerCodes,
    check_rows,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSettings:
    paths: ProcessingPaths
    frequency: Frequency = Frequency.DAILY
    source_name: str | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    # The training job's instances: the run's training parts are a multiple of them.
    training_instances: int = 1
    limits: JobLimits = field(default_factory=JobLimits)
    # Readings more than a day after this are rejected as out of range.
    now: datetime = field(default_factory=lambda: datetime.now(UTC))


def find_upload(folder: Path, name: str | None = None) -> Path:
    """The file in the raw input folder called ``name``, else its only file.

    The raw input is an S3 prefix, so ``incoming/a.csv`` also brings ``a.csv.gz`` along:
    the job names the file it was started for.
    """
    if name and Path(name).name == name and (folder / name).is_file():
        return folder / name
    files = sorted(path for path in folder.rglob("*") if path.is_file()) if folder.is_dir() else []
    if len(files) != 1:
        names = ", ".join(str(path.relative_to(folder)) for path in files[:5])
        found = f"{len(files)}: {names}{', ...' if len(files) > 5 else ''}" if files else "none"
        raise UnusableInputError(
            f"the raw input ({RAW_INPUT}) must hold exactly one file, found {found}."
        )
    return files[0]


class _Progress:
    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.rows_read = 0
        self.rows_accepted = 0
        self.blank_rows = 0
        self.lines = 0
        self.continued_lines = 0

    def add(self, block: RowBlock, accepted: int, rejected: int) -> None:
        """Count a block read (``accepted`` of its rows set aside) and log the progress."""
        self.rows_read += len(block) + len(block.malformed)
        self.rows_accepted += accepted
        self.blank_rows += block.blank_rows
        self.lines += block.line_count
        self.continued_lines += block.continued_lines
        self.log(block, rejected)

    def log(self, block: RowBlock, rejected: int) -> None:
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        logger.info(
            "%s rows read (%s accepted, %s rejected), %.1f MB of CSV, %s rows/s",
            f"{self.rows_read:,}",
            f"{self.rows_accepted:,}",
            f"{rejected:,}",
            block.bytes_read / 1e6,
            f"{self.rows_read / elapsed:,.0f}",
        )


def run(upload_path: Path, settings: JobSettings) -> ProcessingSummary:
    """Process one upload; raises :class:`UnusableInputError` when it cannot be used at all.

    Two passes: the upload is read once, its accepted readings set aside per history shard
    (fleetcast_processing.spill); then each shard's readings are deduplicated and merged
    into its stored readings (fleetcast_processing.merging), and the upload's customers'
    periods written as the training parts. Memory holds one block of the upload, then one
    shard.
    """
    paths = settings.paths
    source_name = settings.source_name or upload_path.name
    customers = CustomerCodes()
    progress = _Progress()
    latest = settings.now + FUTURE_TOLERANCE
    paths.scratch.mkdir(parents=True, exist_ok=True)

    with (
        UploadReader.open(upload_path, settings.limits.max_upload_bytes) as upload,
        RejectedRows(
            paths.report_output / REJECTED_FILE, latest, settings.limits.max_period_total
        ) as rejected,
        tempfile.TemporaryDirectory(prefix="job-", dir=paths.scratch) as scratch,
    ):
        header = read_header(upload)
        progress.lines = header.line
        logger.info(
            "reading %s (%s, delimiter %r, columns %s)",
            source_name,
            "gzip" if upload.compressed else "plain",
            header.delimiter,
            ", ".join(header.columns),
        )
        compressed = _spill_compressed(upload_path, upload.compressed, Path(scratch), source_name)
        with closing(ShardSpill(Path(scratch), compressed)) as spill:
            for block in read_blocks(upload, header, settings.block_size):
                accepted = _set_aside(
                    block, settings, customers, rejected, spill, header.delimiter == ";"
                )
                progress.add(block, accepted, rejected.total)
        merged, train_parts = _merge(spill, customers, settings, rejected)
        progress.rows_accepted = progress.rows_read - rejected.total
        _check_usable(progress, rejected)

    touched = {code: customers.ids[code] for code in sorted(merged.customers)}
    teachers = write_fleet_teachers(
        set(touched.values()),
        fleet_teacher_limit(len(touched), settings.training_instances),
        settings.frequency,
        UseRules(settings.limits.incomplete_below, settings.limits.zero_run_days),
        paths.history_input,
        paths.fleet_output,
    )
    if teachers:
        logger.info("the fleet family also learns from %s stored customers", f"{len(teachers):,}")
    # The holidays training adds to each customer it trains, and to the fleet family's
    # teachers (metadata/ holds the store).
    write_calendars(
        paths.calendars_output, [*touched.values(), *teachers], load_store(paths.metadata_input)
    )
    summary = _summary(
        source_name, settings, progress, header.line, rejected, merged, train_parts, touched
    )
    write_summary(paths.report_output / SUMMARY_FILE, summary)
    logger.info(
        "wrote %s customers (%s new), %s periods, in %.2f s",
        f"{summary.customers:,}",
        f"{summary.new_customers:,}",
        f"{summary.days_written:,}",
        time.perf_counter() - progress.started,
    )
    return summary


def _spill_compressed(
    upload_path: Path, upload_compressed: bool, scratch: Path, source_name: str
) -> bool:
    """Whether the readings set aside are LZ4-compressed (spill.compress_for)."""
    upload_bytes, free_bytes = upload_path.stat().st_size, shutil.disk_usage(scratch).free
    compressed = compress_for(upload_bytes, upload_compressed, free_bytes)
    if compressed:
        logger.info(
            "setting the readings aside LZ4-compressed: uncompressed, those of %s "
            "(%.1f GB) could take more than half of the volume's %.1f GB free",
            source_name,
            upload_bytes / 1e9,
            free_bytes / 1e9,
        )
    return compressed


def _set_aside(
    block: RowBlock,
    settings: JobSettings,
    customers: CustomerCodes,
    rejected: RejectedRows,
    spill: ShardSpill,
    decimal_comma: bool,
) -> int:
    """The first pass, one block: its rejected rows to the report, the rest to the spill;
    how many were set aside."""
    checked = _check_block(block, customers, settings.now, decimal_comma)
    rejected.add(block, checked.reasons)
    ok = np.flatnonzero(checked.reasons == ACCEPTED)
    codes, instants, values, lines = (
        checked.codes,
        checked.instants,
        checked.consumption,
        block.lines,
    )
    if len(ok) < len(block):  # else every row is accepted (the usual block): no copies
        codes, instants, values, lines = codes[ok], instants[ok], values[ok], lines[ok]
    spill.add(
        customers.ids, codes, instants, values, lines, (block.timestamp, block.consumption), ok
    )
    return len(ok)


def _merge(
    spill: ShardSpill, customers: CustomerCodes, settings: JobSettings, rejected: RejectedRows
) -> tuple[MergeCounts, int]:
    """The second pass: each shard merged into its history, the training parts written;
    the merge's counts and the number of parts."""
    paths = settings.paths
    changed = ChangedReadings()
    # The parts are known once the file is read, so each shard's customers go to them
    # as it is merged (a customer whose every period is rejected then has none).
    part_of = part_assignment(customers.ids, spill.codes, settings.training_instances)
    with TrainParts(paths.train_output) as parts:
        merged = merge_upload(
            spill,
            customers.ids,
            MergeSettings(
                settings.frequency,
                settings.limits.max_period_total,
                paths.history_input,
                paths.history_output,
                UseRules(settings.limits.incomplete_below, settings.limits.zero_run_days),
            ),
            rejected,
            changed,
            TrainingOutput(parts, part_of),
        )
    changed.write(paths.report_output / CHANGED_FILE)
    return merged, parts.written


def _check_usable(progress: _Progress, rejected: RejectedRows) -> None:
    if progress.rows_read == 0:
        raise UnusableInputError("the file has a header but no data rows.")
    if progress.rows_accepted == 0:
        reasons_text = ", ".join(
            f"{reason} {count:,}" for reason, count in rejected.by_reason.most_common()
        )
        raise UnusableInputError(
            f"none of its {progress.rows_read:,} data rows is usable ({reasons_text}); "
            f"the first rejected row is {rejected.first}."
        )
    if progress.blank_rows:
        logger.info("skipped %s blank rows", f"{progress.blank_rows:,}")


def _summary(
    source_name: str,
    settings: JobSettings,
    progress: _Progress,
    header_line: int,
    rejected: RejectedRows,
    merged: MergeCounts,
    train_parts: int,
    touched: dict[int, str],
) -> ProcessingSummary:
    return ProcessingSummary(
        source_name=source_name,
        frequency=settings.frequency.value,
        lines=progress.lines,
        header_line=header_line,
        blank_lines=progress.blank_rows,
        continued_lines=progress.continued_lines,
        rows_read=progress.rows_read,
        rows_accepted=progress.rows_accepted,
        rows_rejected=rejected.total,
        rejected_by_reason=dict(sorted(rejected.by_reason.items())),
        rejected_list_limit=rejected.per_reason,
        customers=len(touched),
        new_customers=len(touched) - merged.customers_with_history,
        days_written=merged.periods_written,
        days_uploaded=merged.periods_uploaded,
        readings_new=merged.readings_new,
        readings_replaced=merged.readings_replaced,
        readings_changed=merged.readings_changed,
        readings_stored=merged.readings_stored,
        periods_by_use=dict(sorted(merged.use.by_use.items())),
        unused_periods=dict(sorted(merged.use.unused.items())),
        customers_by_interval_s=dict(sorted(merged.use.by_interval.items())),
        history_shards_written=merged.history_shards,
        train_parts=train_parts,
        customers_list=sorted(touched.values()),
    )


def _check_block(
    block: RowBlock, customers: CustomerCodes, now: datetime, decimal_comma: bool
) -> CheckedBlock:
    """Every rule but duplicates, which are found a history shard at a time."""
    codes = customers.encode(block.customer_id)
    if len(customers.ids) > MAX_CUSTOMERS:
        raise UnusableInputError(f"the file has more than {MAX_CUSTOMERS:,} customer ids.")
    return check_rows(codes, block.timestamp, block.consumption, now, decimal_comma)
