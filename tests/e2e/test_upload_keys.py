"""Any key S3 allows under incoming/ is processed and trained, end to end: keys with '+',
'%', ':', spaces and non-ASCII letters, and one of S3's full 1024 bytes."""

import json
from pathlib import Path

import pytest
from test_pipeline import finished, readings, registry, to_csv, upload

from fleetcast.embedded.stack import EmbeddedStack
from fleetcast_common.contracts import layout

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
KEY_EVENTS = [
    "s3_object_created_plus_key.json",
    "s3_object_created_unusual_key.json",
    "s3_object_created_longest_key.json",
]


def sample_key(name: str) -> str:
    key: str = json.loads((ROOT / "events" / name).read_text())["detail"]["object"]["key"]
    return key


@pytest.mark.parametrize("event_name", KEY_EVENTS)
def test_an_upload_under_any_key_s3_allows_is_processed_and_trained(
    stack: EmbeddedStack, event_name: str
) -> None:
    # Given a file uploaded under the sample event's key
    key = sample_key(event_name)
    customer = "keys-" + event_name.removeprefix("s3_object_created_").removesuffix("_key.json")
    frame = readings([customer], "2024-01-01", 60, seed=3)
    # When the pipeline runs
    run_id = upload(stack, key.removeprefix(layout.INCOMING_PREFIX), to_csv(frame))
    status = finished(stack, run_id)
    # Then every row was read from that object and the customer has a live model
    assert status.processing_status == "Completed", status.processing_failure
    assert (status.rows_read, status.rows_rejected) == (len(frame), 0)
    assert status.training_status == "Completed", status.training_failure
    live = registry(stack).live(customer)
    assert live is not None and live.run_id == run_id
