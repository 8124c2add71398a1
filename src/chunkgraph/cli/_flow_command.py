"""What ``chunkgraph downsample``, ``transfer`` and ``label`` share: their run options on
the command line, one way to run a flow and turn its outcome into an exit code, and the
words their refusals use here.

They are apply flows with a fixed function, so they take the options ``chunkgraph run``
takes for one (executor, workers, resume, dry run, lock wait, memory limit, progress or
JSON events) and end the same way: 0 done, 1 the work failed or the flow is locked, 2 bad
options, 130 interrupted (``--resume`` continues). A job's refusal is written once with
its parameters as words (the jobs' ``JobRefusal``); ``OPTIONS`` is the one table of
those words as this command line spells them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from chunkgraph._errors import ConfigError, FlowLockedError, VolumeNotFoundError
from chunkgraph.cli._cmd_plan import parse_bytes
from chunkgraph.cli._cmd_run import (
    EXIT_INTERRUPTED,
    executor_arg,
    failure_summary,
    locked_message,
    seconds_arg,
)
from chunkgraph.cli._main import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from chunkgraph.cli._output import (
    add_output_options,
    check_output_options,
    close_output,
    event_output,
)
from chunkgraph.cli._view_link import add_view_option, say_view
from chunkgraph.flow import RunOptions

# How the jobs' refusals name their parameters here: by the options (the keys are the
# jobs' table of Python's words, ``PYTHON_WORDS``; a test checks that they agree).
OPTIONS = {
    "threshold": "--threshold T",
    "connectivity": "--connectivity",
    "dtype": "--dtype",
    "chunk": "--chunk",
    "chunks": "--chunks",
    "cast": "--cast",
    "dst_template": "--dst TEMPLATE",
    "memory_limit": "--memory-limit",
    "resume": "--resume",
    "remove": "remove it first",
    "zarr3": "--format zarr3",
}


def as_option(name: str, value: Any) -> str:
    """A job's setting as this command line gives it (``Settings``): "--chunks 32,32,32",
    "--bbox 0,0,0:64,64,64", "--method mean", "no --shards"; a setting no option gives
    (a level's number) by its name."""
    if name not in SETTING_OPTIONS:
        return f"{name} {value}"
    if value is None:
        return f"no --{name}"
    if isinstance(value, list) and all(isinstance(v, list) for v in value):  # a box
        return f"--{name} " + ":".join(",".join(map(str, v)) for v in value)
    if isinstance(value, list):
        return f"--{name} " + ",".join(map(str, value))
    return f"--{name} {value}"


# The settings in jobs' marks that are options of the same name here.
SETTING_OPTIONS = frozenset(
    {"bbox", "chunks", "shards", "dtype", "cast", "factor", "method", "threshold",
     "connectivity", "chunk"}
)  # fmt: skip


def add_flow_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--executor",
        type=executor_arg,
        default="threads",
        metavar="{threads,adaptive,processes,sync,tcp://HOST:PORT}",
        help="where the tasks run (default threads)",
    )
    parser.add_argument("--workers", type=int, default=None, help="executor size")
    parser.add_argument(
        "--resume", action="store_true", help="continue an interrupted run where it stopped"
    )
    parser.add_argument("--dry-run", action="store_true", help="plan and estimate; write nothing")
    parser.add_argument(
        "--lock-wait",
        type=seconds_arg,
        default=0.0,
        metavar="SECONDS",
        help="wait up to SECONDS (inf: as long as it takes) while this flow runs elsewhere or "
        "another flow writes what it reads or writes, instead of refusing at once (default 0)",
    )
    parser.add_argument(
        "--memory-limit",
        metavar="BYTES",
        default=None,
        help="memory budget, e.g. 2GiB (default: half of what is available)",
    )
    add_output_options(parser)
    add_view_option(parser)


def int_tuple(text: str) -> tuple[int, ...]:
    """``"2,2,1"`` -> (2, 2, 1); argparse turns the ValueError into a usage error."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers, e.g. 2,2,1"
        ) from None


def run_flow(
    command: str,
    args: argparse.Namespace,
    call: Callable[..., Any],
    again: str,
    shown: Callable[[Any], list[str]],
    told: Callable[[Any], dict[str, Any]] | None = None,
) -> int:
    """Call ``call(run=the run options)`` and print its summary and the view command of
    ``shown(its report)``: the volumes to look at; the exit code of the outcome.
    ``told(its report)``: more facts for a JSON log's outcome line."""
    if args.workers is not None and args.workers < 1:
        print(
            f"chunkgraph {command}: --workers must be at least 1, got {args.workers}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    check_output_options(args)  # a ConfigError: _main exits 2
    memory = None if args.memory_limit is None else parse_bytes(args.memory_limit, "--memory-limit")
    progress, subscribers = event_output(args)
    outcome = "interrupted"
    facts: dict[str, Any] = {}
    try:
        run = RunOptions(
            executor=args.executor, workers=args.workers, resume=args.resume,
            dry_run=args.dry_run, lock_wait=args.lock_wait, memory_limit=memory,
            progress=progress, subscribers=tuple(subscribers),
        )  # fmt: skip
        report = _in_options(call, run=run)
        outcome = "finished"
        # What the summary says of saturation, for a log read alone.
        facts["saturated_voxels"] = report.saturated_voxels
        facts.update(told(report) if told is not None else {})
    except VolumeNotFoundError as err:  # a source that is not there: the arguments are wrong
        outcome = "failed"
        print(f"chunkgraph {command}: {err}", file=sys.stderr)
        return EXIT_USAGE
    except FlowLockedError as err:
        outcome = "locked"
        print(locked_message(command, err, args.dst, again, lock_wait_flag=True), file=sys.stderr)
        return EXIT_FAILED
    except ExceptionGroup as group:
        outcome = "failed"
        print(failure_summary(group), file=sys.stderr)
        print(
            f"chunkgraph {command}: failed; fix the cause and run it again with --resume",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"\nchunkgraph {command}: interrupted; `--resume` continues", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        close_output(subscribers, outcome, facts)
    out = sys.stderr if args.log_json == "-" else sys.stdout
    print(report.summary(plan=not args.quiet), file=out)
    say_view(args, shown(report), out)
    return EXIT_OK


def _in_options(call: Callable[..., Any], **kwargs: Any) -> Any:
    """``call(**kwargs)``, the refusals of jobs spelled with the command line's options."""
    try:
        return call(**kwargs)
    except ConfigError as err:
        spelled = getattr(err, "spelled", None)  # the jobs' refusals: ``JobRefusal``
        if not callable(spelled):
            raise
        raise ConfigError(spelled(OPTIONS, as_option), field=err.field) from err
