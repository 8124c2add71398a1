"""The main loop of one process-pool worker.

Wire format (both directions are ``multiprocessing`` connections carrying raw
bytes, so either side reads ids and lengths before unpickling anything)::

    pool -> worker   a batch of frames, one per call, in the order to run them:
                       <u64 task id> <u64 length> <pickle: (fn, args, kwargs)>
                     stop: the single frame <u64 0> <u64 0>     (clean exit)
    worker -> pool   one message per call, sent as soon as it finishes:
                       <u64 task id> <u8 OK>    <f64 seconds> <pickle: value>
                       <u64 task id> <u8 ERROR> <f64 seconds> <pickle: (error or None, text)>
                     and once at start: <u64 0> <u8 HELLO> <f64 0> <pid as text>

``seconds`` is how long ``fn`` ran; the pool uses it to decide how many calls
to queue per worker. Arrays inside the pickles are
:class:`~chunkgraph.execute.pool._shm.ShmRef` s; inputs arrive as read-only views (a
worker must not change data another task may read), outputs are copied once
into new segments, or referenced by name when a worker returns (a view of) one
of its inputs.

A reader thread drains the task connection into a local queue, so the pool
can always send even while this worker blocks writing a large result; when
that connection closes without a stop message the pool's process is gone,
and the reader sweeps the pool's segments and ends the worker at once, even
in the middle of a task (no orphan outlives its pool).

SIGINT is ignored: Ctrl-C reaches the whole process group, and it is the
pool's process that decides to cancel and terminate its workers. A call that
raises KeyboardInterrupt itself reports it as it is (the caller is being
interrupted); a SystemExit, or any other exception that is not an
``Exception``, becomes a :class:`RemoteError`, a plain failure of that call.
"""

from __future__ import annotations

import os
import pickle
import queue
import signal
import struct
import threading
import time
import traceback
from multiprocessing.connection import Connection
from typing import Any, NoReturn, cast

from chunkgraph._errors import RemoteError, RemoteTraceback
from chunkgraph.execute.pool._pickling import dumps
from chunkgraph.execute.pool._segment_names import unlink_name, unlink_prefix
from chunkgraph.execute.pool._shm import SegmentTable, iter_refs

FRAME = struct.Struct("<QQ")
STATUS = struct.Struct("<QBd")
HELLO, OK, ERROR = 0, 1, 2
STOP_TASK_ID = 0
STOP = FRAME.pack(STOP_TASK_ID, 0)


def frame(task_id: int, payload: bytes) -> bytes:
    """One call's frame of a batch."""
    return FRAME.pack(task_id, len(payload)) + payload


def _orphaned(prefix: str) -> NoReturn:
    # The pool's process is gone: nobody will read a result, so stop at once,
    # even mid-task, and remove the segments it can no longer unlink.
    unlink_prefix(prefix)
    os._exit(0)


def _read_tasks(
    conn: Connection, inbox: queue.SimpleQueue[tuple[int, memoryview]], prefix: str
) -> None:
    while True:
        try:
            batch = memoryview(conn.recv_bytes())
        except (EOFError, OSError):
            _orphaned(prefix)  # a clean stop arrives as a message before EOF
        at = 0
        while at < len(batch):
            task_id, length = FRAME.unpack_from(batch, at)
            at += FRAME.size
            inbox.put((task_id, batch[at : at + length]))
            at += length
            if task_id == STOP_TASK_ID:
                return


def _error_payload(error: BaseException) -> bytes:
    text = "".join(traceback.format_exception(error))
    if not isinstance(error, Exception | KeyboardInterrupt):
        # SystemExit and the like end the process that raises them; a task's
        # sys.exit() must fail that task, not end the program waiting for it.
        # A KeyboardInterrupt travels as itself: the caller's run is interrupted.
        error = RemoteError(f"task raised {type(error).__name__}({error})")
    try:
        payload = dumps((error, text))
        pickle.loads(payload)  # an exception whose __init__ cannot be replayed fails here
        return payload
    except Exception:
        # The exception object does not pickle: keep its type name and message.
        return pickle.dumps((None, text), protocol=pickle.HIGHEST_PROTOCOL)


def _run_one(table: SegmentTable, task_id: int, body: memoryview) -> bytes:
    start = time.perf_counter()
    try:
        fn, encoded_args, encoded_kwargs = pickle.loads(body)
        args = cast(tuple[Any, ...], table.decode(encoded_args, writeable=False))
        kwargs = cast(dict[str, Any], table.decode(encoded_kwargs, writeable=False))
        value = fn(*args, **kwargs)
        del fn, args, kwargs, encoded_args, encoded_kwargs
    except BaseException as error:
        seconds = time.perf_counter() - start
        return STATUS.pack(task_id, ERROR, seconds) + _error_payload(error)
    seconds = time.perf_counter() - start
    keep: list[object] = []
    encoded: object = None
    try:
        encoded = table.encode(value, keep)
        return STATUS.pack(task_id, OK, seconds) + dumps(encoded)
    except BaseException as error:
        # Segments made for this result will never be handed over: remove them now.
        mine = f"{table.prefix}{os.getpid()}_"
        for ref in iter_refs(encoded):
            if ref.name.startswith(mine):
                unlink_name(ref.name)
        return STATUS.pack(task_id, ERROR, seconds) + _error_payload(error)


def main(tasks: Connection, results: Connection, prefix: str, min_bytes: int) -> None:
    """Serve tasks until a stop message (return) or the pool's death (sweep, exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    table = SegmentTable(prefix, owner=False, min_bytes=min_bytes)
    inbox: queue.SimpleQueue[tuple[int, memoryview]] = queue.SimpleQueue()
    threading.Thread(target=_read_tasks, args=(tasks, inbox, prefix), daemon=True).start()
    results.send_bytes(STATUS.pack(0, HELLO, 0.0) + str(os.getpid()).encode())
    while True:
        task_id, body = inbox.get()
        if task_id == STOP_TASK_ID:
            return
        reply = _run_one(table, task_id, body)
        del body
        try:
            results.send_bytes(reply)
        except OSError:
            _orphaned(prefix)


def unpickle_error(payload: bytes) -> BaseException:
    """The exception a worker reported, with its remote traceback as ``__cause__``."""
    error: BaseException | None
    text: str
    error, text = pickle.loads(payload)
    if error is None:
        first = text.strip().splitlines()[-1] if text.strip() else "unknown error"
        error = RemoteError(first)
    error.__cause__ = RemoteTraceback(text)
    return error
