"""moto's DynamoDB, as DynamoDB behaves at a fleet's size: a Query reads its one
partition, a transaction backs up only the partitions it writes, a new item's size is
checked once, a condition expression is parsed once, and each write runs alone
(UpdateItems told to the stack's observers as they are applied). Written for moto 5.2.5 (see :mod:`fleetcast.embedded.moto_patches`).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import sys
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import moto.dynamodb.models as moto_dynamodb_models
import moto.dynamodb.models.table as moto_dynamodb_table
import moto.dynamodb.responses as moto_dynamodb_responses
from moto.dynamodb import comparisons
from moto.dynamodb.exceptions import ItemSizeTooLarge
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item, LimitedSizeDict
from moto.dynamodb.models.table import Table
from moto.dynamodb.models.utilities import bytesize

_moto_query = Table.query


def _query_one_partition(
    table: Table, hash_key: Any, *args: Any, **kwargs: Any
) -> tuple[list[Any], int, dict[str, Any] | None]:
    """moto's ``Table.query``, looking at the one partition a table query names.

    moto 5.2.5 answers every Query by sorting all of the table's items and keeping those
    of the partition: at 100k customers the registry holds 200k items, and each query of
    a run's chunk records (each finishing chunk's, before runs kept totals) took about half
    a second, and failed ("dictionary changed size during iteration") when a write landed
    meanwhile. DynamoDB reads the partition alone; so does this, by handing moto's own
    query a shallow copy of the table whose items are that partition's. Index queries
    (not used by fleetcast) go to moto unchanged.
    """
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")
    if index_name is not None or hash_key is None:
        return _moto_query(table, hash_key, *args, **kwargs)
    partition = copy.copy(table)
    partition.items = defaultdict(dict)
    found = table.items.get(hash_key)
    if found is not None:
        # A copy of the partition's items (one C-level copy under the GIL): a write to the
        # partition while the query reads it would otherwise fail the query, as moto's own
        # iteration over the whole table fails under concurrent writes.
        partition.items[hash_key] = dict(found) if table.range_key_attr else found
    return _moto_query(partition, hash_key, *args, **kwargs)


def query_partitions_only() -> None:
    """Install :func:`_query_one_partition` in moto (idempotent)."""
    Table.query = _query_one_partition  # type: ignore[method-assign,assignment]


# moto 5.2.5's limit on an item's size (DynamoDB's 400 KB, as moto measured it).
ITEM_SIZE_LIMIT = 405_000
# A string value this long or longer is shared with an equal value of a recent item
# (:func:`_shared_text`), among the last SHARED_TEXTS such values written.
SHARED_TEXT_LENGTH = 64
SHARED_TEXTS = 4096
_recent_texts: OrderedDict[str, str] = OrderedDict()
_recent_texts_lock = threading.Lock()


def _shared_text(text: str) -> str:
    """``text``, or an equal string a recent item already holds (which is then kept
    longest). Registration writes each customer's LIVE record and its MODEL record of
    the same run seconds apart (a chunk's Puts, then its batch of MODEL records), and
    their backtest, metrics and archive's URI are the same text: shared, the two records
    hold one copy. Bounded: the last SHARED_TEXTS long values, a few MiB."""
    with _recent_texts_lock:
        found = _recent_texts.get(text)
        if found is None:
            _recent_texts[text] = text
            if len(_recent_texts) > SHARED_TEXTS:
                _recent_texts.popitem(last=False)
            return text
        _recent_texts.move_to_end(found)
        return found


def _item_sized_once(
    item: Item, hash_key: DynamoType, range_key: DynamoType | None, attrs: dict[str, Any]
) -> None:
    """moto's ``Item.__init__``, with the item's size summed once, its attribute names
    shared, and its long string values shared with recent items' equal ones.

    moto 5.2.5 stores an item's attributes in a ``LimitedSizeDict`` whose every
    assignment sums the sizes of every attribute already there, nested maps walked value
    by value: quadratic in the attributes. A registry record (twenty attributes, a
    backtest of six candidates' scores in nested maps) cost about 2 ms of the gateway's
    time on each write, most of a registration's (100,000 customers: over six minutes).
    The attributes are the same and the same limit is checked, on the whole item, which
    is what moto's last assignment checks (sizes only add up); later changes of the item
    (UpdateItem) still go through moto's check.

    Each item's attribute names are its request's own strings: the registry's 200,000
    records at 100,000 customers held 200,000 copies of each of their twenty names. They
    are interned here (one string a name, in this process), which took a registry record
    from about 9.0 to 7.4 KB of the stack's memory.

    A customer's LIVE record and its MODEL record of the same run hold the same backtest
    and metrics (their JSON text, 2.7 KB of a 3.3 KB record since the fleet family and
    its eighth candidate): :func:`_shared_text` keeps one copy for both.
    """
    item.hash_key = hash_key
    item.range_key = range_key
    item.attrs = LimitedSizeDict()
    size = 0
    for key, value in attrs.items():
        typed = DynamoType(value)
        size += bytesize(key) + typed.size()
        if typed.type == "S" and len(typed.value) >= SHARED_TEXT_LENGTH:
            typed.value = _shared_text(typed.value)
        dict.__setitem__(item.attrs, sys.intern(key), typed)
    if size > ITEM_SIZE_LIMIT:
        raise ItemSizeTooLarge


def items_sized_once() -> None:
    """Install :func:`_item_sized_once` in moto (idempotent)."""
    Item.__init__ = _item_sized_once  # type: ignore[method-assign,assignment]


_moto_parser = comparisons.create_condition_expression_parser
# Distinct (expression, names, values) parses kept: registration's conditional writes use
# a handful (a run's id, a customer's version), the rest of the stack a few more.
PARSED_CONDITIONS = 1024


@dataclass(frozen=True)
class _ParsedCondition:
    """What moto reads of a ``ConditionExpressionParser`` once it has parsed: the tree,
    and the names and values the expression used (which moto checks against those the
    request gave)."""

    tree: Any
    names_found: tuple[str, ...]
    values_found: tuple[str, ...]


class _Parsed:
    """A parser whose parse is done (one per call: moto may read its lists)."""

    def __init__(self, parsed: _ParsedCondition) -> None:
        self._tree = parsed.tree
        self.expr_attr_names_found = list(parsed.names_found)
        self.expr_attr_values_found = list(parsed.values_found)

    def parse(self) -> Any:
        return self._tree


@functools.lru_cache(maxsize=PARSED_CONDITIONS)
def _parsed_condition(expression: str, names: str, values: str) -> _ParsedCondition:
    parser = _moto_parser(expression, json.loads(names), json.loads(values))
    tree = parser.parse()
    return _ParsedCondition(
        tree, tuple(parser.expr_attr_names_found), tuple(parser.expr_attr_values_found)
    )


def _parser_parsed_once(
    expression: str | None,
    names: dict[str, str] | None,
    values: dict[str, dict[str, Any]] | None,
) -> Any:
    """moto's ``create_condition_expression_parser``, each distinct expression with its
    names and values parsed once.

    moto 5.2.5 lexes and parses a write's ConditionExpression twice on every write (its
    request handler validates it, then its model parses it again to decide), about a
    millisecond of the gateway's time each: at 10,000 customers, registration's
    conditional Puts of the LIVE records (one a customer, with the same expression and
    the run's id) spent 12 of the gateway's 18 s of DynamoDB work in the second parse
    alone. The tree moto builds is only read when a condition is evaluated (each node's
    ``expr(item)``), so one tree serves every write with the same expression, names and
    values. A parse that fails is not kept: it fails again, as moto's own does.
    Expressions with nothing to parse (None) go to moto unchanged.
    """
    if expression is None:
        return _moto_parser(expression, names, values)
    try:
        key = json.dumps(names, sort_keys=True), json.dumps(values, sort_keys=True)
    except TypeError:  # values that are not DynamoDB JSON: moto says what is wrong
        return _moto_parser(expression, names, values)
    return _Parsed(_parsed_condition(expression, *key))


def _condition_parsed_once(
    expression: str | None,
    names: dict[str, str] | None,
    values: dict[str, dict[str, Any]] | None,
) -> Any:
    """moto's ``get_filter_expression`` (the model's parse) through
    :func:`_parser_parsed_once`."""
    return _parser_parsed_once(expression, names, values).parse()


def conditions_parsed_once() -> None:
    """Install :func:`_parser_parsed_once` and :func:`_condition_parsed_once` where
    moto's DynamoDB calls them (idempotent): its modules import them by name."""
    comparisons.create_condition_expression_parser = _parser_parsed_once  # type: ignore[assignment]
    moto_dynamodb_responses.create_condition_expression_parser = _parser_parsed_once  # type: ignore[assignment]
    comparisons.get_filter_expression = _condition_parsed_once  # type: ignore[assignment]
    moto_dynamodb_models.get_filter_expression = _condition_parsed_once  # type: ignore[assignment]
    moto_dynamodb_table.get_filter_expression = _condition_parsed_once  # type: ignore[assignment]


_moto_transact_write_items = DynamoDBBackend.transact_write_items
_transacting = threading.local()


def _table_deepcopy(table: Table, memo: dict[int, Any]) -> Table:
    """A table's deep copy, as Python makes one; within a transaction of
    :func:`_transact_backing_up_partitions`, the table itself (moto's backup of it)."""
    if getattr(_transacting, "active", False):
        return table
    copied = copy.copy(table)
    memo[id(table)] = copied
    copied.__dict__.update(copy.deepcopy(table.__dict__, memo))
    return copied


def _transact_backing_up_partitions(
    backend: DynamoDBBackend, transact_items: list[dict[str, Any]]
) -> None:
    """moto's TransactWriteItems, backing up only the partitions its actions name.

    moto 5.2.5 deep-copies every table a transaction writes, to put it back if the
    transaction is cancelled: at 100k customers the registry holds 200k items, and each
    transaction of registration's promotions would copy them all. This keeps deep copies
    of the partitions the actions write (a customer's few records) and puts those back;
    moto's own restore puts back the table itself.
    """
    backups: list[tuple[Table, DynamoType, Any]] = []
    for action in transact_items:
        operation: dict[str, Any] = next(iter(action.values()), {})
        table = backend.tables.get(str(operation.get("TableName")))
        key = operation.get("Item") or operation.get("Key") or {}
        if table is None or table.hash_key_attr not in key:
            continue
        hash_key = DynamoType(key[table.hash_key_attr])
        backups.append((table, hash_key, copy.deepcopy(table.items.get(hash_key))))
    _transacting.active = True
    try:
        _moto_transact_write_items(backend, transact_items)
    except Exception:
        for table, hash_key, partition in reversed(backups):
            if partition is None:
                table.items.pop(hash_key, None)
            else:
                table.items[hash_key] = partition
        raise
    finally:
        _transacting.active = False


def transactions_back_up_partitions() -> None:
    """Install :func:`_transact_backing_up_partitions` in moto (idempotent)."""
    Table.__deepcopy__ = _table_deepcopy  # type: ignore[attr-defined]
    DynamoDBBackend.transact_write_items = _transact_backing_up_partitions  # type: ignore[method-assign,assignment]


_dynamodb_writes = threading.RLock()


def _one_at_a_time(write: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(write)
    def locked(*args: Any, **kwargs: Any) -> Any:
        with _dynamodb_writes:
            return write(*args, **kwargs)

    locked._one_at_a_time = True  # type: ignore[attr-defined]
    return locked


@contextlib.contextmanager
def dynamodb_writes_held() -> Iterator[None]:
    """No DynamoDB write runs (nor is half done) while this holds (a snapshot's fork)."""
    with _dynamodb_writes:
        yield


def dynamodb_writes_one_at_a_time() -> None:
    """Make moto's DynamoDB writes atomic, as DynamoDB's are (idempotent).

    moto 5.2.5 reads an item, checks a write's condition and changes the item with no
    lock, and its server answers requests on many threads: two conditional writes at once
    can both pass their condition, and two ``ADD`` updates of one item can lose one (the
    run's record, which every finishing registration chunk adds to). Here each write
    (a Put, an Update, a Delete, a whole transaction; BatchWriteItem's Puts one by one)
    runs alone; reads do not wait.
    """
    for name in ("put_item", "update_item", "delete_item", "transact_write_items"):
        write = getattr(DynamoDBBackend, name)
        if not getattr(write, "_one_at_a_time", False):
            if name == "update_item":
                write = _observed(write)
            setattr(DynamoDBBackend, name, _one_at_a_time(write))


# Told of each UpdateItem moto has applied: the table's name, the key (DynamoDB JSON) and
# moto's item as it now is.
UpdateObserver = Callable[[str, dict[str, Any], Any], None]
_update_observers: list[UpdateObserver] = []


def _observed(update_item: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(update_item)
    def observed(
        backend: Any, table_name: str, key: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        item = update_item(backend, table_name, key, *args, **kwargs)
        for observe in tuple(_update_observers):
            observe(table_name, key, item)
        return item

    return observed


def observe_updates(observer: UpdateObserver) -> Callable[[], None]:
    """Tell ``observer`` of each UpdateItem as it is applied, under the one-at-a-time lock
    (so in the order the updates were made; moto 5.2.5 delivers no stream records in
    process). Returns what stops it."""
    dynamodb_writes_one_at_a_time()
    with _dynamodb_writes:
        _update_observers.append(observer)

    def stop() -> None:
        with _dynamodb_writes:
            if observer in _update_observers:
                _update_observers.remove(observer)

    return stop
