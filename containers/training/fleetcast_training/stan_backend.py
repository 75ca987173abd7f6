"""Prophet's Stan backend for training: the exact in-process fit, else CmdStan with less
work around each fit.

:class:`FleetcastStanBackend` solves linear, all-additive models exactly in-process
(:mod:`fleetcast_training.exact_map`) and hands any other model, or a fit whose optimality
check fails, to :class:`ScratchStanBackend`, counting which ran and why.

The CmdStan path:

Every Prophet fit runs the compiled CmdStan program once: cmdstanpy writes the data and
initial values as JSON, starts the process, and reads its CSV output. Two things here
trim that without touching what CmdStan computes:

- the JSON is written by the C encoder (``json.dumps``) instead of stanio's pure-Python
  streaming encoder, and its long vectors and matrices by Arrow (:func:`stan_json`);
  every number is printed with the shortest digits that read back as the same double,
  so CmdStan reads identical numbers;
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
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from prophet.models import CmdStanPyBackend

from fleetcast_training.exact_map import FallbackReason, NotSolvedExactly, solve

logger = logging.getLogger(__name__)

# The fit-method names that manifests, logs and metrics count.
IN_PROCESS = "in-process"
CMDSTAN = "cmdstan"


def fallback_name(reason: FallbackReason) -> str:
    return f"{CMDSTAN} ({reason.value})"


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


# Below this many numbers the C encoder is as quick as the round trip through Arrow.
_ARROW_MIN_NUMBERS = 256


def stan_json(values: dict[str, Any]) -> str:
    """``json.dumps(values)``, with long vectors and matrices of finite numbers printed by
    Arrow, about five times faster for Prophet's feature matrix.

    Arrow prints the shortest digits that read back as the same double, as ``repr``
    does, sometimes spelt differently (``0.00001`` for ``1e-05``, ``7`` for ``7.0``):
    CmdStan reads the very same numbers either way.
    """
    members = (f"{json.dumps(name)}:{_value_json(value)}" for name, value in values.items())
    return "{" + ",".join(members) + "}"


def _value_json(value: Any) -> str:
    if isinstance(value, list | np.ndarray) and len(value) > 0:
        array = np.asarray(value)
        if (
            array.size >= _ARROW_MIN_NUMBERS
            and array.ndim in (1, 2)
            and array.dtype.kind in "fiu"
            and np.isfinite(array).all()
            # Arrow writes -0.0 as "-0", which a JSON reader may take for the integer 0.
            and not np.signbit(array[array == 0]).any()
        ):
            return _numbers_json(array)
    return json.dumps(value, default=_plain)


def _numbers_json(array: npt.NDArray[Any]) -> str:
    text = pc.cast(pa.array(array.ravel()), pa.string())
    if array.ndim == 1:
        return (
            "["
            + pc.binary_join(pa.ListArray.from_arrays([0, len(text)], text), ",")[0].as_py()
            + "]"
        )
    columns = array.shape[1]
    offsets = pa.array(np.arange(0, array.size + 1, columns, dtype=np.int32))
    rows = pc.binary_join(pa.ListArray.from_arrays(offsets, text), ",").to_pylist()
    return "[[" + "],[".join(rows) + "]]"


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
            data_file.write_text(stan_json(data))
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


class FleetcastStanBackend(ScratchStanBackend):
    """The exact in-process MAP fit (:mod:`fleetcast_training.exact_map`) where it solves
    the model, CmdStan as above otherwise; :attr:`fit_methods` counts which ran and why.

    Prophet calls ``fit`` and keeps the returned params, so the fitted model, its
    ``predict`` and its ``model_to_json`` are Prophet's own either way. Options passed to
    ``Prophet.fit`` (``algorithm``, ``iter``, ``init``...) are CmdStan's: given any, the
    fit is CmdStan's.
    """

    def __init__(self, scratch: Path) -> None:
        super().__init__(scratch)
        self.fit_methods: Counter[str] = Counter()
        # The Stan data of the latest fit: scoring builds the holdout fit's from it.
        self.last_stan_data: dict[str, Any] | None = None

    def fit(
        self, stan_init: dict[str, Any], stan_data: dict[str, Any], **kwargs: Any
    ) -> OrderedDict[str, npt.NDArray[Any]]:
        self.last_stan_data = stan_data
        try:
            if kwargs:
                raise NotSolvedExactly(FallbackReason.CMDSTAN_OPTIONS, ", ".join(sorted(kwargs)))
            solution = solve(stan_data)
        except NotSolvedExactly as fallback:
            logger.debug("fitting with CmdStan: %s", fallback)
            self.fit_methods[fallback_name(fallback.reason)] += 1
            return super().fit(stan_init, stan_data, **kwargs)
        self.stan_fit = None
        self.fit_methods[IN_PROCESS] += 1
        return solution.prophet_params()
