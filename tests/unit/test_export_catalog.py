"""The Glue tables of template.yaml describe the Parquet the training job writes."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from fleetcast.embedded.template import LocalTemplate
from fleetcast_training.run_exports import ACCURACY_SCHEMA, FORECAST_SCHEMA, exports_prefix

TEMPLATE = LocalTemplate(Path(__file__).resolve().parents[2] / "template.yaml")
# Athena's name for each Arrow type the exports use.
ATHENA_TYPES = {
    pa.string(): "string",
    pa.float64(): "double",
    pa.int64(): "bigint",
    pa.int32(): "int",
    pa.bool_(): "boolean",
    pa.timestamp("ms"): "timestamp",
}


@pytest.mark.parametrize(
    ("logical_id", "schema", "table"),
    [
        ("ForecastsTable", FORECAST_SCHEMA, "forecasts"),
        ("AccuracyTable", ACCURACY_SCHEMA, "accuracy"),
    ],
)
def test_each_glue_table_reads_its_parquet_with_run_id_projected(
    logical_id: str, schema: pa.Schema, table: str
) -> None:
    properties = TEMPLATE.resolve(TEMPLATE.resources[logical_id]["Properties"])
    table_input = properties["TableInput"]
    # Then the columns are the files' own, in order, run_id being the partition key
    columns = [(c["Name"], c["Type"]) for c in table_input["StorageDescriptor"]["Columns"]]
    expected = [(f.name, ATHENA_TYPES[f.type]) for f in schema if f.name != "run_id"]
    assert columns == expected
    assert table_input["PartitionKeys"] == [{"Name": "run_id", "Type": "string"}]
    # And the projection finds a run's parts where the checkpoint sync puts them
    parameters = table_input["Parameters"]
    assert parameters["projection.enabled"] == "true"
    assert parameters["projection.run_id.type"] == "injected"
    bucket = TEMPLATE.physical_name("ArtifactsBucket")
    run_id = "q0000000907-20261129t100000"
    location = parameters["storage.location.template"].replace("${run_id}", run_id)
    assert location == f"s3://{bucket}/{exports_prefix(run_id, table)}"
    assert properties["DatabaseName"] == TEMPLATE.physical_name("ExportsDatabase")


def test_the_database_name_is_one_athena_takes_unquoted() -> None:
    # The default prefix gives lower case letters and underscores only
    assert TEMPLATE.physical_name("ExportsDatabase") == "fleetcast_exports"
