"""Prophet's CmdStan backend with less work around each fit, and the same optimum.

Every Prophet fit runs the compiled CmdStan program once: cmdstanpy writes the data and
initial values as JSON, starts the process, and reads its CSV output. Two things here
trim that without touching what CmdStan computes:

- the JSON is written by the C encoder (``json.dumps``) instead of stanio's pure-Python
  streaming encoder; both print floats with ``repr``, so CmdStan reads identical bytes;
- each fit's files live in a fresh directory under a scratch root (``/dev/shm`` when it
  has room), removed as soon as the fit is read back, so thousands of fits leave nothing
  behind and, in shared memory, never wait on the instance's disk.

Prophet's own logic (L-BFGS, Newton for short series or as a fallback, default
tolerances, initial values) is unchanged: :class:`ScratchStanBackend` only swaps the
``optimize`` that Prophet's ``CmdStanPyBackend.fit`` calls.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from prophet.models import CmdStanPyBackend

SHARED_MEMORY = Path("/dev/shm")
# Room one worker needs in shared memory: the data JSON of one year of hourly data with
# every seasonality is ~7 MB; leave a wide margin for CmdStan's output.
_SCRATCH_BYTES_PER_WORKER = 64 * 1024 * 1024


def scratch_parent(workers: int) -> Path | None:
    """``/dev/shm`` when it exists with room for every worker, else None (the system
    temporary directory). Docker's default /dev/shm is only 64 MB."""
    try:
        stats = shutil.disk_usage(SHARED_MEMORY)
    except OSError:
        return None
    return SHARED_MEMORY if stats.free >= workers * _SCRATCH_BYTES_PER_WORKER else None


def silence_stan_logging() -> None:
    """cmdstanpy logs two lines per fit, Prophet one per disabled seasonality and a
    warning for every scored window just short of two years with yearly seasonality on:
    at thousands of fits that would be most of the job's log. Errors still show."""
    logging.getLogger("cmdstanpy").disabled = True
    logging.getLogger("prophet").setLevel(logging.ERROR)


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} as Stan data")


class _ScratchModel:
    """Stands in for ``CmdStanModel`` inside Prophet's backend (only ``optimize`` is used)."""

    def __init__(self, model: Any, scratch: Path) -> None:
        self._model = model
        self._scratch = scratch

    def optimize(self, *, data: dict[str, Any], inits: dict[str, Any], **kwargs: Any) -> Any:
        run_dir = Path(tempfile.mkdtemp(prefix="fit-", dir=self._scratch))
        try:
            data_file = run_dir / "data.json"
            inits_file = run_dir / "inits.json"
            data_file.write_text(json.dumps(data, default=_plain))
            inits_file.write_text(json.dumps(inits, default=_plain))
            # CmdStanMLE reads the CSV when it is built, so the files can go right after.
            return self._model.optimize(
                data=str(data_file), inits=str(inits_file), output_dir=str(run_dir), **kwargs
            )
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)


class ScratchStanBackend(CmdStanPyBackend):
    """One per worker process, shared by all the Prophet models it fits (one at a time)."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        super().__init__()

    def load_model(self) -> Any:
        return _ScratchModel(super().load_model(), self._scratch)
