"""report.json: what a Recorder saw, as one JSON document, and that document read back.

    Recorder ──build_report──> dict ──write_report (_write)──> DIR/report.json
                                 │                             DIR/gantt.png, DIR/utilisation.png
    DIR/report.json ──load_report──> dict ──> summarize(), render_pictures()

The pictures and the summary are drawn from the document only, never from the
Recorder, so ``chunkgraph report DIR`` re-renders exactly what a run wrote.

The document (``format`` 1; times in seconds from the first run's start)::

    {"format": 1,
     "totals":  {"tasks", "finished", "failed", "cancelled", "retried" (tasks with
                 at least one retry), "retries" (failed tries retried), "runs",
                 "workers", "wall_seconds", "busy_seconds", "steals", "tasks_stolen"},
     "workers": [names, in row order],
     "notes":   [sentences a reader needs, e.g. what rows mean for processes],
     "tasks":   [{"id", "run", "name", "level" ("top" | "reduce" | null), "worker",
                  "start", "end" (null for a task that never ran), "attempts",
                  "retries", "outcome" ("finished" | "failed" | "cancelled" |
                  "pending"), "error" (failed only), "tries" (only when more than
                  one: [[worker, start, end, failed], ...]), "bytes_read",
                  "bytes_written" (when the caller gave them per task)}, ...],
     "summary": {the caller's fields, e.g. bytes_read, bytes_written},
     "activation": [{"at", "active" (workers per context), "cpu" (busy cores),
                     "io" (bytes/s), "cpu_grows", "io_grows"}, ...]
                   (only for the adaptive executor: one entry per accepted check),
     "gpu":     ["gpu: 3 upload(s), 1 download(s), 4,096 bytes moved, 0 spill(s)", ...]
                   (only for runs with GPU tasks: one line per run)}

Workers. A try started by a worker thread names it. Tries the calling thread
announced (sync executor: it ran them; process executor: it submitted them to
a pool whose process is not known) are packed into rows: one row, "main", when
they never overlap, else "slot-1", "slot-2", ... (in-flight slots, not processes).

Ends. The thread executor reports the outcomes of a batch of tasks at once, so
every FINISHED of a batch carries the batch's end. A thread runs one try at a
time, so a try on a named worker is taken to end no later than the next try
that worker starts: the bars then tile the batch instead of overlapping.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError
from chunkgraph.report._recorder import Recorder, TaskRecord, Try

if TYPE_CHECKING:
    from chunkgraph.parallel import ActivationEvent

REPORT_FORMAT = 1
REPORT_FILE = "report.json"

# apply() names its tasks "apply-top<Box>" and "apply-reduce<Box>" ("apply-topBox(start=...").
_LEVEL = re.compile(r"apply-(top|reduce)(?![a-z_])")


def level_of(name: str) -> str | None:
    """The flow level a task's name tells ("top" or "reduce"), else None.

    >>> level_of("apply-topBox(start=(0, 0), stop=(8, 8))"), level_of("apply-reduceBox(...)")
    ('top', 'reduce')
    >>> level_of("apply-topology"), level_of("sum")
    (None, None)
    """
    match = _LEVEL.match(name)
    return match.group(1) if match else None


def build_report(
    recorder: Recorder,
    summary: Mapping[str, Any] | None = None,
    task_bytes: Iterable[tuple[str, int, int]] = (),
) -> dict[str, Any]:
    """The report document (see the module doc) of what ``recorder`` saw.

    ``task_bytes``: (task name, bytes read, bytes written) of the tasks that know
    them (``ApplyReport.task_bytes``); the utilisation chart then draws the I/O
    rate over time from them.
    """
    io = {name: (int(read), int(written)) for name, read, written in task_bytes}
    records = recorder.tasks
    origin = recorder.run_start
    if math.isnan(origin):  # no RUN_STARTED seen: measure from the first try
        origin = min((t.start for r in records for t in r.tries), default=0.0)
    lanes, notes = _assign_lanes(records)
    ends = _clipped_ends(records)

    def at(seconds: float) -> float | None:
        return None if math.isnan(seconds) else round(seconds - origin, 6)

    tasks: list[dict[str, Any]] = []
    workers: set[str] = set()
    busy = 0.0
    for record in records:
        tries = [
            (lanes.get(id(t), t.worker), at(t.start), at(ends.get(id(t), t.end)), t.failed)
            for t in record.tries
        ]
        tasks.append(_task_entry(record, tries, io))
        for worker, start, end, _ in tries:
            workers.add(worker)
            if start is not None and end is not None:
                busy += end - start
    tasks.sort(key=lambda e: (e["start"] is None, e["start"] or 0.0))
    document: dict[str, Any] = {
        "format": REPORT_FORMAT,
        "totals": _totals(recorder, origin, len(workers), busy),
        "workers": sorted(workers, key=_natural),
        "notes": notes,
        "tasks": tasks,
        "summary": _jsonable(dict(summary or {})),
    }
    if recorder.activations:
        document["activation"] = [
            _activation(at(when), step) for when, step in recorder.activations
        ]
    if recorder.transfers:
        document["gpu"] = list(recorder.transfers)
    return document


_Tried = tuple[str, float | None, float | None, bool]  # (row, start, end, failed) of one try


def _task_entry(
    record: TaskRecord, tries: list[_Tried], io: Mapping[str, tuple[int, int]]
) -> dict[str, Any]:
    """One task's entry in "tasks" (see the module doc), its tries placed in rows."""
    entry: dict[str, Any] = {
        "id": record.task,
        "run": record.run,
        "name": record.name,
        "level": level_of(record.name),
        "worker": tries[-1][0] if tries else "",
        "start": tries[0][1] if tries else None,
        "end": tries[-1][2] if tries else None,
        "attempts": len(tries),
        "retries": record.retries,
        "outcome": record.outcome,
    }
    if record.name in io:
        entry["bytes_read"], entry["bytes_written"] = io[record.name]
    if record.outcome == "failed":
        entry["error"] = record.error
    if len(tries) > 1:
        entry["tries"] = [list(t) for t in tries]
    return entry


def _totals(recorder: Recorder, origin: float, workers: int, busy: float) -> dict[str, Any]:
    """The document's "totals" (see the module doc)."""
    records = recorder.tasks
    end = recorder.run_end if not math.isnan(recorder.run_end) else None
    if end is None:  # the run did not finish (it was interrupted): up to the last end seen
        end = max(
            (t.end for r in records for t in r.tries if not math.isnan(t.end)), default=origin
        )
    outcomes = [r.outcome for r in records]
    return {
        "tasks": len(records),
        "finished": outcomes.count("finished"),
        "failed": outcomes.count("failed"),
        "cancelled": outcomes.count("cancelled"),
        "retried": sum(1 for r in records if r.retries > 0),
        "retries": sum(r.retries for r in records),
        "runs": recorder.runs,
        "workers": workers,
        "wall_seconds": round(max(0.0, end - origin), 6),
        "busy_seconds": round(busy, 6),
        "steals": recorder.steals,
        "tasks_stolen": recorder.tasks_stolen,
    }


def _activation(at: float | None, step: ActivationEvent) -> dict[str, Any]:
    """One accepted check of the adaptive executor, as an "activation" entry."""
    return {
        "at": at,
        "active": list(step.active),
        "cpu": None if step.cpu is None else round(step.cpu, 3),
        "io": None if step.io is None else round(step.io),
        "cpu_grows": step.cpu_grows,
        "io_grows": step.io_grows,
    }


def _assign_lanes(records: list[TaskRecord]) -> tuple[dict[int, str], list[str]]:
    """Rows for the tries announced by the calling thread (worker ""); see the module doc.

    Returns ``{id(try): row}`` and the notes that explain the rows.
    """
    anonymous = sorted((t for r in records for t in r.tries if not t.worker), key=lambda t: t.start)
    if not anonymous:
        return {}, []
    free: list[tuple[float, int]] = []  # (end, row) of rows in use, earliest end first
    rows = 0
    row_of: dict[int, int] = {}
    for t in anonymous:
        end = t.start if math.isnan(t.end) else t.end
        if free and free[0][0] <= t.start:
            _, row = heapq.heappop(free)
        else:
            rows += 1
            row = rows
        row_of[id(t)] = row
        heapq.heappush(free, (end, row))
    if rows == 1:
        return {key: "main" for key in row_of}, []
    note = (
        "tasks announced by the calling thread overlapped (the process executor "
        "announces a task when it submits it): rows slot-N are in-flight slots, "
        "not pool processes, and bars include time queued in the pool"
    )
    return {key: f"slot-{row}" for key, row in row_of.items()}, [note]


def _clipped_ends(records: list[TaskRecord]) -> dict[int, float]:
    """``{id(try): end}`` for tries on a named worker that end after that worker's next
    start (a batch's FINISHED events; see the module doc)."""
    by_worker: dict[str, list[Try]] = {}
    for record in records:
        for t in record.tries:
            if t.worker:
                by_worker.setdefault(t.worker, []).append(t)
    ends: dict[int, float] = {}
    for tries in by_worker.values():
        tries.sort(key=lambda t: t.start)
        for t, after in itertools.pairwise(tries):
            if not t.end <= after.start:  # NaN (never ended) too
                ends[id(t)] = after.start
    return ends


def _natural(name: str) -> tuple[Any, ...]:
    """Sort key putting "worker-2" before "worker-10"."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _jsonable(value: Any) -> Any:
    """``value`` with numpy scalars, tuples and paths turned into plain JSON values."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    item = getattr(value, "item", None)  # numpy scalars
    if callable(item):
        return _jsonable(item())
    return str(value)


def load_report(directory: str | Path) -> dict[str, Any]:
    """The document of ``directory/report.json``, checked; ConfigError says what is wrong."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ConfigError(
            f"no report directory at {str(folder)!r}; give the directory a run wrote "
            "its report to (it holds report.json)"
        )
    path = folder / REPORT_FILE
    if not path.is_file():
        raise ConfigError(f"{str(folder)!r} holds no {REPORT_FILE}: is it a run report directory?")
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"cannot read {str(path)!r} as JSON: {error}") from error
    problem = _problem(document)
    if problem:
        raise ConfigError(f"{str(path)!r} is not a chunkgraph run report: {problem}")
    return dict(document)


def _problem(document: Any) -> str:
    """What makes ``document`` unusable as a report, "" when nothing does."""
    if not isinstance(document, dict):
        return f"expected a JSON object, got {type(document).__name__}"
    if document.get("format") != REPORT_FORMAT:
        return f"format {document.get('format')!r}, this version reads format {REPORT_FORMAT}"
    for key, kind in (("totals", dict), ("workers", list), ("tasks", list), ("summary", dict)):
        if not isinstance(document.get(key), kind):
            return f"{key!r} is missing or not a JSON {kind.__name__}"
    for i, task in enumerate(document["tasks"]):
        if not isinstance(task, dict) or not {"name", "worker", "start", "end"} <= task.keys():
            return f"task {i} lacks name, worker, start or end"
    return ""


def tries_of(task: Mapping[str, Any]) -> list[Try]:
    """A task entry's tries (worker, start, end, failed); none for a task that never ran."""
    if "tries" in task:
        return [Try(str(w), float(s), float(e), bool(f)) for w, s, e, f in task["tries"]
                if s is not None and e is not None]  # fmt: skip
    if task["start"] is None or task["end"] is None:
        return []
    return [Try(task["worker"], task["start"], task["end"], task.get("outcome") == "failed")]
