"""Registration's fan-out without I/O: how a run is cut into chunks, how the local stack
reads the SQS event source and a function's partial batch answer, and what status shows."""

from pathlib import Path

import pytest

from fleetcast.embedded.queues import event_source_mappings, failed_message_ids, sqs_event
from fleetcast.embedded.template import LocalTemplate
from fleetcast.status import RunStatus
from fleetcast_common.registration import RegistrationChunk, chunk_slices, plan_chunks
from fleetcast_common.settings import RegistrationCoordinatorSettings

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "q0000000909-20261129t120000"


@pytest.mark.parametrize(
    ("total", "size", "slices"),
    [
        (0, 3, []),
        (1, 3, [(0, 1)]),
        (3, 3, [(0, 3)]),
        (7, 3, [(0, 3), (3, 6), (6, 7)]),
    ],
)
def test_slices_cover_every_customer_once_and_none_is_larger_than_the_size(
    total: int, size: int, slices: list[tuple[int, int]]
) -> None:
    assert chunk_slices(total, size) == slices


def test_a_chunk_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="chunk size must be at least 1, got 0"):
        chunk_slices(5, 0)


def test_a_run_is_planned_as_manifest_slices_then_unlisted_archives_with_stable_ids() -> None:
    # Given two manifests (5 and 2 customers) and three archives no manifest listed
    sizes = {"models/r/manifest-algo-2.json": 2, "models/r/manifest-algo-1.json": 5}
    chunks = plan_chunks(RUN_ID, "job", sizes, ["z", "x", "y"], 2)
    # Then every chunk is at most 2 customers, and together they are every customer once
    assert [c.chunk_id for c in chunks] == [
        "manifest-algo-1.json:0-2",
        "manifest-algo-1.json:2-4",
        "manifest-algo-1.json:4-5",
        "manifest-algo-2.json:0-2",
        "unlisted:0-2",
        "unlisted:2-3",
    ]
    assert [c.size for c in chunks] == [2, 2, 1, 2, 2, 1]
    assert [c.unlisted for c in chunks[-2:]] == [["x", "y"], ["z"]]
    # And a repeated event plans exactly the same chunks (their ids count them once)
    assert plan_chunks(RUN_ID, "job", dict(reversed(sizes.items())), ["y", "z", "x"], 2) == chunks


def test_a_chunk_message_is_small_at_the_largest_chunk_size() -> None:
    # SQS takes 256 KiB a message; an unlisted chunk carries its customer ids.
    largest = RegistrationCoordinatorSettings.model_fields["chunk_size"].metadata
    assert any(getattr(m, "le", None) == 2000 for m in largest)
    chunk = RegistrationChunk(
        run_id=RUN_ID,
        training_job="job",
        chunk_id="unlisted:0-2000",
        unlisted=["c" * 64] * 2000,
        number=19999,
    )
    assert len(chunk.model_dump_json()) < 256 * 1024


def test_the_chunk_function_is_an_sqs_event_source_reporting_item_failures() -> None:
    (mapping,) = event_source_mappings(LocalTemplate(ROOT / "template.yaml"))
    assert (mapping.function_logical_id, mapping.queue_logical_id) == (
        "RegisterChunkFunction",
        "RegistrationChunksQueue",
    )
    assert mapping.report_batch_item_failures and mapping.batch_size == 2
    # Chunks register side by side, capped: the registry's writes stay bounded at any size.
    assert mapping.maximum_concurrency is not None and 2 <= mapping.maximum_concurrency <= 50


MESSAGES = [
    {"MessageId": "m1", "ReceiptHandle": "h1", "Body": "{}", "MD5OfBody": "x"},
    {"MessageId": "m2", "ReceiptHandle": "h2", "Body": "{}", "MD5OfBody": "y"},
]


def test_the_sqs_event_is_lambdas_shape() -> None:
    event = sqs_event(MESSAGES, "arn:aws:sqs:us-east-1:123456789012:q")
    assert [r["messageId"] for r in event["Records"]] == ["m1", "m2"]
    assert {r["eventSource"] for r in event["Records"]} == {"aws:sqs"}
    assert event["Records"][0]["receiptHandle"] == "h1"


@pytest.mark.parametrize(
    ("answer", "reports", "failed"),
    [
        ({"batchItemFailures": []}, True, set()),
        ({"batchItemFailures": [{"itemIdentifier": "m2"}]}, True, {"m2"}),
        # An identifier not in the batch fails the whole batch, as on Lambda.
        ({"batchItemFailures": [{"itemIdentifier": "other"}]}, True, {"m1", "m2"}),
        # Without ReportBatchItemFailures the answer is not read: a return is success.
        ({"batchItemFailures": [{"itemIdentifier": "m2"}]}, False, set()),
        (None, True, set()),
    ],
)
def test_only_the_messages_the_function_names_go_back(
    answer: object, reports: bool, failed: set[str]
) -> None:
    assert failed_message_ids(answer, MESSAGES, reports) == failed


def _status(**fields: object) -> RunStatus:
    base = {
        "run_id": RUN_ID,
        "jobs": {
            "processing": {"name": "p", "status": "Completed"},
            "training": {"status": "Completed"},
        },
        "customers_trained": 10,
    }
    return RunStatus.model_validate({**base, **fields})


def test_status_shows_chunks_done_of_total_and_is_done_once_the_run_is_registered() -> None:
    registering = _status(chunks_done=3, chunks_total=8, customers_decided=10)
    assert (registering.registration, registering.done) == ("chunks 3/8", False)
    registered = _status(chunks_done=8, chunks_total=8, registered=True)
    assert (registered.registration, registered.done) == ("registered", True)
    assert _status().registration == "-"
    # Decisions alone do not make a run registered: its chunks do
    assert not _status(customers_decided=10).done


def test_a_run_with_nothing_to_train_is_done_once_processed() -> None:
    # A metadata upload that changed nobody's calendar starts no training job
    processed = {"processing": {"name": "p", "status": "Completed"}}
    assert _status(jobs=processed, customers_to_train=0).done
    # A readings upload waits for its training job
    assert not _status(jobs=processed, customers_to_train=3).done
