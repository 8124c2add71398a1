"""A run report directory written: report.json first, then the pictures drawn from it.

It sits above the two halves it joins (``_document``, ``_charts``, which reads the
document), so that neither imports the other.

The pictures need matplotlib, which ``_charts`` imports only when it draws.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from chunkgraph.report._charts import render_pictures
from chunkgraph.report._document import REPORT_FILE, build_report
from chunkgraph.report._recorder import Recorder


def write_report(
    directory: str | Path,
    recorder: Recorder,
    summary: Mapping[str, Any] | None = None,
    task_bytes: Iterable[tuple[str, int, int]] = (),
) -> Path:
    """Write ``report.json``, ``gantt.png`` and ``utilisation.png`` under ``directory``.

    ``summary``: the caller's own figures (e.g. an ApplyReport's ``bytes_read``,
    ``bytes_written``, ``read_amplification``), kept under "summary"; given
    ``bytes_read``/``bytes_written``, the utilisation chart adds the I/O rate.
    ``task_bytes``: each task's (name, bytes read, bytes written), as an
    ApplyReport's ``task_bytes``: the I/O rate is then drawn over time.
    Returns the directory.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    document = build_report(recorder, summary, task_bytes)
    temporary = folder / (REPORT_FILE + ".tmp")
    temporary.write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    temporary.replace(folder / REPORT_FILE)  # a reader never sees half a report
    render_pictures(folder, document)
    return folder
