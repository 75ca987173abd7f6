"""One HTTP endpoint for every AWS API of the local stack.

moto's own WSGI application answers the AWS APIs. Requests that moto cannot serve the
way AWS does (a multi-model endpoint's invocations, for one) are routed to handlers the
local stack registers, by a WSGI middleware in front of moto.
"""

from __future__ import annotations

import contextlib
import copy
import errno
import functools
import logging
import socket
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from moto.s3.models import s3_backends
from werkzeug.serving import BaseWSGIServer, make_server

from fleetcast.embedded.s3_objects import copy_value, keep_objects_in_files

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
# Told of each S3 write made in process: method, bucket, key.
S3WriteObserver = Callable[[str, str, str], None]
# A route decides from the WSGI environ whether it takes the request.
Route = tuple[Callable[[dict[str, Any]], bool], WsgiApp]

log = logging.getLogger("fleetcast.embedded.gateway")

Server = TypeVar("Server")


class PortTakenError(OSError):
    """A port asked for by number is in use (by another program, or another stack)."""


def bind_preferred(
    port: int | None, default: int, bind: Callable[[int], Server], what: str
) -> tuple[Server, str | None]:
    """Bind ``port``; when None, ``default`` or else any free port if ``default`` is taken.
    Returns the server and, when the default was taken, a notice that says so."""
    try:
        return bind(default if port is None else port), None
    except OSError as error:
        if error.errno != errno.EADDRINUSE:
            raise
        if port is not None:
            raise PortTakenError(
                errno.EADDRINUSE,
                f"port {port} for {what} is taken (another `fleetcast up`?): "
                "give another port, or 0 for any free one",
            ) from error
    return bind(0), f"port {default} was taken: {what} on a free port instead"


class MotoDispatcher(DomainDispatcherApplication):
    """moto's WSGI dispatcher, remembering which backend serves each host name.

    moto finds the backend anew for every request, under one lock: it lists the folders
    of its package and tries every service's URL patterns. On the local stack that was
    over half of the time of each AWS request, and it serialised them all; the answer
    for a host name never changes.
    """

    def __init__(self, create_app: Callable[..., Any] = create_backend_app) -> None:
        super().__init__(create_app)
        self._backends: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:
        if host not in self._backends:
            self._backends[host] = super().get_backend_for_host(host)
        return self._backends[host]


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
            setattr(DynamoDBBackend, name, _one_at_a_time(write))


class _QuietHandler(MotoRequestHandler):
    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        pass


# How often a server's loop looks for shutdown() (socketserver's default, 0.5 s, is what
# each server's stop waited).
SHUTDOWN_POLL_SECONDS = 0.05


class Gateway:
    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        query_partitions_only()
        transactions_back_up_partitions()
        dynamodb_writes_one_at_a_time()
        keep_objects_in_files()
        self._moto: WsgiApp = MotoDispatcher()
        self._routes: list[Route] = []
        self._s3_observers: list[S3WriteObserver] = []
        # What every request passes first, routes included (the local IAM's check).
        self._front: WsgiApp = self._app
        # Bound here, not by werkzeug, which exits the process when the port is taken.
        with socket.create_server((host, port)) as listener:
            self._server: BaseWSGIServer = make_server(
                host,
                port,
                lambda environ, start_response: self._front(environ, start_response),
                threaded=True,
                request_handler=_QuietHandler,
                fd=listener.fileno(),
            )
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
            daemon=True,
            name="aws-gateway",
        )

    @property
    def url(self) -> str:
        return f"http://{self._server.host}:{self._server.port}"

    @property
    def aws_app(self) -> WsgiApp:
        """moto's application, which answers every AWS API request no route takes."""
        return self._moto

    def wrap_aws_app(self, wrap: Callable[[WsgiApp], WsgiApp]) -> None:
        """Put ``wrap(moto)`` where moto was: it sees every request no route takes."""
        self._moto = wrap(self._moto)

    def guard(self, wrap: Callable[[WsgiApp], WsgiApp]) -> None:
        """Put ``wrap(everything)`` in front: it sees every request, routes' too."""
        self._front = wrap(self._front)

    def add_route(self, matches: Callable[[dict[str, Any]], bool], app: WsgiApp) -> None:
        self._routes.append((matches, app))

    def put_object(self, account_id: str, bucket: str, key: str, body: bytes) -> None:
        """What a PutObject request of ``body`` does in moto (notifications included),
        without the request: for the emulated services' own writes, which on AWS are not
        a client's requests either (SageMaker copying a job's checkpoints and outputs).
        Through HTTP a small object cost the stack about 12 ms of CPU: signing, a new
        connection and thread (werkzeug closes each), moto parsing the request. Observers
        (``observe_s3_writes``) are told of each, as a request counter would be."""
        for observe in self._s3_observers:
            observe("PUT", bucket, key)
        s3_backends[account_id]["aws"].put_object(bucket, key, body)

    def download_object(self, account_id: str, bucket: str, key: str, target: Path) -> None:
        """Write the object to ``target`` as a whole-object GetObject would, without the
        request: for SageMaker's own copies of a job's inputs. moto answers each ranged GET
        by reading the whole object, so a managed download of a 557 MB upload in 8 MB
        ranges read it 70 times, ten at a time (5 GB of the stack's memory at once).
        Observers are told of it as a GET."""
        for observe in self._s3_observers:
            observe("GET", bucket, key)
        found = s3_backends[account_id]["aws"].get_object(bucket, key)
        if found is None:
            raise FileNotFoundError(f"s3://{bucket}/{key} does not exist")
        copy_value(found, target)

    def observe_s3_writes(self, observer: S3WriteObserver) -> None:
        self._s3_observers.append(observer)

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        for matches, app in self._routes:
            if matches(environ):
                return app(environ, start_response)
        return self._moto(environ, start_response)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
