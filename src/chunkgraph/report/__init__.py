"""Run reports: record a run's events, write report.json and its pictures, summarize.

    recorder = Recorder()
    chunkgraph.run(graph, target, subscribers=[recorder])   # or apply(..., subscribers=...)
    write_report("report", recorder, {"bytes_read": ...})   # report.json, gantt.png,
                                                            # utilisation.png
    print(summarize("report"))                              # also: chunkgraph report DIR

The document's format is described in ``_document``; the pictures in ``_charts``.
"""

from __future__ import annotations

from chunkgraph.report._charts import render_pictures
from chunkgraph.report._document import load_report
from chunkgraph.report._recorder import Recorder, TaskRecord, Try
from chunkgraph.report._summary import summarize
from chunkgraph.report._write import write_report

__all__ = [
    "Recorder",
    "TaskRecord",
    "Try",
    "load_report",
    "render_pictures",
    "summarize",
    "write_report",
]
