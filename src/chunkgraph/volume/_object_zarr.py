"""zarr's ``ObjectStore``, with its requests counted, and a conditional variant for partial chunks.

Counting. Object-store requests cost tens of milliseconds each, so how many a
flow makes per chunk it needs matters as much as the bytes. ``CountedStore``
counts what zarr asks of the store: GETs (whole or ranged reads), PUTs, and the
rest (HEAD, LIST, DELETE), and the most requests it had in flight at once
(obstore runs them concurrently from zarr's event loop; a peak near zarr's
``async.concurrency`` says the region reads are latency-bound, not CPU-bound),
and the most bytes being received at once by whole-object GETs (from the
response's headers, which give the size, to its last byte: the memory the
downloads themselves hold). Counting is a lock and a few integer additions per
request, nothing per byte.

Conditional read-modify-write. A write that covers a chunk only in part makes
zarr read the chunk, merge the region in and write it back. Two writers of
adjacent regions of one chunk (two flows, two processes, two machines) would
each write back what they read and one would lose the other's voxels. On an
object store the chunk object itself settles it, with no lock to hold or to
leak: ``ConditionalStore`` is bound to one region write; it remembers the ETag
of every chunk it read (or that the chunk was absent) and writes each back only
if it is still that object (``If-Match``), or only if it is still absent
(``If-None-Match: *``). When another writer came first, the put fails with
``PreconditionError`` / ``AlreadyExistsError`` and the caller does the whole
region again on what is there now (``_zarr.ZarrStorage``).

The same requests come synchronously (``get_sync``, ranged or whole, ``set_sync``,
``delete_sync``) from the direct path of reads and whole-chunk writes
(``_whole_chunks``, ``_shards``), counted alike; a conditional write is always
zarr's own, asynchronous. Every GET is timed into the store's ``Pace``, which sizes
the requests the direct path keeps in flight and the gaps it reads through
(``in_flight``, ``gap``).

Failed requests. A request obstore gave up on (after its bounded retries,
``_store_client``) is raised as ``StoreError`` naming the object's URL and the
endpoint (``_store_errors``), never as an error a decoder could be blamed for:
no bytes arrived, so none are known to be bad.

Chunks written whole are never read, so their puts stay unconditional: two
writers of one whole chunk are a planning error the aligned-writes check
already prevents. A merged chunk that came out all fill value is written
(``write_empty_chunks``), not deleted: a delete cannot be made conditional.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from zarr.storage import ObjectStore

from chunkgraph._util import usable_cores
from chunkgraph.volume._object_store import check_not_forked
from chunkgraph.volume._pace import pace_of
from chunkgraph.volume._stats import STORE_FIELDS
from chunkgraph.volume._store_errors import is_store_failure, store_failure

# What a conditional put raises when another writer changed (or created) the object first.
CONFLICTS: tuple[type[BaseException], ...]
try:
    from obstore.exceptions import AlreadyExistsError, PreconditionError

    CONFLICTS = (PreconditionError, AlreadyExistsError)
except ImportError:  # pragma: no cover - obstore is a dependency; kept importable without it
    CONFLICTS = ()

REQUEST_FIELDS = STORE_FIELDS


class RequestCounter:
    """Thread-safe request counts of one stored array (shared by its handles)."""

    __slots__ = ("_bytes_in_flight", "_in_flight", "_lock", "_values")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0
        self._bytes_in_flight = 0
        self._values = dict.fromkeys(REQUEST_FIELDS, 0)

    def start(self, kind: str) -> None:
        with self._lock:
            self._values[kind] += 1
            self._in_flight += 1
            if self._in_flight > self._values["peak_requests_in_flight"]:
                self._values["peak_requests_in_flight"] = self._in_flight

    def conflict(self) -> None:
        """A conditional write found another writer's chunk: the region is written again."""
        with self._lock:
            self._values["write_conflicts"] += 1

    def end(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def receiving(self, nbytes: int) -> None:
        """``nbytes`` of a response body are on their way (``received`` when they are in)."""
        with self._lock:
            self._bytes_in_flight += nbytes
            if self._bytes_in_flight > self._values["peak_bytes_in_flight"]:
                self._values["peak_bytes_in_flight"] = self._bytes_in_flight

    def received(self, nbytes: int) -> None:
        with self._lock:
            self._bytes_in_flight -= nbytes

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._values)

    def reset(self) -> None:
        with self._lock:
            self._values = dict.fromkeys(REQUEST_FIELDS, 0)


class CountedStore(ObjectStore):  # type: ignore[misc,type-arg]
    """zarr's ``ObjectStore`` counting its requests in ``counter``; ``url`` and ``endpoint``
    name the store's root in the errors of failed requests."""

    def __init__(
        self,
        store: Any,
        counter: RequestCounter,
        *,
        read_only: bool = False,
        url: str = "",
        endpoint: str | None = None,
    ) -> None:
        super().__init__(store, read_only=read_only)
        self.counter = counter
        self.url, self.endpoint = url, endpoint
        self.pace = pace_of(endpoint, url.partition("://")[2].partition("/")[0])

    def with_read_only(self, read_only: bool = False) -> CountedStore:
        return type(self)(
            self.store, self.counter, read_only=read_only, url=self.url, endpoint=self.endpoint
        )

    def __getstate__(self) -> dict[Any, Any]:
        # Never pickled by chunkgraph (a Volume pickles its URL); counts stay behind if it is.
        state = super().__getstate__()
        state["counter"] = None
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__(state)
        self.counter = RequestCounter()
        self.pace = pace_of(self.endpoint, self.url.partition("://")[2].partition("/")[0])

    @contextlib.contextmanager
    def _request(self, kind: str, key: str, count: int = 1) -> Iterator[None]:
        """Count ``count`` requests of ``kind`` in flight; a failed one as ``StoreError``."""
        check_not_forked()
        for _ in range(count):
            self.counter.start(kind)
        try:
            yield
        except Exception as err:
            if not is_store_failure(err):
                raise
            raise store_failure(err, self.url, self.endpoint, key) from None
        finally:
            for _ in range(count):
                self.counter.end()

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if byte_range is not None:
            with self._request("requests_get", key):
                return await super().get(key, prototype, byte_range)
        found = await self._get_whole(key)
        return None if found is None else prototype.buffer.from_bytes(found[0])

    async def _get_whole(self, key: str) -> tuple[Any, str | None] | None:
        """(bytes, ETag) of the object ``key``, or None when there is none."""
        import obstore

        with self._request("requests_get", key):
            start = time.perf_counter()
            try:
                response = await obstore.get_async(self.store, key)
            except FileNotFoundError:
                return None
            size = int(response.meta.get("size") or 0)
            self.counter.receiving(size)
            try:
                data = await response.bytes_async()
            finally:
                self.counter.received(size)
            self.pace.sample(time.perf_counter() - start, len(data))
        return data, response.meta.get("e_tag")

    async def get_partial_values(self, prototype: Any, key_ranges: Any) -> Any:
        ranges = list(key_ranges)
        first = ranges[0][0] if ranges else ""
        with self._request("requests_get", first, len(ranges)):
            return await super().get_partial_values(prototype, ranges)

    async def set(self, key: str, value: Any) -> None:
        with self._request("requests_put", key):
            await super().set(key, value)

    # Synchronous forms (zarr's ``SupportsSyncStore``): what ``_whole_chunks`` calls from the
    # caller's thread, counted as the ones above. obstore blocks without the GIL meanwhile.

    def get_sync(self, key: str, *, prototype: Any = None, byte_range: Any = None) -> Any:
        from zarr.core.buffer import default_buffer_prototype

        prototype = prototype or default_buffer_prototype()
        import obstore

        options = {} if byte_range is None else {"range": _obstore_range(byte_range)}
        with self._request("requests_get", key):
            start = time.perf_counter()
            try:
                response = obstore.get(self.store, key, options=options)  # type: ignore[arg-type]
            except FileNotFoundError:
                return None
            size = int(response.meta.get("size") or 0) if byte_range is None else 0
            self.counter.receiving(size)
            try:
                data = response.bytes()
            finally:
                self.counter.received(size)
            self.pace.sample(time.perf_counter() - start, len(data))
        return prototype.buffer.from_bytes(data)

    def in_flight(self) -> int:
        """Requests to keep in flight for a region, from this store's measured pace."""
        return self.pace.in_flight(usable_cores())

    def gap(self) -> int:
        """Bytes between two ranges of one object below which one request reads both."""
        return self.pace.gap()

    def set_sync(self, key: str, value: Any) -> None:
        import obstore

        self._check_writable()
        with self._request("requests_put", key):
            obstore.put(self.store, key, value.as_buffer_like())

    def delete_sync(self, key: str) -> None:
        import obstore

        self._check_writable()
        with self._request("requests_other", key), contextlib.suppress(FileNotFoundError):
            obstore.delete(self.store, key)

    async def set_if_not_exists(self, key: str, value: Any) -> None:
        with self._request("requests_put", key):
            await super().set_if_not_exists(key, value)

    async def exists(self, key: str) -> bool:
        with self._request("requests_other", key):
            return bool(await super().exists(key))

    async def delete(self, key: str) -> None:
        with self._request("requests_other", key):
            await super().delete(key)


def _obstore_range(byte_range: Any) -> Any:
    """obstore's ``range`` option for one of zarr's byte requests."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        return (byte_range.start, byte_range.end)
    if isinstance(byte_range, OffsetByteRequest):
        return {"offset": byte_range.offset}
    if isinstance(byte_range, SuffixByteRequest):
        return {"suffix": byte_range.suffix}
    raise TypeError(f"unexpected byte range {byte_range!r}")


class ConditionalStore(CountedStore):
    """One region write's view of the store: puts of chunks it read are conditional (above)."""

    def __init__(
        self,
        store: Any,
        counter: RequestCounter,
        *,
        read_only: bool = False,
        url: str = "",
        endpoint: str | None = None,
    ) -> None:
        super().__init__(store, counter, read_only=read_only, url=url, endpoint=endpoint)
        # key -> ETag of the object read, or None when there was none to read.
        self._seen: dict[str, str | None] = {}

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if byte_range is not None:
            return await super().get(key, prototype, byte_range)
        found = await self._get_whole(key)
        if found is None:
            self._seen[key] = None
            return None
        data, tag = found
        if tag is None:
            raise OSError(
                f"the object store returned no ETag for {key!r}: partial-chunk writes there "
                "cannot be made conditional; write whole chunks (aligned_writes=True)"
            )
        self._seen[key] = tag
        return prototype.buffer.from_bytes(data)

    async def set(self, key: str, value: Any) -> None:
        if key not in self._seen:  # written whole, never read: nothing to compare with
            await super().set(key, value)
            return
        import obstore

        tag = self._seen[key]
        mode: Any = "create" if tag is None else {"e_tag": tag}
        self._check_writable()
        with self._request("requests_put", key):
            await obstore.put_async(self.store, key, value.as_buffer_like(), mode=mode)
