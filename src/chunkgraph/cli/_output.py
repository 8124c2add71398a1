"""What every long-running command shows while it works: a progress bar, JSON lines, or nothing.

    --quiet           no progress bar and no plan in the final summary (errors, warnings
                      and the summary's result lines still print)
    --log-json PATH   one JSON object per event, one per line, to PATH ("-": stdout),
                      instead of the bar: for batch systems and dashboards. A failed
                      try's "error" is the error under any loop's group (the one that
                      names the chunk); a corrupt chunk adds "corrupt": its volume,
                      chunks, keys and files

``add_output_options`` adds both to a subparser; ``check_output_options`` says
whether the --log-json file can be written (a ConfigError, exit 2, before the
command writes anything); ``event_output`` turns the parsed options into (show a
progress bar?, extra event subscribers). Commands pass both to ``run``/``apply``
and close the subscribers when done.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from chunkgraph._errors import ConfigError, CorruptChunkError
from chunkgraph.execute import Event
from chunkgraph.execute._failures import describe_innermost, innermost


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--quiet", action="store_true", help="no progress bar, and no plan in the summary"
    )
    parser.add_argument(
        "--log-json",
        metavar="PATH",
        default=None,
        help="write one JSON line per event to PATH ('-': stdout) instead of the progress bar",
    )


def writable_file_problem(path: str) -> str | None:
    """Why a file cannot be written at ``path`` (None: it can), without creating it."""
    if os.path.isdir(path):
        return f"{path} is a directory; give a file path"
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        return f"the folder {folder} does not exist; create it first or give another path"
    if not os.access(folder, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{path} is not writable"
    return None


def check_output_options(args: argparse.Namespace) -> None:
    """A ConfigError (exit 2) when the --log-json file cannot be written; creates nothing."""
    if args.log_json and args.log_json != "-":
        problem = writable_file_problem(args.log_json)
        if problem:
            raise ConfigError(f"--log-json {args.log_json}: {problem}; nothing was run")


class JsonLines:
    """An event subscriber writing each Event as one JSON object per line."""

    def __init__(self, path: str) -> None:
        self._own = path != "-"
        try:
            # Line-buffered: each event is in the file as it happens, for a watcher or a
            # post-mortem after a kill -9 (a block-buffered file would hold the last ones).
            self._out: IO[str] = (
                open(path, "w", encoding="utf-8", buffering=1)  # noqa: SIM115
                if self._own
                else sys.stdout
            )
        except OSError as err:
            raise ConfigError(
                f"--log-json {path}: cannot write it ({err.strerror or err}); nothing was run"
            ) from err

    def __call__(self, event: Event) -> None:
        record: dict[str, Any] = {
            "event": event.kind.value,
            "time": round(event.time, 6),
        }
        if event.pass_name:  # which of a job's flows (label's find or relabel pass)
            record["pass"] = event.pass_name
        if event.task >= 0:
            record.update(task=event.task, name=event.name, attempt=event.attempt)
        if event.total:
            record["total"] = event.total
        worker = getattr(event, "worker", "")
        if worker:
            record["worker"] = worker
        if event.error is not None:  # the error under a loop's group, which names the chunk
            record["error"] = describe_innermost(event.error)
            leaf, _ = innermost(event.error)
            if isinstance(leaf, CorruptChunkError):  # for scripts that repair or delete them
                record["corrupt"] = {
                    "volume": leaf.volume,
                    "chunks": [list(c) for c in leaf.chunks],
                    "keys": list(leaf.keys),
                    "files": list(leaf.files),
                }
        step = event.activation
        if step is not None:  # the adaptive executor's check: workers and readings
            record.update(
                active=list(step.active),
                added=list(step.added),
                cpu=step.cpu,
                io=step.io,
                cpu_grows=step.cpu_grows,
                io_grows=step.io_grows,
            )
        self._out.write(json.dumps(record) + "\n")
        if not self._own:
            self._out.flush()

    def close(self, outcome: str | None = None, facts: dict[str, Any] | None = None) -> None:
        """Close the file; ``outcome`` ("finished", "failed", "interrupted", ...) first goes
        in as a last line, with ``facts`` about the run, so that the log alone says how the
        run ended."""
        if outcome is not None:
            last = {"event": "outcome", "outcome": outcome, **(facts or {})}
            self._out.write(json.dumps(last) + "\n")
        if self._own:
            self._out.close()
        else:
            self._out.flush()


def event_output(args: argparse.Namespace) -> tuple[bool, list[Callable[[Event], None]]]:
    """(show a progress bar, the subscribers the options ask for)."""
    subscribers: list[Callable[[Event], None]] = []
    if args.log_json:
        subscribers.append(JsonLines(args.log_json))
    return (not args.quiet and not args.log_json), subscribers


def close_output(
    subscribers: list[Callable[[Event], None]],
    outcome: str | None = None,
    facts: dict[str, Any] | None = None,
) -> None:
    """Close what ``event_output`` opened; a JSON log ends with the run's ``outcome`` and
    ``facts`` about it (e.g. ``saturated_voxels``)."""
    for subscriber in subscribers:
        if isinstance(subscriber, JsonLines):
            subscriber.close(outcome, facts)
