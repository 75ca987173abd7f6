"""What the parent process keeps of each finished customer of its instance's shard.

A customer's :class:`~fleetcast_training.customer_training.CustomerReport` is about 9 KB
of Python objects (its result's models and dicts, its export forecast's arrays): 450 MB
for an instance's 50,000 customers, held to the end of the job. Here each result is
kept as its JSON (about 1.1 KB), its forecast and accuracy row go to the shard's export
(:class:`~fleetcast_training.export.ShardExport`, which spills them), and the job's
figures (counts, fits, median errors) are added up as the customers finish. The manifest
is then written page by page, each page validated from the JSON it is made of.
"""

from __future__ import annotations

import shutil
import statistics
from array import array
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from fleetcast_contracts.files import write_whole, written_whole
from fleetcast_contracts.training import (
    MANIFEST_PAGE_SIZE,
    manifest_name,
    manifest_summary_name,
)
from fleetcast_contracts.training_manifest import (
    CustomerOutcome,
    CustomerResult,
    ManifestPage,
    ManifestSummary,
    TrainingManifest,
    paged,
)
from fleetcast_training.customer_training import CustomerReport
from fleetcast_training.export import ExportedCustomer, ShardExport
from fleetcast_training.failures import FailureKind


class ShardResults:
    """Every finished customer of the shard, added once each (:meth:`add`)."""

    def __init__(
        self, run_id: str, host: str, hosts: list[str], export: ShardExport | None = None
    ) -> None:
        self._run_id = run_id
        self._host = host
        self._hosts = hosts
        self._export = export
        self._json: dict[str, str] = {}
        self._outcomes: Counter[CustomerOutcome] = Counter()
        self._fits: Counter[str] = Counter()
        self._implausible = 0
        self._smape = array("d")
        self._naive_smape = array("d")
        self._mae = array("d")
        # The customers that failed (CustomerReport.failed: every FAILED one has a kind).
        self.failures: list[tuple[FailureKind, CustomerResult]] = []
        # The CPU the workers spent on the export's forecasts.
        self.export_cpu_seconds = 0.0

    def add(self, report: CustomerReport) -> None:
        result = report.result
        if result.customer_id in self._json:
            raise ValueError(f"customer {result.customer_id} was reported twice")
        self._json[result.customer_id] = result.model_dump_json()
        self._outcomes[result.outcome] += 1
        self._fits.update(result.fit_methods or {})
        self._implausible += result.implausible_periods or 0
        if result.metrics is not None:
            self._smape.append(result.metrics.smape)
            self._naive_smape.append(result.metrics.naive_smape)
            self._mae.append(result.metrics.mae)
        if report.failure_kind is not None:
            self.failures.append((report.failure_kind, result))
        if self._export is not None:
            self._export.add(ExportedCustomer(result, report.forecast, report.export_error))
        self.export_cpu_seconds += report.export_cpu_seconds

    def __contains__(self, customer_id: str) -> bool:
        return customer_id in self._json

    def __len__(self) -> int:
        return len(self._json)

    def count(self, outcome: CustomerOutcome) -> int:
        return self._outcomes[outcome]

    def fit_methods(self) -> dict[str, int]:
        """Every customer's ``fit_methods`` added up (:meth:`TrainingManifest.fit_methods`)."""
        return dict(self._fits)

    def median_errors(self) -> tuple[float, float, float] | None:
        """The scored customers' median holdout sMAPE, seasonal-naive sMAPE and MAE."""
        if not self._smape:
            return None
        return (
            statistics.median(self._smape),
            statistics.median(self._naive_smape),
            statistics.median(self._mae),
        )

    def customers(self) -> Iterator[CustomerResult]:
        """Every customer's result in id order (the manifest's customers), one at a time."""
        for customer_id in sorted(self._json):
            yield CustomerResult.model_validate_json(self._json[customer_id])

    def pages(self, size: int = MANIFEST_PAGE_SIZE) -> Iterator[tuple[str, ManifestPage]]:
        """The manifest's pages in customer id order, each read back from the kept JSON
        as it is cut (:func:`~fleetcast_contracts.training_manifest.paged`)."""
        return paged(self._run_id, self._host, self._hosts, self.customers(), size)

    def write_manifest(self, *directories: Path) -> None:
        """The manifest's pages and summary into the first of ``directories`` (the
        checkpoints), then the whole manifest into each. A manifest there means its pages,
        its summary and the export are there too."""
        first, *others = directories
        for name, page in self.pages():
            write_whole(first / name, page.model_dump_json())
        write_whole(first / manifest_summary_name(self._host), self.summary().model_dump_json())
        written = self._write_whole(first / manifest_name(self._host))
        for directory in others:
            with written_whole(directory / written.name) as partial:
                shutil.copyfile(written, partial)

    def summary(self) -> ManifestSummary:
        """:meth:`ManifestSummary.of` the manifest."""
        return ManifestSummary(
            run_id=self._run_id,
            host=self._host,
            hosts=self._hosts,
            customers=len(self),
            trained=len(self) - len(self.failures),
            failures=sorted((result for _, result in self.failures), key=lambda r: r.customer_id),
            implausible_periods=self._implausible,
        )

    def _write_whole(self, path: Path) -> Path:
        """The whole :class:`TrainingManifest`, written a customer at a time from the kept
        JSON: the manifest's customers are its last field."""
        head = TrainingManifest(
            run_id=self._run_id, host=self._host, hosts=self._hosts, customers=[]
        ).model_dump_json()
        empty = '"customers":[]}'
        assert head.endswith(empty), "TrainingManifest's customers must stay its last field"
        with written_whole(path) as partial, partial.open("w") as out:
            out.write(head[: -len("]}")])
            for number, customer_id in enumerate(sorted(self._json)):
                out.write("," if number else "")
                out.write(self._json[customer_id])
            out.write("]}")
        return path
