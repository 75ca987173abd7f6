"""``python -m fleetcast_processing [--frequency D|H] [--upload-file FILE]
[--input-kind readings|metadata]``: the container's entrypoint.

Exit code 0 when the upload was processed, 1 when it was not; either way a one-paragraph
message for people goes to the message file (SageMaker shows its first 1 KB as the job's
ExitMessage, failed or not; a failed job's FailureReason is SageMaker's own) and to stderr.
"""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from pydantic import ValidationError

from fleetcast_contracts.frequency import CODES, Frequency
from fleetcast_contracts.object_keys import upload_file_name
from fleetcast_contracts.processing import (
    BLOCK_SIZE_ARGUMENT,
    FREQUENCY_ARGUMENT,
    INPUT_KIND_ARGUMENT,
    INPUT_KINDS,
    MESSAGE_LIMIT,
    METADATA,
    READINGS,
    TRAINING_INSTANCES_ARGUMENT,
    UPLOAD_FILE_ARGUMENT,
    JobLimits,
    ProcessingPaths,
    source_key_from_environment,
)
from fleetcast_processing.errors import UnusableInputError
from fleetcast_processing.job import JobSettings, find_upload, run
from fleetcast_processing.metadata import MetadataPaths, run_metadata
from fleetcast_processing.report import success_message
from fleetcast_processing.source import DEFAULT_BLOCK_SIZE
from fleetcast_processing.usage import UseRules

logger = logging.getLogger("fleetcast_processing")


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    # argparse would print usage and exit 2; the job must write its message file instead.
    def error(self, message: str) -> NoReturn:
        raise _ArgumentError(message)


def argument_parser() -> argparse.ArgumentParser:
    """The parser of the arguments start-processing writes
    (:func:`fleetcast_contracts.processing.container_arguments`)."""
    parser = _Parser(prog="python -m fleetcast_processing", description=__doc__)
    parser.add_argument(
        FREQUENCY_ARGUMENT,
        type=str.upper,
        choices=CODES,
        default=Frequency.DAILY.value,
        help="model frequency: D = daily totals per UTC day (default), H = hourly",
    )
    parser.add_argument(
        UPLOAD_FILE_ARGUMENT,
        help="the file in the raw input to read (default: the raw input's only file)",
    )
    parser.add_argument(
        INPUT_KIND_ARGUMENT,
        choices=INPUT_KINDS,
        default=READINGS,
        help="what the upload is: meter readings (default) or customer metadata",
    )
    parser.add_argument(
        TRAINING_INSTANCES_ARGUMENT,
        type=int,
        default=1,
        help="instances of the run's training job: its input is written in a multiple of "
        "this many parts (default 1)",
    )
    parser.add_argument(
        BLOCK_SIZE_ARGUMENT,
        type=int,
        default=DEFAULT_BLOCK_SIZE,
        help="bytes of CSV read per block (memory use grows with it)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    paths = ProcessingPaths.under()
    source_name = "the upload"
    try:
        args = argument_parser().parse_args(argv)
        limits = JobLimits.from_env(os.environ)
        # The file read is the run's copy of the upload, under a safe name of its own:
        # the report names the upload as it was put in S3.
        source_key = source_key_from_environment(os.environ)
        named = upload_file_name(source_key) if source_key else None
        source_name = named or source_name
        upload = find_upload(paths.raw_input, args.upload_file)
        source_name = named or upload.name
        if args.input_kind == METADATA:
            summary = run_metadata(
                upload,
                MetadataPaths(
                    metadata_input=paths.metadata_input,
                    metadata_output=paths.metadata_output,
                    history_input=paths.history_input,
                    train_output=paths.train_output,
                    calendars_output=paths.calendars_output,
                    report_output=paths.report_output,
                    fleet_output=paths.fleet_output,
                ),
                source_name,
                os.environ.get("FLEETCAST_RUN_ID", ""),
                args.frequency,
                max(args.training_instances, 1),
                UseRules(limits.incomplete_below, limits.zero_run_days),
            )
            _write_message(paths.message_file, success_message(summary))
            logger.info("%s", success_message(summary))
            return 0
        settings = JobSettings(
            paths=paths,
            frequency=Frequency.parse(args.frequency),
            source_name=source_name,
            block_size=max(args.block_size, 1024),
            training_instances=max(args.training_instances, 1),
            limits=limits,
        )
        summary = run(upload, settings)
    except _ArgumentError as error:
        return _fail(paths.message_file, f"Processing did not start: bad arguments: {error}.")
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc'])}: {problem['msg']}"
            for problem in error.errors()
        )
        return _fail(paths.message_file, f"Processing did not start: bad settings: {problems}.")
    except UnusableInputError as error:
        return _fail(paths.message_file, f"Processing failed for {source_name}: {error}")
    except OSError as error:
        if error.errno != errno.ENOSPC:
            return _internal_error(paths.message_file, error)
        return _fail(
            paths.message_file,
            f"Processing failed for {source_name}: the job's volume is full ({error}). The "
            "upload's readings set aside while it is read and the job's outputs need more "
            "room than the volume has: raise the stack's ProcessingVolumeSizeGB, or split "
            "the upload into smaller files.",
        )
    except Exception as error:
        return _internal_error(paths.message_file, error)
    _write_message(paths.message_file, success_message(summary))
    logger.info("%s", success_message(summary))
    return 0


def _internal_error(message_file: Path, error: Exception) -> int:
    logger.exception("unexpected error")
    return _fail(
        message_file,
        f"Processing failed with an internal error ({type(error).__name__}: {error}). "
        "This is a fault in fleetcast, not necessarily in the upload; the job's log has "
        "the details.",
    )


def _fail(message_file: Path, message: str) -> int:
    logger.error("%s", message)
    _write_message(message_file, message)
    return 1


def _write_message(message_file: Path, message: str) -> None:
    paragraph = " ".join(message.split())
    encoded = paragraph.encode()[:MESSAGE_LIMIT].decode("utf-8", "ignore")
    try:
        message_file.parent.mkdir(parents=True, exist_ok=True)
        message_file.write_text(encoded)
    except OSError:
        logger.exception("could not write the message file %s", message_file)


if __name__ == "__main__":
    sys.exit(main())
