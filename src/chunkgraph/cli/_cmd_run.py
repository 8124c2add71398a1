"""``chunkgraph run SPEC.yaml``: one ``chunkgraph.flow.apply`` call written as a spec file.

    load_spec ──> check (a dry run of apply) ──> create the output ──> apply ──> summary
    SpecError / ConfigError: exit 2, nothing written
    task failures: exit 1, every failed task with its chunk    Ctrl-C: exit 130

--report DIR and --log-json PATH are checked first (a file where the report's
directory should be, a missing folder: exit 2, nothing written). A report that
cannot be written after the flow ran is a message, not a traceback: the exit
code is the run's own (0 when the flow finished), since the volume was written.

Everything is checked before anything is written: the spec (``_spec``), then the
flow itself through ``apply(dry_run=True)`` (divisibility, pads, bbox, an fn
that does not pickle for processes, a dst or state folder that cannot be
written). A new output does not exist during that check, so its place is
tried for writing, and the flow is checked against a stand-in: an empty Zarr
array of the same shape, chunks and dtype in a temporary directory (metadata
only, nothing of the volume's size); ``device: gpu`` without one is refused
there too. What fails after the output is made but before its first write (a
failed probe, a ConfigError of apply's, an error outside the tasks) takes back
the output this run created (``_new_output``), so exit 2 still means nothing
was written; an error outside any task is a message, not a traceback.
Two runs may start on one new output at once (disjoint bboxes): the one whose
creation finds it made meanwhile uses it when it matches the spec
(``_create_output``), else exit 2 naming output.path.
Command-line options override the spec's ``run:`` defaults.
On a Dask cluster (``--executor tcp://...``), the function's module (or package)
beside the spec is sent to the workers first (``DaskExecutor.ship_module``); one they cannot
import is refused there, exit 2, before anything is written. A spec's ``executor:
{slurm: {...}}`` (or pbs, lsf, sge, kubernetes) starts that cluster once the checks pass
(never in a dry run), waits for its first worker ("waiting for N worker(s) from slurm"
on stderr; none within ``start_timeout``: exit 2, nothing written), runs on it, and
cancels its jobs when the command ends, however it ends.
``--resume`` continues an interrupted flow: finished top-level tasks and
reductions are skipped (apply's ``resume=True``). A spec whose function,
kwargs, inputs or sizes changed since is another flow: it starts over, and a
warning on stderr names what changed and the earlier flow, whose state stays.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkgraph import flow, volume
from chunkgraph._errors import (
    ChunkgraphError,
    ConfigError,
    FlowLockedError,
    StoreError,
    TaskError,
    is_permanent,
)
from chunkgraph._util import write_problem
from chunkgraph.cli._main import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from chunkgraph.cli._new_output import NewOutput, set_aside
from chunkgraph.cli._output import (
    add_output_options,
    check_output_options,
    close_output,
    event_output,
)
from chunkgraph.cli._spec import SpecError, SpecProblem, load_spec
from chunkgraph.cli._view_link import add_view_option, say_view, spec_paths
from chunkgraph.execute import (
    EXECUTOR_KINDS,
    ClusterSpec,
    DaskExecutor,
    is_scheduler_address,
    start_cluster,
)
from chunkgraph.execute._failures import describe_innermost, innermost
from chunkgraph.flow import ProbeFailure, ReadAmplificationWarning, RunOptions, check_device
from chunkgraph.flow.state import StateRoot, default_state_root, dst_of_state_root
from chunkgraph.report import Recorder, write_report
from chunkgraph.viewer import view_command
from chunkgraph.volume import is_url, split_format

if TYPE_CHECKING:
    from chunkgraph.cli._spec import ResolvedSpec
    from chunkgraph.flow import ApplyReport

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for Ctrl-C


def register(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a volume flow described by a spec file",
        description="Apply a function over chunked volumes as a spec file describes "
        "(`chunkgraph spec-schema` prints the format; docs/spec-example.yaml shows it).",
    )
    run.add_argument("spec", metavar="SPEC.yaml", help="the spec file")
    run.add_argument(
        "--executor",
        type=executor_arg,
        default=None,
        metavar="{threads,adaptive,processes,sync,tcp://HOST:PORT}",
        help="where tasks run: a local kind or a Dask scheduler's address "
        "(default: the spec's run.executor, else threads)",
    )
    run.add_argument(
        "--workers",
        type=int,
        default=None,
        help="executor size (default: the spec's run.workers, else all cores; for adaptive, "
        "the most workers, default 4 per core)",
    )
    run.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run (if the function, kwargs, inputs or sizes changed "
        "since, the flow starts over, and a warning says what changed)",
    )
    run.add_argument(
        "--lock-wait",
        type=seconds_arg,
        default=None,
        metavar="SECONDS",
        help="wait up to SECONDS (inf: as long as it takes) while this flow runs elsewhere or "
        "another flow writes an overlapping region of the output, instead of refusing at once "
        "(default: the spec's lock_wait, else 0)",
    )
    run.add_argument("--report", metavar="DIR", default=None, help="write a run report to DIR")
    add_view_option(run)
    run.add_argument(
        "--dry-run", action="store_true", help="check the spec and say what a run would do"
    )
    add_output_options(run)
    run.set_defaults(handler=handle)


def seconds_arg(text: str) -> float:
    """A number of seconds >= 0 (``inf`` allowed); argparse reports the error."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds >= 0 (or inf)")
    return seconds


def executor_arg(text: str) -> str:
    """A local executor kind or a Dask scheduler address ("tcp://host:8786", any protocol)."""
    if text in EXECUTOR_KINDS or is_scheduler_address(text):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r} is neither one of {', '.join(EXECUTOR_KINDS)} nor a Dask scheduler "
        "address such as tcp://host:8786"
    )


def handle(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        print(f"chunkgraph run: --workers must be at least 1, got {args.workers}", file=sys.stderr)
        return EXIT_USAGE
    check_output_options(args)  # a ConfigError: _main exits 2
    if args.report is not None:  # a dry run's report is of its plan
        problem = report_dir_problem(args.report)
        if problem:
            print(f"chunkgraph run: --report {args.report}: {problem}", file=sys.stderr)
            return EXIT_USAGE
    try:
        with _spec_dir_importable(args.spec):
            try:
                resolved = load_spec(args.spec)
            except SpecError as err:
                print("\n".join(err.lines()), file=sys.stderr)
                print(f"chunkgraph run: {args.spec} has errors; nothing was run", file=sys.stderr)
                return EXIT_USAGE
            return _run(args, resolved)
    except KeyboardInterrupt:  # apply has stopped its workers and left its markers
        print(
            "\nchunkgraph run: interrupted; `--resume` continues where it stopped", file=sys.stderr
        )
        return EXIT_INTERRUPTED


def _run(args: argparse.Namespace, resolved: ResolvedSpec) -> int:
    """Check, make the output, apply: the steps of the module docstring, each ending
    the command with its exit code when it must."""
    # The command line's executor and workers over the spec's (both checked already).
    run = dataclasses.replace(
        resolved.run,
        executor=args.executor or resolved.run.executor or "threads",
        workers=args.workers or resolved.run.workers,
        lock_wait=resolved.run.lock_wait if args.lock_wait is None else args.lock_wait,
    )
    code = _checked(args, resolved, run)
    if code is not None:
        return code
    with _cluster_started(args, run) as run:
        # Before anything is written: the workers of a Dask cluster must import fn's module.
        problem = _ship_module(run.executor, resolved)
        if problem:
            print(f"chunkgraph run: {problem}; nothing was run", file=sys.stderr)
            return EXIT_USAGE
        # The log file is opened before the output is touched: a ConfigError if it cannot be.
        progress, subscribers = event_output(args)
        made = _output(args, resolved, subscribers)
        if isinstance(made, int):
            return made
        dst, new = made
        run = dataclasses.replace(run, resume=args.resume, progress=progress)
        return _apply(args, resolved, run, dst, new, subscribers)


@contextmanager
def _cluster_started(args: argparse.Namespace, run: RunOptions) -> Iterator[RunOptions]:
    """``run`` on the cluster its executor describes (a spec's ``executor: {slurm: ...}``):
    started once the spec and the flow are checked (a dry run starts none), its first
    worker awaited before anything is written, its jobs cancelled when the command ends.
    A cluster that cannot start, or whose workers do not come, is a ConfigError (exit 2)."""
    spec = run.executor
    if not isinstance(spec, ClusterSpec):
        yield run
        return

    def say(line: str) -> None:
        if not args.quiet:
            print(f"chunkgraph run: {line}", file=sys.stderr)

    executor = start_cluster(spec, retries=run.retries or 0, say=say)
    try:
        executor.wait_for_workers()
        yield dataclasses.replace(run, executor=executor, retries=None)
    finally:
        executor.close()


def _checked(args: argparse.Namespace, resolved: ResolvedSpec, run: RunOptions) -> int | None:
    """The flow checked by a dry run of apply (``_check_flow``): its exit code when the
    command ends here (refused, or a dry run said what it would do), else None."""
    try:
        with warnings.catch_warnings():
            if not args.dry_run:  # the run warns of the same read amplification itself
                warnings.simplefilter("ignore", ReadAmplificationWarning)
            check = _check_flow(resolved, run)
        if check.gpu_missing and not args.dry_run:
            check_device("gpu")  # the run's own refusal, before the output is made
    except ConfigError as err:
        print("\n".join(resolved.flow_error(err).lines()), file=sys.stderr)
        print(f"chunkgraph run: {args.spec} has errors; nothing was run", file=sys.stderr)
        return EXIT_USAGE
    if not args.dry_run:
        return None
    _say_plan(args, resolved, check)
    return EXIT_OK


def _say_plan(args: argparse.Namespace, resolved: ResolvedSpec, check: ApplyReport) -> None:
    """A dry run's plan: on stdout (stderr beside ``--log-json -``), as a report with
    ``--report`` and as the log's one line with ``--log-json``, its outcome "dry-run"."""
    plan = resolved.output
    out = sys.stderr if args.log_json == "-" else sys.stdout  # stdout: JSON lines only
    print(check.summary(), file=out)
    if plan.overwrite:
        print(f"  (the output {plan.path} will be replaced: the flow id will differ)", file=out)
    elif plan.existing is None:
        print(f"  (the output {plan.path} does not exist yet: the flow id will differ)", file=out)
    _, subscribers = event_output(args)
    close_output(subscribers, "dry-run", report_summary(check))
    if args.report is not None:
        _write_report(args.report, Recorder(), check, "dry-run", out, spec_paths(resolved))


def _output(
    args: argparse.Namespace, resolved: ResolvedSpec, subscribers: list[Callable[[Any], None]]
) -> tuple[Any, NewOutput | None] | int:
    """The output volume, made unless it exists, and what this run created (None: nothing);
    the exit code when it cannot be made as the spec says (the volume it was to replace
    put back)."""
    plan = resolved.output
    # The volume an overwrite replaces is set aside, not deleted: back if nothing is written.
    replaced = set_aside(plan.path) if plan.overwrite else None
    new: NewOutput | None = None  # what this run creates, taken back if it writes nothing
    try:
        dst = plan.existing
        if dst is None:
            dst, new = _create_output(resolved, replaced)
    except BaseException as err:
        if replaced is not None and (new is None or not new.take_back()):
            shutil.rmtree(plan.path, ignore_errors=True)  # a half-made new one: the old wins
            os.rename(replaced, plan.path)
        if not isinstance(err, SpecError):
            raise
        close_output(subscribers)
        print("\n".join(err.lines()), file=sys.stderr)
        print(f"chunkgraph run: {args.spec} has errors; nothing was run", file=sys.stderr)
        return EXIT_USAGE
    return dst, new


def _apply(
    args: argparse.Namespace,
    resolved: ResolvedSpec,
    run: RunOptions,
    dst: Any,
    new: NewOutput | None,
    subscribers: list[Callable[[Any], None]],
) -> int:
    """The flow itself, its outcome on stderr and in the report; the exit code."""
    recorder = _recorder(args, subscribers)  # one of the subscribers, with --report
    run = dataclasses.replace(run, subscribers=tuple(subscribers))
    # With events as JSON lines on stdout, everything else goes to stderr: stdout stays
    # one JSON object per line for whoever reads it.
    out = sys.stderr if args.log_json == "-" else sys.stdout
    report: ApplyReport | None = None
    outcome = "interrupted"
    try:
        report = flow.apply(resolved.fn, resolved.inputs, dst, **resolved.flow_options, run=run)
        outcome = "finished"
    except KeyboardInterrupt:  # before the first write (and no finished work): take it back
        taken = _taken_back(new)
        if taken:
            print(f"\nchunkgraph run: interrupted before anything was written{taken}",
                  file=sys.stderr)  # fmt: skip
        raise
    except (ExceptionGroup, ChunkgraphError, OSError) as err:
        outcome, code = _failed(args, resolved, err, new)
        return code
    finally:
        if new is not None:
            new.settle()  # the replaced volume goes unless it was put back
        close_output(subscribers, outcome)
        if recorder is not None and outcome != "locked":
            # A failed or interrupted run is when a report is needed most.
            _write_report(args.report, recorder, report, outcome, out, spec_paths(resolved))
    print(report.summary(plan=not args.quiet), file=out)
    say_view(args, spec_paths(resolved), out)
    return EXIT_OK


def _failed(
    args: argparse.Namespace, resolved: ResolvedSpec, err: Exception, new: NewOutput | None
) -> tuple[str, int]:
    """What the run's failure is said as (its outcome, its exit code): a lock held
    elsewhere, failed tasks, apply's refusal, an error outside the tasks."""
    if isinstance(err, FlowLockedError):
        again = f"`chunkgraph run {args.spec} --resume` reuses its work"
        path = resolved.output.path
        print(locked_message("run", err, path, again, lock_wait_flag=True), file=sys.stderr)
        return "locked", EXIT_FAILED
    if isinstance(err, ExceptionGroup):
        return "failed", _tasks_failed(err, new)
    if isinstance(err, ConfigError):  # apply's checks: before anything was written
        print("\n".join(resolved.flow_error(err).lines()), file=sys.stderr)
        print(f"chunkgraph run: nothing was run{_taken_back(new)}", file=sys.stderr)
        return "failed", EXIT_USAGE
    if isinstance(err, ChunkgraphError):  # outside any task: the probe's read of a corrupt chunk
        print(f"chunkgraph run: {type(err).__name__}: {err}", file=sys.stderr)
        print(f"chunkgraph run: nothing was written{_taken_back(new)}", file=sys.stderr)
        return "failed", EXIT_FAILED
    # The flow's own files (lock, layers, records): a full disk, say. Outside the tasks:
    # before the run (an untouched output), or after it (written).
    print(f"chunkgraph run: {describe_innermost(err)}{_taken_back(new)}", file=sys.stderr)
    return "failed", EXIT_FAILED


def _tasks_failed(group: ExceptionGroup[Any], new: NewOutput | None) -> int:
    """Failed tasks, or a failed probe, said with what to do now; the exit code."""
    if store_lost(group) is not None:  # one line: the details are in --log-json
        print(f"chunkgraph run: {failure_summary(group)}", file=sys.stderr)
        print(
            "chunkgraph run: rerun with --resume once it answers: finished chunks are kept",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(failure_summary(group), file=sys.stderr)
    advice = (
        "fn failed its probe call on the first chunk, before anything was written"
        f"{_taken_back(new)}; fix the cause and run it again"
        if isinstance(group, ProbeFailure)
        else "the flow failed; fix the cause and rerun with --resume to keep the finished "
        "chunks (a change to fn's code or kwargs starts the flow over)"
    )
    print(f"chunkgraph run: {advice}", file=sys.stderr)
    return EXIT_FAILED


def _create_output(
    resolved: ResolvedSpec, replaced: Path | None = None
) -> tuple[Any, NewOutput | None]:
    """Create the new output: (the volume, what this run created). One that another run
    created since the check is used when it matches the spec (two runs over disjoint
    bboxes of one new output), and is not this run's to take back (None).

    A SpecError on output.path when it does not match.
    """
    plan = resolved.output
    existed = os.path.isdir(plan.path)
    try:
        made = volume.create(plan.path, **plan.create_args)
    except Exception:
        # Made meanwhile by another run (a bucket says so its own ways: "already exists",
        # zarr's ContainsArrayError): used as found, and that run's claim decides.
        if plan.overwrite or not _volume_at(plan.path, plan.create_args):
            raise
    else:
        return made, NewOutput.noted(made, existed, replaced)
    try:
        return volume.create(plan.path, **plan.create_args, exist_ok=True), None
    except ConfigError as err:
        line = resolved.lines.line("output.path")
        found = f"created meanwhile by another process, but it does not match this spec: {err}"
        raise SpecError(resolved.file, [SpecProblem("output.path", line, found)]) from None


def _volume_at(path: str, create_args: dict[str, Any]) -> bool:
    """Whether a volume opens at ``path`` now (a folder or a URL)."""
    try:
        volume.open(path, storage_options=create_args.get("storage_options"))
    except Exception:  # not there, or not a volume: the creation's own error stands
        return False
    return True


def _taken_back(new: NewOutput | None) -> str:
    """Take back the output this run created, if it is as made; what to say of it."""
    if new is not None and new.take_back():
        if new.replaced is not None:
            return f"; the output {new.path} it was to replace is as it was"
        return f"; the output {new.path} this run had created was removed"
    return ""


def locked_message(
    command: str, err: FlowLockedError, dst: object, again: str, *, lock_wait_flag: bool = False
) -> str:
    """A FlowLockedError said in command-line terms (its message is written for ``apply``
    callers: ``resume=True``, ``lock_wait=``): who holds the flow or writes its
    destination, what to do now. ``lock_wait_flag``: the command takes ``--lock-wait``."""
    who = err.holder
    if err.reads:
        head = (
            f"{err.destination}, which this flow reads, is being written by another flow: "
            f"{who}, over a region that overlaps what this one reads. Reading it meanwhile "
            "would read half-written chunks"
        )
        again = "run this command again"
    elif err.destination:
        head = (
            f"{err.destination} is being written by another flow: {who}, over a region that "
            "overlaps this one's. Two flows writing one region would mix their results"
        )
        again = "run this command again"
    else:
        held = f" holds its lock {err.lock}" if err.lock else " holds it"
        head = (
            f"this flow is already running: {who}{held}. Two runs of one flow would "
            "overwrite each other's temporaries"
        )
    lapse = (
        f" If that process is gone (killed, or its host lost), its lease lapses in "
        f"{err.lapses_in:.0f} s unless renewed (a holder on this host that is no longer alive "
        "is taken over at once)."
        if err.lapses_in is not None
        else ""
    )
    wait = " rerun with --lock-wait SECONDS to wait for it," if lock_wait_flag else ""
    return (
        f"chunkgraph {command}: {head}, so this one did nothing.{lapse} Wait for it to finish "
        f"(`chunkgraph status {_status_of(err, dst)}` shows its progress),{wait} or stop that "
        f"process; once it has stopped, {again}."
    )


def _status_of(err: FlowLockedError, dst: object) -> object:
    """What `chunkgraph status` is given to show the flow that holds ``err``'s lock: the
    volume it writes (named by the error, or found from the lock's place beside it, as a
    downsample's level is), else ``dst`` as the command was given it."""
    if err.destination:
        return err.destination
    root = err.lock.rpartition("/")[0]
    found = dst_of_state_root(StateRoot.of(root)) if root else None
    return dst if found is None else found


def report_dir_problem(path: str) -> str | None:
    """Why a report directory cannot be made at ``path`` (None: it can); creates nothing."""
    where = Path(path)
    if where.exists() and not where.is_dir():
        return "is a file, not a directory; give a directory for the report (nothing was run)"
    existing = where.absolute()
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is a file, so no directory can be made there (nothing was run)"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} is not writable (nothing was run)"
    return None


def _write_report(
    directory: str,
    recorder: Any,
    report: ApplyReport | None,
    outcome: str,
    out: Any,
    shown: list[str],
) -> None:
    """Write the run report; a failure is a message (the run's outcome decides the exit code)."""
    summary = report_summary(report) if report is not None else {}
    summary["outcome"] = outcome
    summary["view"] = view_command(shown)  # the inputs and output, to look at
    task_bytes = report.task_bytes if report is not None else ()
    try:
        folder = write_report(Path(directory), recorder, summary, task_bytes)
    except Exception as err:  # the run's own result must still be reported
        print(
            f"chunkgraph run: could not write the report to {directory} "
            f"({type(err).__name__}: {err}); the run itself {outcome}",
            file=sys.stderr,
        )
        return
    print(f"report in {folder}", file=out if report is not None else sys.stderr)


def _check_flow(resolved: ResolvedSpec, run: RunOptions) -> ApplyReport:
    """apply's own checks as a dry run; a new output is stood in for by an empty array,
    once its place is known to be writable."""
    plan = resolved.output
    checked = dataclasses.replace(run, dry_run=True)
    if plan.existing is not None and not plan.overwrite:
        return flow.apply(
            resolved.fn, resolved.inputs, plan.existing, **resolved.flow_options, run=checked
        )
    place = split_format(plan.path)[1]  # where it will be, without its format prefix
    where = Path(place.rpartition("/")[2] if is_url(place) else place)
    # It will be made (after the check, so no stand-in shows this): it must be possible.
    # (A bucket answers for itself at the first write.)
    problem = None if is_url(place) else write_problem(where.parent)
    if problem:
        raise ConfigError(
            f"output {plan.path!r} cannot be created: {problem}. Is it on a read-only mount, "
            "or without write permission? Give output.path a place on a writable file system",
            field="output",  # the spec's own field: the whole output is to be made
        )
    if checked.intermediates is None:  # say where the real run will put them
        checked = dataclasses.replace(checked, intermediates=str(default_state_root(plan.path)))
    with tempfile.TemporaryDirectory(prefix="chunkgraph-check-") as scratch:
        stand_in = volume.create(Path(scratch) / where.name, **plan.create_args)
        return flow.apply(
            resolved.fn, resolved.inputs, stand_in, **resolved.flow_options, run=checked
        )


def _recorder(args: argparse.Namespace, subscribers: list[Callable[[Any], None]]) -> Any:
    if args.report is None or args.dry_run:
        return None

    recorder = Recorder()
    subscribers.append(recorder)
    return recorder


def report_summary(report: ApplyReport) -> dict[str, Any]:
    """The ApplyReport's fields as JSON-able values, for report.json."""
    return {
        "flow_id": report.flow_id,
        "bbox": {"start": list(report.bbox.start), "stop": list(report.bbox.stop)},
        # the work asked for (the caller's bbox, inside dst) and the region computed,
        # which may be grown so that tasks tile it ("bbox"; reads are measured over it)
        "voxels": report.voxels,
        "computed_voxels": report.bbox.size,
        "written": {"start": list(report.written_box.start), "stop": list(report.written_box.stop)},
        "tasks_per_level": list(report.tasks_per_level),
        "reductions": report.reductions,
        "top_tasks_skipped": report.top_tasks_skipped,
        "reductions_skipped": report.reductions_skipped,
        "bytes_read": report.bytes_read,
        "bytes_written": report.bytes_written,
        "temporary_bytes": report.temporary_bytes,
        "read_amplification": report.read_amplification,
        # what the plan predicted for this run, and the stream splits that read past it
        "predicted_read_amplification": (
            None if report.plan is None else report.plan.read_amplification
        ),
        "stream_splits": report.stream_splits,
        "wall_seconds": report.wall_seconds,
        "finished_before": report.finished_before,
        # where the time and memory went (chunkgraph report shows it as a table)
        "breakdown": None if report.breakdown is None else report.breakdown.as_json(),
        # a dry run read and wrote nothing: what it would do is its summary's text
        **({"dry_run": report.summary()} if report.dry_run else {}),
    }


def store_lost(group: BaseExceptionGroup[Any]) -> BaseException | None:
    """The first task's ``StoreError`` when every failed task failed on the object store
    (it went away or stopped answering): one cause, said once, not once per task."""
    causes = [innermost(e.__cause__ or e)[0] if isinstance(e, TaskError) else e
              for e in _leaves(group)]  # fmt: skip
    if causes and all(isinstance(c, StoreError) for c in causes):
        return causes[0]
    return None


def failure_summary(group: BaseExceptionGroup[Any]) -> str:
    """One block per failed task: its name, the first line of the innermost cause (the
    error under any loop's group: the one that names the chunk or file), the chunk from
    the notes, and whether it was not retried because no try could succeed. One line
    when the object store failed them all (``store_lost``)."""
    lost = store_lost(group)
    if lost is not None:
        return f"the object store failed: {lost}"

    failed = [e for e in _leaves(group) if isinstance(e, TaskError)]
    others = [e for e in _leaves(group) if not isinstance(e, TaskError)]
    lines = [f"the flow failed: {group.message}"]
    for error in failed:
        cause, more = innermost(error.__cause__ or error)
        first = (str(cause).splitlines() or [""])[0]
        tries = f"after {error.attempts} attempt(s)"
        if is_permanent(cause):
            tries += "; not retried: it would fail the same way again"
        lines.append(f"  {error.task} ({tries})")
        lines.append(f"    {type(cause).__name__}: {first}")
        notes = [*getattr(cause, "__notes__", ()), *getattr(error, "__notes__", ())]
        lines += [f"    {note}" for note in notes if "chunk" in note]
        if more:
            lines.append(f"    ({more} more error(s) in the same task)")
    lines += [f"  {type(e).__name__}: {e}" for e in others]
    return "\n".join(lines)


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            yield from _leaves(error)
        else:
            yield error


def _ship_module(executor: object, resolved: ResolvedSpec) -> str | None:
    """Send the function's module beside the spec to a Dask cluster's workers (they cannot
    import it from the spec's directory); the problem, said for the user, when that fails."""
    if resolved.module_file is None:
        return None
    try:
        if isinstance(executor, DaskExecutor):  # a cluster this command started
            executor.ship_module(resolved.module_file)
        elif is_scheduler_address(executor):
            with DaskExecutor(executor) as cluster:
                cluster.ship_module(resolved.module_file)
    except ConfigError as err:
        return str(err)
    return None


@contextmanager
def _spec_dir_importable(spec: str) -> Iterator[None]:
    """The spec's directory first on sys.path, and on PYTHONPATH for process workers.

    Restored afterwards, so that ``main([...])`` called in-process leaves no trace.
    """
    base = str(Path(spec).resolve().parent)
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, base)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (base, saved_env) if p)
    try:
        yield
    finally:
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved_env
