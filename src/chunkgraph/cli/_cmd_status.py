"""``chunkgraph status`` and ``chunkgraph clean``: the apply flows beside a destination.

    chunkgraph status DST [--older-than HOURS] [--json]
    chunkgraph clean DST (--stale [--older-than HOURS] | --all | FLOW_ID ...) [--dry-run]

``DST`` is the destination volume's path; its flows live in ``.<name>.chunkgraph``
beside it, or in the directory given with ``--intermediates`` (then ``DST`` may be
left out); a run given another directory notes it beside dst, so ``DST`` alone finds
those flows too (``flow.state._where``). ``DST`` may also be the spec file of a ``chunkgraph
run`` (``SPEC.yaml``): its output and its ``intermediates:``. A ``DST`` that does not
exist, with no flows directory beside it, is a usage error (exit 2), as is an
``--intermediates`` directory that does not exist.

``status`` prints one line per flow: id, state (running, finished, failed,
interrupted, deferred), done markers, disk used by temporaries, age, ``stale``
where ``clean --stale`` would remove it, and a failed flow's error, its first line
(``chunkgraph.flow.state`` defines the states: failed is a run that ended with an
error, interrupted one that was killed or stopped). ``clean --stale`` removes the
temporaries of flows that are not running and either finished (leftovers) or
unmodified for ``--older-than`` hours (default 24); ``--all`` drops the age
condition; naming flow ids removes those flows whatever their age, completion
records included. A flow whose lock is held is never touched: naming one fails.
Completion records of finished flows stay unless named.

Exit codes: 0 done, 1 a named flow is running (kept), 2 usage (a flow id that is not there
among them: nothing is removed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from chunkgraph._errors import ConfigError, FlowLockedError
from chunkgraph._util import format_bytes
from chunkgraph.cli._main import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from chunkgraph.cli._spec import SpecError, parse_spec
from chunkgraph.flow.state import (
    STALE_AFTER_HOURS,
    FlowStatus,
    StateRoot,
    clean_flow,
    default_state_root,
    dst_of_state_root,
    flows_for,
    reach,
    removals,
    remove_roots_if_empty,
    state_store,
    unknown_flows,
)
from chunkgraph.volume import is_object_url, is_url, split_format

if TYPE_CHECKING:
    from chunkgraph.flow.state import FlowState, Removal

DEFAULT_STALE_HOURS = STALE_AFTER_HOURS


def register(commands: Any) -> None:
    status = commands.add_parser("status", help="show the apply flows beside a destination")
    _where(status)
    status.add_argument("--json", action="store_true", help="one JSON object per flow, a list")
    status.set_defaults(handler=run_status)

    clean = commands.add_parser(
        "clean", help="remove the temporaries of abandoned apply flows beside a destination"
    )
    _where(clean)
    clean.add_argument("flow_ids", nargs="*", metavar="FLOW_ID", help="flows to remove")
    clean.add_argument("--stale", action="store_true", help="remove every stale flow")
    clean.add_argument(
        "--all", action="store_true", help="with or without --stale: stale at any age"
    )
    clean.add_argument("--dry-run", action="store_true", help="say what would go; remove nothing")
    clean.set_defaults(handler=run_clean)


def _where(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dst", nargs="?", help="the destination volume's path, or the spec file of its run"
    )
    parser.add_argument(
        "--intermediates", metavar="DIR", help="the flows' directory, when apply was given one"
    )
    parser.add_argument(
        "--older-than",
        type=_hours,
        metavar="HOURS",
        help=f"an interrupted flow is stale after this long (default {DEFAULT_STALE_HOURS:g})",
    )


@dataclass(frozen=True)
class FlowsOf:
    """Where a command looks for flows: a destination's (under its default directory, and
    those it notes elsewhere), a directory's, or both (a spec's output and intermediates)."""

    dst: str | None
    intermediates: StateRoot | None
    # A spec's storage_options (an endpoint, say), which reach its places in a store.
    storage_options: dict[str, Any] | None = None

    @property
    def root(self) -> StateRoot:
        """The directory a message names: the one given, else dst's default one (a path,
        or a URL in an object store)."""
        if self.intermediates is not None:
            return self.intermediates
        assert self.dst is not None  # locate() gives one or the other
        return default_state_root(self.dst)

    def options_for(self, path: str) -> dict[str, Any] | None:
        """The spec's storage options for ``path`` in a store; None for one on a disk."""
        return self.storage_options if is_url(path) else None

    def read(self, *, sizes: bool = True) -> list[FlowState]:
        return flows_for(self.dst, self.intermediates, sizes=sizes)


def locate(command: str, dst: str | None, intermediates: str | None) -> FlowsOf | None:
    """Where ``chunkgraph COMMAND DST [--intermediates DIR]`` looks for flows, or None after
    saying on stderr why there is nowhere to look (a usage error)."""
    options = None
    if dst is not None and dst.endswith((".yaml", ".yml")) and Path(dst).is_file():
        spec = _spec_places(command, dst)
        if spec is None:
            return None
        dst, given, options = spec
        intermediates = intermediates or given
    # The same checks as run's: a URL with a slash lost (s3:/b/x) is refused, not a folder.
    place = split_format(dst)[1] if dst is not None else None
    if intermediates:
        try:
            named = StateRoot.given(intermediates)
        except ConfigError as err:
            raise ConfigError(f"--intermediates: {err}") from None
        local = named.local
        if named.remote and options:
            named = named.reached_with(options)
            reach(named)  # a flow's folder named by its URL alone (reduce) is reached too
        if local is not None and not local.is_dir():
            print(f"chunkgraph {command}: --intermediates {intermediates} does not exist (or is "
                  "no directory): give the directory apply was given", file=sys.stderr)  # fmt: skip
            return None
        _reach_beside(dst, options)
        return FlowsOf(dst, named, options)  # a prefix in a bucket with nothing under it: no flow
    if not dst:
        print(f"chunkgraph {command}: give DST or --intermediates DIR", file=sys.stderr)
        return None
    assert place is not None
    if is_object_url(place):
        _reach_beside(dst, options)
    beside = default_state_root(place)
    if not _exists(StateRoot.of(place.rstrip("/"), options)) and not _exists(beside):
        print(
            f"chunkgraph {command}: the destination {dst} does not exist, and there is no "
            f"flows directory beside it ({beside}): check the path; a "
            "flow applied with intermediates=DIR is found with --intermediates DIR, or "
            "from its spec file (`chunkgraph status SPEC.yaml`)",
            file=sys.stderr,
        )
        return None
    if is_object_url(place):
        return FlowsOf(dst.rstrip("/"), None, options)
    return FlowsOf(dst, None)


def _exists(place: StateRoot) -> bool:
    """Whether a folder is at ``place``, or objects are under it in a store."""
    local = place.local
    if local is not None:
        return local.exists()
    return state_store(place.parent).exists(place.name)


def _reach_beside(dst: str | None, options: dict[str, Any] | None) -> None:
    """Reach the state beside a dst in a store (and the notes there) with a spec's options."""
    if dst is not None and options and is_object_url(split_format(dst)[1]):
        reach(default_state_root(dst).reached_with(options))


def _spec_places(command: str, path: str) -> tuple[str, str | None, dict[str, Any] | None] | None:
    """A spec file's output path and intermediates directory (each relative to the spec's
    directory) and its storage options, or None after saying what is wrong with it.
    Nothing is imported or opened."""
    try:
        spec, _ = parse_spec(Path(path).read_text(), path)
    except SpecError as err:
        print("\n".join(err.lines()), file=sys.stderr)
        print(f"chunkgraph {command}: {path} has errors", file=sys.stderr)
        return None
    base = Path(path).resolve().parent

    def beside_spec(where: str) -> str:
        return where if is_url(where) else str((base / where).resolve())

    given = None if spec.intermediates is None else beside_spec(str(spec.intermediates))
    return beside_spec(str(spec.output.path)), given, dict(spec.storage_options) or None


def _prepare(args: argparse.Namespace) -> FlowsOf | None:
    if args.older_than is None:
        args.older_than = DEFAULT_STALE_HOURS
    return locate(args.command, args.dst, args.intermediates)


def run_status(args: argparse.Namespace) -> int:
    where = _prepare(args)
    if where is None:
        return EXIT_USAGE
    root = where.root
    flows = where.read()
    now = time.time()
    if args.json:
        rows = [
            dict(s.as_json(), stale=s.stale(args.older_than, now), age_hours=s.age_hours(now))
            for s in flows
        ]
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    if not flows:
        print(f"no flows under {root}")
        return EXIT_OK
    print(f"{len(flows)} flow(s) under {root}:")
    for s in flows:
        elsewhere = f"  (state under {s.root})" if s.root != root else ""
        print("  " + describe(s, args.older_than, now) + elsewhere)
    if any(s.stale(args.older_than, now) for s in flows):
        print(f"remove the stale ones with: {_clean_hint(args)}")
    return EXIT_OK


def describe(state: Any, older_than: float, now: float) -> str:
    """One line about a ``FlowState``."""
    parts = [f"{state.flow_id:<16}", f"{state.status.value:<11}"]
    if state.status is FlowStatus.FINISHED:
        parts.append(f"at {state.finished}")
    if state.has_temporaries:
        parts.append(state.progress())
        parts.append(f"temporaries {format_bytes(state.temporary_bytes or 0)}")
    if state.owner and state.status is FlowStatus.RUNNING:
        since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.owner.get("since", 0)))
        parts.append(f"pid {state.owner.get('pid')} on {state.owner.get('host')} since {since}")
    parts.append(f"modified {_age(state.age_hours(now))} ago")
    if state.stale(older_than, now):
        parts.append("STALE")
    if state.error:
        parts.append(f"error: {state.error}")
    return "  ".join(parts)


def run_clean(args: argparse.Namespace) -> int:
    """The removals are ``chunkgraph.flow.state``'s steps (``removals``, ``clean_flow``,
    ``remove_roots_if_empty``); this checks the arguments, says what happens and picks
    the exit code."""
    if args.intermediates and args.dst and not is_url(args.dst) and not Path(args.dst).exists():
        # `clean --intermediates DIR FLOW_ID`: with DIR given no DST is needed, and the
        # one positional that is no path (nor a URL: a dst in a store) is the flow's id.
        args.flow_ids, args.dst = [args.dst, *args.flow_ids], None
    if not (args.stale or args.all or args.flow_ids):
        print(
            "chunkgraph clean: say what to remove: --stale, --all or FLOW_ID ...", file=sys.stderr
        )
        return EXIT_USAGE
    where = _prepare(args)
    if where is None:
        return EXIT_USAGE
    flows = where.read()
    unknown = unknown_flows(flows, args.flow_ids)
    if unknown:
        known = ", ".join(dict.fromkeys(s.flow_id for s in flows)) or "none"
        print(f"chunkgraph clean: no flow {', '.join(unknown)} under {where.root} (flows: "
              f"{known})", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    chosen = removals(
        flows,
        args.flow_ids,
        stale=args.stale or args.all,
        older_than_hours=0.0 if args.all else args.older_than,
        now=time.time(),
    )
    if not chosen:
        print(f"nothing to remove under {where.root}")
        return EXIT_OK
    if args.dry_run:
        for removal in chosen:
            print(f"would remove {removal.state.flow_id}'s {removal.what} ({_size(removal)})")
        return EXIT_OK
    return _remove(chosen, where)


def _remove(chosen: list[Removal], where: FlowsOf) -> int:
    """Remove each flow ``chosen``, saying so; a flow a run holds is kept (exit 1)."""
    code, freed = EXIT_OK, 0
    for removal in chosen:
        fid = removal.state.flow_id
        try:
            clean_flow(removal, dst=where.dst)
        except FlowLockedError as err:
            # A run's advice (resume, lock_wait) is not this command's: say who holds it.
            print(f"chunkgraph clean: kept {fid}: it is already running ({err.holder}); clean it "
                  "after that run ends", file=sys.stderr)  # fmt: skip
            code = EXIT_FAILED
            continue
        freed += removal.state.temporary_bytes or 0
        print(f"removed {fid}'s {removal.what} ({_size(removal)})")
    if freed or code == EXIT_OK:
        print(f"freed {format_bytes(freed)}")
    # Only a dst's own default directory goes once empty: a directory the user named stays.
    roots = [where.root, *(r.state.root for r in chosen)]
    remove_roots_if_empty(r for r in roots if dst_of_state_root(r) is not None)
    return code


def _size(removal: Removal) -> str:
    return format_bytes(removal.state.temporary_bytes or 0)


def _clean_hint(args: argparse.Namespace) -> str:
    where = f"--intermediates {args.intermediates}" if args.intermediates else args.dst
    return f"chunkgraph clean {where} --stale"


def _age(hours: float) -> str:
    """
    >>> _age(0.01), _age(5.25), _age(49)
    ('36 s', '5.2 h', '2.0 d')
    """
    if hours < 1:
        return f"{hours * 3600:.0f} s" if hours < 1 / 60 else f"{hours * 60:.0f} min"
    return f"{hours:.1f} h" if hours < 48 else f"{hours / 24:.1f} d"


def _hours(text: str) -> float:
    """``--older-than``: a number of hours, not negative."""
    try:
        hours = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of hours") from None
    if not hours >= 0:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r}: give 0 or more hours")
    return hours
