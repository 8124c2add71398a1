"""The process pool: persistent worker processes, numpy arrays through shared memory.

``ProcessPool`` is the pool (``_process_pool.py``, whose docstring is the design
note); ``_worker.py`` is a worker's main loop and wire format, ``_worker_handle.py``
the pool's side of one worker, ``_pickling.py`` how calls and results are
pickled (functions of ``__main__`` by value), ``_shm.py`` the shared-memory transport and
``_segment_names.py`` how segments are named after their owner and swept when
it is gone. It knows nothing of graphs: the executor's process backend submits
calls to it.
"""

from chunkgraph._errors import CallTimeoutError
from chunkgraph.execute.pool._process_pool import PoolState, ProcessPool

__all__ = ["CallTimeoutError", "PoolState", "ProcessPool"]
