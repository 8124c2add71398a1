"""``chunkgraph reduce``: reduce a deferred flow's layers into its destination.

    chunkgraph reduce DST [FLOW_ID] [--intermediates DIR] [--blend-mode MODE]
                      [--executor KIND|ADDRESS] [--workers N] [--quiet | --log-json PATH]

A flow applied with ``blend_modes="defer"`` stops after its top-level tasks and
keeps their outputs in checkerboard layers (``chunkgraph status`` lists it as
deferred). This command writes them into ``DST`` with ``MODE`` (default
quadratic): the bytes ``apply`` with that mode would have written. The flows
are looked up beside ``DST`` (with those a run kept elsewhere and noted there), or
in ``--intermediates DIR``; ``DST`` may be the spec file of the run (its output and
``intermediates:``), and one that does not exist is a usage error (exit 2). ``FLOW_ID``
may be left out when exactly one deferred flow is there. Calling it again after a
failure resumes; after success it does nothing.

Without ``FLOW_ID`` and with no deferred flow there, what it finds decides
(``_nothing_deferred``), and the message lists every flow it looked at:

    only finished flows        nothing left to reduce: exit 0 (already done); exit 2
                               when --blend-mode names another mode than they were
                               reduced with
    a flow running             exit 1: run it again once that one ends
    a deferred apply that was  exit 2: its top-level tasks are unfinished;
      interrupted                resume the apply first
    no flow at all             exit 2: wrong DST, or --intermediates missing

Exit codes: 0 reduced (or already reduced, or nothing left to reduce), 1 failed
or a flow is running, 2 usage (no such flow, several deferred flows and no
FLOW_ID, dst does not match), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from chunkgraph import flow, volume
from chunkgraph._errors import FlowLockedError
from chunkgraph.cli._cmd_run import (
    EXIT_INTERRUPTED,
    executor_arg,
    failure_summary,
    locked_message,
)
from chunkgraph.cli._cmd_status import locate
from chunkgraph.cli._main import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from chunkgraph.cli._output import (
    add_output_options,
    check_output_options,
    close_output,
    event_output,
)
from chunkgraph.flow import RunOptions
from chunkgraph.flow.state import FlowStatus, flow_location, status_command

if TYPE_CHECKING:
    from chunkgraph.flow.state import FlowState, StateRoot

# chunkgraph.flow.plan's blend modes a deferred flow can be reduced with, stated here so
# that --help does not import the flow package; a test checks that they agree.
REDUCE_MODES = ("linear", "quadratic", "bump", "max")


def register(commands: Any) -> None:
    reduce = commands.add_parser(
        "reduce",
        help="reduce a deferred apply flow's layers into its destination",
        description="Write the layers a flow applied with blend_modes='defer' kept into DST. "
        "Without FLOW_ID, the one deferred flow beside DST is reduced; when none is left "
        "(every flow there finished, its layers reduced), it says so and exits 0.",
        epilog="exit codes: 0 reduced, already reduced or nothing left to reduce; 1 failed "
        "or a flow is running; 2 no flow to reduce (none there, an interrupted deferred "
        "apply, or several deferred flows and no FLOW_ID) or bad options; 130 interrupted",
    )
    reduce.add_argument(
        "dst", metavar="DST", help="the destination volume's path, or the spec file of its run"
    )
    reduce.add_argument(
        "flow_id", nargs="?", metavar="FLOW_ID", help="the deferred flow (default: the only one)"
    )
    reduce.add_argument(
        "--intermediates", metavar="DIR", help="the flows' directory, when apply was given one"
    )
    reduce.add_argument(
        "--blend-mode",
        choices=REDUCE_MODES,
        default=None,
        help="how overlapping top-level chunks combine (default quadratic)",
    )
    reduce.add_argument(
        "--executor",
        type=executor_arg,
        default="threads",
        metavar="{threads,adaptive,processes,sync,tcp://HOST:PORT}",
        help="where the reductions run (default threads)",
    )
    reduce.add_argument("--workers", type=int, default=None, help="executor size")
    add_output_options(reduce)
    reduce.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        print(
            f"chunkgraph reduce: --workers must be at least 1, got {args.workers}", file=sys.stderr
        )
        return EXIT_USAGE
    check_output_options(args)  # a ConfigError: _main exits 2
    where = locate("reduce", args.dst, args.intermediates)
    if where is None:
        return EXIT_USAGE
    dst_path, root = where.dst or args.dst, where.root
    flows = where.read(sizes=False)
    deferred = [s.flow_id for s in flows if s.status is FlowStatus.DEFERRED]
    flow_id = args.flow_id
    if flow_id is None:
        if not deferred:
            code, message = _nothing_deferred(dst_path, root, flows, args.blend_mode)
            quiet = code == EXIT_OK and args.log_json != "-"
            print(f"chunkgraph reduce: {message}", file=sys.stdout if quiet else sys.stderr)
            return code
        if len(deferred) > 1:
            print(
                f"chunkgraph reduce: give the FLOW_ID to reduce (deferred flows there: "
                f"{', '.join(deferred)} under {root}; `chunkgraph status` lists them)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        flow_id = deferred[0]

    flow_dir = next(
        (str(s.flow_dir) for s in flows if s.flow_id == flow_id), flow_location(root, flow_id)
    )
    try:
        dst = volume.open(dst_path, mode="r+", storage_options=where.options_for(dst_path))
    except (FileNotFoundError, ValueError) as err:
        print(f"chunkgraph reduce: cannot open {dst_path}: {err}", file=sys.stderr)
        return EXIT_USAGE
    progress, subscribers = event_output(args)
    outcome = "interrupted"
    try:
        run = RunOptions(executor=args.executor, workers=args.workers, progress=progress,
                         subscribers=tuple(subscribers))  # fmt: skip
        report = flow.reduce_deferred(
            flow_dir, dst, blend_mode=args.blend_mode or "quadratic", run=run
        )
        outcome = "finished"
    except FlowLockedError as err:
        outcome = "locked"
        again = f"`chunkgraph reduce {args.dst} {flow_id}` continues its work"
        print(locked_message("reduce", err, args.dst, again), file=sys.stderr)
        return EXIT_FAILED
    except ExceptionGroup as group:
        outcome = "failed"
        print(failure_summary(group), file=sys.stderr)
        print(
            "chunkgraph reduce: failed; fix the cause and run it again to resume", file=sys.stderr
        )
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("\nchunkgraph reduce: interrupted; run it again to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        close_output(subscribers, outcome)
    out = sys.stderr if args.log_json == "-" else sys.stdout
    print(report.summary(), file=out)
    return EXIT_OK


def _nothing_deferred(
    dst: str, root: StateRoot, flows: list[FlowState], blend_mode: str | None
) -> tuple[int, str]:
    """(exit code, message) when no FLOW_ID is given and no flow under ``root`` is deferred:
    the table in the module docstring, every flow found named with its state."""
    looked = f"looked for deferred flows under {root}"
    if not flows:
        return EXIT_USAGE, (
            f"nothing to reduce for {dst}: {looked} and found no flow at all. Reduce needs a "
            "flow applied with blend_modes='defer' into this destination; if apply was given "
            "intermediates=DIR, pass --intermediates DIR"
        )
    found = "; found: " + ", ".join(_described(s) for s in flows)
    listing = f" (`{status_command(root)}` shows them)"
    running = [s.flow_id for s in flows if s.status is FlowStatus.RUNNING]
    if running:
        return EXIT_FAILED, (
            f"no deferred flow is ready for {dst}: {looked}{found}. Flow {running[0]} is "
            f"running; once it ends, run `chunkgraph reduce {dst}` again{listing}"
        )
    unfinished = [s.flow_id for s in flows if s.unfinished and s.deferred]
    if unfinished:
        return EXIT_USAGE, (
            f"no deferred flow is ready for {dst}: {looked}{found}. Flow {unfinished[0]} was "
            "applied with blend_modes='defer' but stopped before all its top-level tasks "
            "were done: resume that apply (`chunkgraph run SPEC --resume`), then reduce it"
            f"{listing}"
        )
    modes = {s.reduced_with for s in flows if s.status is FlowStatus.FINISHED} - {None}
    if modes and blend_mode is not None and blend_mode not in modes:
        return EXIT_USAGE, (
            f"{dst} was reduced with {' and '.join(sorted(m for m in modes if m))}, not "
            f"{blend_mode}: {looked}{found}. Its layers were removed when it was reduced, so "
            f"it cannot be reduced again with another mode; apply the flow again with "
            f"blend_modes='defer' (or directly with blend_modes='{blend_mode}')"
        )
    return EXIT_OK, f"nothing left to reduce for {dst}: {looked}{found}"


def _described(state: FlowState) -> str:
    """``"f00d (finished 2026-01-02 03:04:05, reduced with linear)"``, one flow in a list."""
    if state.status is FlowStatus.FINISHED:
        mode = state.reduced_with
        how = f", reduced with {mode}" if mode else ""
        return f"{state.flow_id} (finished {state.finished}{how})"
    return f"{state.flow_id} ({state.status.value}, {state.progress()})"
