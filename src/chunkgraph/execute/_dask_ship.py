"""Code that lives only on this machine, sent to a Dask cluster's workers.

A spec's function may live beside the spec: one module (``ops.py``) or a
package (``ops/__init__.py`` and more). Workers run elsewhere and cannot import
it, and functions reach them by reference (module and name). ``ShipCode`` is a
worker plugin that carries the code's bytes: a module as it is, a package as a
zip of its directory. Registered under one name per module or package, it runs
on every worker, those that join later included (a restarted worker too), and
registering it again with changed code replaces the old one.

On a worker, ``setup`` writes the bytes into the worker's directory under a
name holding their digest, forgets the module and its submodules if they were
imported before (so that changed code is not shadowed by what the worker had
loaded), puts the file first on ``sys.path`` and imports the module: an import
error fails the registration, and the client says so before anything runs.

Why not Dask's ``UploadFile``: it reloads a zip's top-level package only, so a
changed submodule stays stale on a worker that had imported it.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import sys
import zipfile
from pathlib import Path
from typing import Any

try:  # the plugin base class when distributed is there (it is, wherever this is used)
    from distributed.diagnostics.plugin import WorkerPlugin
except ImportError:  # pragma: no cover - chunkgraph[dask] not installed
    WorkerPlugin = object  # type: ignore[misc,assignment]


def code_bytes(path: str) -> tuple[str, str, bytes]:
    """``(name, suffix, bytes)`` of the module file or package directory at ``path``:
    a package's directory zipped, its files under ``<name>/`` (caches left out)."""
    where = Path(path)
    if where.is_file():
        return where.stem, where.suffix, where.read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(where.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                archive.write(file, Path(where.name) / file.relative_to(where))
    return where.name, ".zip", buffer.getvalue()


class ShipCode(WorkerPlugin):  # type: ignore[misc]
    """Make module or package ``path`` (on this machine) importable on every worker."""

    def __init__(self, path: str) -> None:
        self.module, self.suffix, self.data = code_bytes(path)
        self.name = f"chunkgraph-code-{self.module}"  # one plugin per module: a resend replaces

    def setup(self, worker: Any) -> None:
        digest = hashlib.sha256(self.data).hexdigest()[:16]
        folder = Path(worker.local_directory) / "chunkgraph-code" / digest
        folder.mkdir(parents=True, exist_ok=True)
        if self.suffix == ".py":
            target = folder / f"{self.module}.py"
            entry = str(folder)
        else:
            target = folder / f"{self.module}.zip"
            entry = str(target)
        if not target.exists():
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(self.data)
            os.replace(tmp, target)
        prefix = f"{self.module}."
        for loaded in [m for m in sys.modules if m == self.module or m.startswith(prefix)]:
            del sys.modules[loaded]  # changed code must not be shadowed by what was loaded
        if entry not in sys.path:
            sys.path.insert(0, entry)
        importlib.invalidate_caches()
        importlib.import_module(self.module)
