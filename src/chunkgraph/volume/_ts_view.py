"""A TensorStore array of a format zarr-python does not read (precomputed, N5), as ``Storage``.

TensorStore reaches a local directory through its ``file`` key-value store and
an ``s3://`` URL through its ``s3`` one, with the endpoint and region the
environment names (``AWS_ENDPOINT_URL``, ``AWS_REGION``, as the providers'
tools read them) unless ``storage_options`` say otherwise; credentials come
from the environment or the usual files.

Writes on these volumes are always chunk-aligned (``aligned_writes``): the
formats encode whole chunks (jpeg, compressed_segmentation) or whole shards,
and TensorStore's s3 store does not make a read-modify-write atomic, so a
partial chunk written by two tasks could lose one of them. ``alignment_note``
says why in the error for an unaligned write. A request TensorStore gave up on
(after the retries ``_store_client`` bounds) is a ``StoreError`` naming the URL.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Any

import numpy as np

from chunkgraph._errors import ConfigError
from chunkgraph.volume._object_store import (
    StoreOptions,
    check_bucket_name,
    endpoint_of,
    reaching,
    split_url,
)
from chunkgraph.volume._storage import Index, VolumeMeta
from chunkgraph.volume._store_client import tensorstore_bounds
from chunkgraph.volume._store_errors import aws_credentials_configured
from chunkgraph.volume._store_keys import canonical


def tensorstore_module(fmt: str) -> Any:
    try:
        import tensorstore
    except ImportError as err:
        raise ConfigError(
            f"{fmt} volumes are read and written through the tensorstore package "
            "(pip install 'chunkgraph[tensorstore]')",
            field="path",
        ) from err
    return tensorstore


@functools.cache
def shared_context() -> Any:
    """One TensorStore context per process: all volumes share its I/O threads."""
    return tensorstore_module("these").Context()


def kvstore_spec(place: str, options: StoreOptions, directory: bool = True) -> dict[str, Any]:
    """TensorStore's key-value store spec for a local path or an ``s3://`` URL (its
    bucket named as S3 allows, or a ``ConfigError`` that says what a name may be)."""
    suffix = "/" if directory else ""
    if "://" not in place:
        return {"driver": "file", "path": place.rstrip("/") + suffix}
    scheme, bucket, prefix = split_url(place)
    check_bucket_name(scheme, place, bucket)
    if scheme != "s3":
        raise ConfigError(
            f"{place!r}: TensorStore-served formats (precomputed, N5) reach s3:// URLs and "
            "local paths here; copy the volume, or use Zarr (zarr://) on gs://",
            field="path",
        )
    if options.secret_names():
        raise ConfigError(
            f"{place!r}: TensorStore (which serves precomputed and N5) takes credentials from "
            f"the environment or ~/.aws files, not storage_options "
            f"({', '.join(options.secret_names())}); set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead",
            field="storage_options",
        )
    settings = options.public()
    spec: dict[str, Any] = {
        "driver": "s3",
        "bucket": bucket,
        "path": prefix + suffix if prefix else "",
    }
    endpoint = endpoint_of("s3", options)
    if endpoint:
        spec["endpoint"] = str(endpoint)
    region = settings.get("region") or os.environ.get("AWS_REGION")
    if region:
        spec["aws_region"] = str(region)
    spec["aws_credentials"] = {"type": _credential_source(settings)}
    # The same bounded retries (and a watchdog on silent tries) as obstore's stores.
    spec["context"] = tensorstore_bounds({canonical(k): v for k, v in settings.items()})
    return spec


def _credential_source(settings: dict[str, Any]) -> str:
    """Which of TensorStore's AWS credential providers to use: the one the environment
    offers, named, since its default chain logs an error line on stderr for each place it
    finds nothing (about ten, with no credentials at all) and then asks anonymously.

    ``skip_signature`` (a public bucket, as for Zarr's stores): anonymous. The
    variables: those. A profile, its files, web identity or a container's: the chain,
    which reads them. None of these on an EC2 instance: its metadata service (the
    instance's role). None anywhere else: anonymous, and a refusal is then told as
    missing credentials (``store_failure``), naming the variables to set.
    """
    skip = {canonical(k): v for k, v in settings.items()}.get("skip_signature")
    if skip is True or str(skip).lower() == "true":
        return "anonymous"
    if os.environ.get("AWS_ACCESS_KEY_ID"):
        return "environment"
    if aws_credentials_configured():
        return "default"
    return "imds" if _on_ec2() else "anonymous"


def _on_ec2() -> bool:
    """Whether this machine is an EC2 instance, as AWS documents telling it: the DMI
    vendor (Nitro) or the Xen hypervisor's uuid."""
    for path, mark in (
        ("/sys/class/dmi/id/board_vendor", "Amazon EC2"),
        ("/sys/class/dmi/id/sys_vendor", "Amazon EC2"),
        ("/sys/hypervisor/uuid", "ec2"),
    ):
        with contextlib.suppress(OSError), open(path) as f:
            if f.read().strip().startswith(mark):
                return True
    return False


class TensorStoreView:
    """A TensorStore view in local index order (channels first, origin 0)."""

    def __init__(
        self,
        path: str,
        view: Any,
        meta: VolumeMeta,
        options: StoreOptions,
        *,
        read_chunks: tuple[int, ...],
        alignment_note: str,
        reopen: tuple[str, int | str | None],
    ) -> None:
        self.path = path
        self.meta = meta
        self.options = options
        self.read_chunks = read_chunks
        self.alignment_note = alignment_note
        # (the path and scale ``open`` takes to reach this array again, in another process)
        self.reopen = reopen
        self._view = view

    def read(self, index: Index) -> np.ndarray[Any, Any]:
        with reaching(self.path, self.options):
            return np.asarray(self._view[index].read().result())

    def write(self, index: Index, data: np.ndarray[Any, Any]) -> None:
        with reaching(self.path, self.options):
            self._view[index].write(data).result()
