"""No customer id reaches an S3 key, a TargetModel or a file path without passing the
allow-list: property tests over arbitrary text, for every place that builds one."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleetcast_contracts import layout
from fleetcast_contracts.ids import (
    CUSTOMER_ID_PATTERN,
    InvalidCustomerIdError,
    is_valid_customer_id,
)

RUN_ID = "q0000000917-20261130t100000"
SENTINEL = "Sentinel0Id"
ALLOWED = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")

# Everything that turns a customer id into a name, a key or a path.
BUILDERS: dict[str, Callable[[str], str]] = {
    "TargetModel": lambda customer_id: layout.target_model(customer_id, RUN_ID),
    "model key": lambda customer_id: layout.model_key(customer_id, RUN_ID),
}
# Ids an attacker or a broken export would send; hypothesis adds arbitrary text to these.
HOSTILE = [
    "../../etc/passwd",
    "..",
    ".",
    "a/b",
    "/abs",
    "a\\b",
    "a b",
    " a",
    "a\n",
    "a\x00",
    "caf\u00e9",
    "\uff11",  # a full-width digit: a digit to str.isdigit, not to the allow-list
    "x" * 65,
    "",
    "-a",
    "_a",
    "%2e%2e%2f",
]
ids = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=80))


@pytest.mark.parametrize("builder", BUILDERS.values(), ids=BUILDERS.keys())
@given(customer_id=ids)
def test_every_builder_refuses_what_the_allow_list_refuses(
    builder: Callable[[str], str], customer_id: str
) -> None:
    if ALLOWED.fullmatch(customer_id):
        built = builder(customer_id)
        # A valid id goes in verbatim, in its one place, and changes nothing else: it holds
        # no separator and is never '.' or '..', so it cannot climb out of its prefix.
        assert built == builder(SENTINEL).replace(SENTINEL, customer_id)
        assert posixpath.normpath(built) == built
    else:
        with pytest.raises(InvalidCustomerIdError):
            builder(customer_id)


@given(customer_id=ids)
def test_the_allow_list_is_exactly_its_documented_pattern(customer_id: str) -> None:
    assert is_valid_customer_id(customer_id) == bool(ALLOWED.fullmatch(customer_id))
    assert is_valid_customer_id(customer_id) == bool(re.fullmatch(CUSTOMER_ID_PATTERN, customer_id))


@given(name=st.one_of(st.sampled_from([f"{h}.csv" for h in HOSTILE]), st.text(max_size=80)))
def test_training_reads_only_customer_files_whose_name_passes(name: str) -> None:
    customer_id = layout.customer_id_from_file_name(name, layout.CUSTOMER_FILE_SUFFIX)
    assert customer_id is None or (
        ALLOWED.fullmatch(customer_id) and name == customer_id + layout.CUSTOMER_FILE_SUFFIX
    )


@given(customer_id=ids)
def test_the_history_shard_key_refuses_what_the_allow_list_refuses(customer_id: str) -> None:
    # The id is hashed, not written into the key: the key is one of the shards' names.
    if ALLOWED.fullmatch(customer_id):
        assert re.fullmatch(
            r"history/shard-\d{4}-of-\d{4}\.parquet", layout.history_shard_key(customer_id)
        )
    else:
        with pytest.raises(ValueError):
            layout.history_shard_key(customer_id)
