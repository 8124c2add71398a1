"""The usual codec chain of a Zarr v3 chunk decoded in one step: crc32c, zstd, bytes.

Why. Every chunk the direct path reads (``_whole_chunks``, a shard's inner chunks in
``_shards``) went through zarr's codec objects one by one: a ``Buffer`` made and
unwrapped at each step, and numcodecs' zstd, which takes 31 µs on a 32 KiB chunk where
python-zstandard takes 20 µs for the same bytes. On a whole shard of 64 inner chunks
that was most of a read's time, and TensorStore decodes in C++.

What. ``fast_decoder(codecs)`` recognises the chain chunkgraph writes by default and
the common ones around it::

    [bytes (any endianness)] + [zstd (any level, with or without its checksum)] + [crc32c]?

and returns a function from a stored chunk's bytes to its array (the stored dtype and
byte order, the chunk's shape: what zarr's ``BytesCodec`` returns), or None for any
other chain (gzip, blosc, transpose, ...), which stays on zarr's codecs.

Exactness. The same zstd frames, decoded by the same library format; a checksum that
does not match raises ``ValueError`` as zarr's crc32c codec does. Anything the fast
step does not expect (several zstd frames, bytes after the frame, a frame larger or
smaller than the chunk, an unreadable frame) returns None, and the caller decodes those
bytes with zarr's codecs instead, so what it reads or the error it raises is exactly
zarr's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import google_crc32c  # zarr's own checksum library
import numpy as np
import zstandard

FastDecode = Callable[[np.ndarray[Any, Any]], "np.ndarray[Any, Any] | None"]

# A decompressor is not safe to share between threads: one per thread.
_local = threading.local()


def _decompressor() -> Any:
    found = getattr(_local, "decompressor", None)
    if found is None:
        found = _local.decompressor = zstandard.ZstdDecompressor()
    return found


def fast_decoder(codecs: list[tuple[Any, Any]]) -> FastDecode | None:
    """The one-step decoder of ``codecs`` (``(codec, spec it is handed)`` pairs, array to
    bytes first), or None when the chain is not one it knows (module docstring)."""
    if not codecs:
        return None
    names = [type(codec).__name__ for codec, _ in codecs]
    checked = names[-1] == "Crc32cCodec"
    if names[: len(names) - checked] != ["BytesCodec", "ZstdCodec"]:
        return None
    bytes_codec, spec = codecs[0]
    try:
        dtype = _stored_dtype(bytes_codec, spec)
    except Exception:  # a dtype zarr spells some other way: zarr's codecs decode it
        return None
    if dtype.kind not in "biufcmM":  # strings, structs: zarr's codecs
        return None
    shape = tuple(int(n) for n in spec.shape)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize

    def decode(stored: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
        body = stored
        if checked:
            body = stored[:-4]
            computed = np.uint32(google_crc32c.value(body)).tobytes()
            if computed != bytes(stored[-4:]):
                raise ValueError(
                    f"Stored and computed checksum do not match. Stored: {bytes(stored[-4:])!r}. "
                    f"Computed: {computed!r}."
                )
        try:
            # Bytes after the frame are zarr's to judge (it refuses them): not ignored.
            raw = _decompressor().decompress(body, max_output_size=size, allow_extra_data=False)
        except zstandard.ZstdError:
            return None  # zarr's codecs decode it, or raise their own error
        if len(raw) != size:
            return None  # several frames, or a frame of another size
        return np.frombuffer(raw, dtype=dtype).reshape(shape)

    return decode


def _stored_dtype(bytes_codec: Any, spec: Any) -> np.dtype[Any]:
    """The dtype zarr's ``BytesCodec`` views a chunk's bytes as: the array's, in the
    codec's byte order."""
    native: np.dtype[Any] = np.dtype(spec.dtype.to_native_dtype())
    endian = getattr(bytes_codec, "endian", None)
    if endian is None or native.itemsize == 1:
        return native
    ordered: np.dtype[Any] = native.newbyteorder("<" if endian.value == "little" else ">")
    return ordered
