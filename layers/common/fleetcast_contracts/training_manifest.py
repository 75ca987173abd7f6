"""What each training instance reports about its shard: ``manifest-{host}.json`` (and the
same in pages) when it is done, and ``progress-{host}.json`` while it trains.

Written by the training container into the checkpoint directory (so it is synced to S3
with the models). register-models reads the manifests; ``fleetcast status`` the progress.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from enum import StrEnum

from pydantic import BaseModel, Field

from fleetcast_contracts.model_archive import HoldoutMetrics, ModelMetadata
from fleetcast_contracts.training import MANIFEST_PAGE_SIZE, manifest_page_name


class CustomerOutcome(StrEnum):
    TRAINED = "trained"
    # Trained before a spot interruption; its checkpointed archive was kept, not refitted.
    RESUMED = "resumed"
    FAILED = "failed"


class CustomerResult(BaseModel):
    customer_id: str
    outcome: CustomerOutcome
    reason: str | None = Field(default=None, description="Why it failed, for FAILED")
    # For FAILED, what kind of failure: the training container's FailureKind
    # (too_few_rows, unreadable, fit_failed, worker_died, invalid_file_name), which
    # `fleetcast status` counts; None in manifests written before kinds were kept. Left out
    # of the JSON when None: the manifests hold every trained customer too.
    kind: str | None = Field(default=None, exclude_if=lambda kind: kind is None)
    rows: int | None = None
    # Its ok periods left out of fitting as implausible (a meter's glitch: training's
    # history.IMPLAUSIBLE_FACTOR); left out of the JSON when None (none).
    implausible_periods: int | None = Field(default=None, exclude_if=lambda count: count is None)
    metrics: HoldoutMetrics | None = None
    fit_seconds: float | None = None
    # How its Prophet fits ran: "in-process" (the exact solver) or "cmdstan (why)", counted.
    fit_methods: dict[str, int] | None = None
    # The archive's metadata (data range, metrics, versions) for TRAINED and RESUMED,
    # so registration needs no download per customer.
    metadata: ModelMetadata | None = None


class TrainingManifest(BaseModel):
    run_id: str
    host: str
    hosts: list[str]
    customers: list[CustomerResult]

    def count(self, outcome: CustomerOutcome) -> int:
        return sum(1 for result in self.customers if result.outcome is outcome)

    def fit_methods(self) -> dict[str, int]:
        """Every customer's ``fit_methods`` added up."""
        total: dict[str, int] = {}
        for result in self.customers:
            for method, count in (result.fit_methods or {}).items():
                total[method] = total.get(method, 0) + count
        return total


class ManifestSummary(BaseModel):
    """An instance's manifest without its trained customers: how many customers it has,
    how many were trained (or resumed), and the failures with their reasons."""

    run_id: str
    host: str
    hosts: list[str]
    customers: int
    trained: int
    failures: list[CustomerResult]
    # The trained customers' periods left out of fitting as implausible, added up.
    implausible_periods: int = 0

    @classmethod
    def of(cls, manifest: TrainingManifest) -> ManifestSummary:
        failures = [r for r in manifest.customers if r.outcome is CustomerOutcome.FAILED]
        return cls(
            run_id=manifest.run_id,
            host=manifest.host,
            hosts=manifest.hosts,
            customers=len(manifest.customers),
            trained=len(manifest.customers) - len(failures),
            failures=failures,
            implausible_periods=sum(r.implausible_periods or 0 for r in manifest.customers),
        )


class ManifestPage(TrainingManifest):
    """Customers ``[first, first + len(customers))`` of an instance's manifest."""

    first: int


def manifest_pages(
    manifest: TrainingManifest, size: int = MANIFEST_PAGE_SIZE
) -> list[tuple[str, ManifestPage]]:
    """The manifest cut into pages, with each page's file name."""
    return list(paged(manifest.run_id, manifest.host, manifest.hosts, manifest.customers, size))


def paged(
    run_id: str,
    host: str,
    hosts: list[str],
    customers: Iterable[CustomerResult],
    size: int = MANIFEST_PAGE_SIZE,
) -> Iterator[tuple[str, ManifestPage]]:
    """The pages of the manifest of these ``customers`` (in its order), with each page's
    file name; ``customers`` is read a page at a time."""
    remaining = iter(customers)
    for number in itertools.count():
        page = list(itertools.islice(remaining, size))
        if not page:
            return
        yield (
            manifest_page_name(host, number),
            ManifestPage(
                run_id=run_id, host=host, hosts=hosts, customers=page, first=number * size
            ),
        )


class TrainingProgress(BaseModel):
    """How many of the instance's customers are done (trained, resumed or failed)."""

    host: str
    done: int
    total: int
