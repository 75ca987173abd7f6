"""The per-fleet customer metadata store and the calendars file training reads.

The store is one Parquet object, ``metadata/customers.parquet``: one row per customer
(``customer_id``, ``country``, ``subdivision``, ``attributes`` as a JSON object of the free
columns, ``source_name`` and ``run_id`` of the upload that last set it). Uploads are
processed one at a time in arrival order, so each metadata job reads the store, merges
its file (newest upload wins, customer by customer) and writes it whole; a fleet of a
million customers is a few tens of MB.

Every processing job writes ``calendars.csv`` for the customers it sends to training
(training's ``calendars`` channel): the calendar of each one the store knows.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from fleetcast_contracts.layout import METADATA_STORE_FILE
from fleetcast_contracts.training import CALENDAR_COLUMNS, CALENDARS_FILE
from fleetcast_processing.errors import UnusableInputError

SCHEMA = pa.schema(
    [
        pa.field("customer_id", pa.string(), nullable=False),
        pa.field("country", pa.string(), nullable=False),
        pa.field("subdivision", pa.string()),
        pa.field("attributes", pa.string(), nullable=False),
        pa.field("source_name", pa.string(), nullable=False),
        pa.field("run_id", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class CustomerMetadata:
    customer_id: str
    country: str
    subdivision: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    source_name: str = ""
    run_id: str = ""

    @property
    def calendar(self) -> tuple[str, str | None]:
        return self.country, self.subdivision


def load_store(folder: Path) -> dict[str, CustomerMetadata]:
    """The stored metadata by customer; empty when there is no store yet."""
    path = folder / METADATA_STORE_FILE
    if not path.is_file():
        return {}
    try:
        table = pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as error:
        raise UnusableInputError(
            f"the stored customer metadata ({METADATA_STORE_FILE}) is unreadable: {error}"
        ) from error
    missing = set(SCHEMA.names) - set(table.column_names)
    if missing:
        raise UnusableInputError(
            f"the stored customer metadata lacks the columns {', '.join(sorted(missing))}"
        )
    return {
        row["customer_id"]: CustomerMetadata(
            customer_id=row["customer_id"],
            country=row["country"],
            subdivision=row["subdivision"],
            attributes=json.loads(row["attributes"]),
            source_name=row["source_name"],
            run_id=row["run_id"],
        )
        for row in table.select(SCHEMA.names).to_pylist()
    }


def write_store(folder: Path, store: Mapping[str, CustomerMetadata]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    records = [store[customer_id] for customer_id in sorted(store)]
    table = pa.table(
        {
            "customer_id": [r.customer_id for r in records],
            "country": [r.country for r in records],
            "subdivision": [r.subdivision for r in records],
            "attributes": [json.dumps(dict(r.attributes), sort_keys=True) for r in records],
            "source_name": [r.source_name for r in records],
            "run_id": [r.run_id for r in records],
        },
        schema=SCHEMA,
    )
    path = folder / METADATA_STORE_FILE
    pq.write_table(table, path)
    return path


def write_calendars(
    folder: Path, customer_ids: Iterable[str], store: Mapping[str, CustomerMetadata]
) -> Path:
    """``calendars.csv`` for ``customer_ids``: those the store knows, with their calendar
    (the others get the stack's default country in training). Always written, header
    only when empty: SageMaker fails a job whose channel has no object."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CALENDARS_FILE
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(CALENDAR_COLUMNS)
        for customer_id in sorted(set(customer_ids)):
            record = store.get(customer_id)
            if record is not None:
                writer.writerow([customer_id, record.country, record.subdivision or ""])
    return path
