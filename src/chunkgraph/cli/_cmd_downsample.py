"""``chunkgraph downsample``: write pyramid levels of a volume.

    chunkgraph downsample SRC [--factor 2,2,1] [--levels N] [--method METHOD]
                          [--format zarr3|zarr|ome-zarr|precomputed] [--dst TEMPLATE]
                          [--executor KIND] [--workers N] [--resume] [--dry-run]
                          [--lock-wait SECONDS]
                          [--memory-limit BYTES] [--quiet | --log-json PATH]

Each level is ``chunkgraph.downsample``'s: an apply flow reading the level below once.
SRC may be a level of an OME-Zarr image or a precomputed volume (``precomputed://PATH``,
``--scale`` picks which; default the finest): the new levels then go into that image.
Exit codes: 0 written, 1 failed or locked, 2 bad options, 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from chunkgraph import jobs, volume
from chunkgraph.cli._flow_command import add_flow_options, int_tuple, run_flow
from chunkgraph.volume import FORMATS, format_of

# chunkgraph.jobs.METHODS, stated here so that --help does not import the
# jobs and the flow; a test checks that they agree.
METHODS = ("mean", "median", "mode", "max", "min", "stride")
# Zarr v3 beside the source: its path prefix or the table of formats' name for it (the
# row's prefixes, zarr3 and zarr, as jobs' ZARR3_NAMES); then the multiscale formats.
ZARR3_NAMES = format_of("zarr").prefixes
FORMAT_NAMES = (*ZARR3_NAMES, *(f.name for f in FORMATS if f.multiscale))


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "downsample",
        help="write pyramid levels of a volume (mean, mode for labels, ...)",
        description="Write LEVELS pyramid levels of SRC, each FACTOR coarser than the last, "
        "as volumes beside it (vol.zarr -> vol_s1.zarr, vol_s2.zarr, ...) with the "
        "resolution times the factor.",
        epilog="exit codes: 0 written; 1 failed or the flow is running elsewhere; 2 bad "
        "options; 130 interrupted (--resume continues)",
    )
    parser.add_argument("dst", metavar="SRC", help="the source volume's path")
    parser.add_argument(
        "--factor",
        type=int_tuple,
        default=None,
        help="per spatial axis, e.g. 2,2,1, or one number for all (default 2)",
    )
    parser.add_argument("--levels", type=int, default=1, help="how many levels (default 1)")
    parser.add_argument(
        "--method",
        default=None,
        help=f"one of {', '.join(METHODS)} (default: mode for 32- and 64-bit integers, "
        "which hold labels; mean otherwise)",
    )
    parser.add_argument(
        "--format",
        choices=FORMAT_NAMES,
        default=None,
        help="where the levels go: zarr3 (or zarr) for Zarr v3 volumes beside SRC, ome-zarr "
        "or precomputed for new levels in SRC's own image (default: the source's own)",
    )
    parser.add_argument("--scale", default=None, help="the level of a multiscale SRC to start from")
    parser.add_argument(
        "--dst",
        dest="template",
        default=None,
        metavar="TEMPLATE",
        help="where the levels go, with {level} in it (default beside SRC: NAME_s1.zarr, ...)",
    )
    add_flow_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    factor: Any = 2 if args.factor is None else args.factor
    if isinstance(factor, tuple) and len(factor) == 1:
        factor = factor[0]
    src: Any = args.dst
    if args.scale is not None:
        scale: Any = int(args.scale) if args.scale.isdigit() else args.scale
        src = volume.open(args.dst, scale=scale)
    call = functools.partial(
        jobs.downsample,
        src,
        factor=factor,
        levels=args.levels,
        method=args.method,
        dst=args.template,
        format=args.format,
    )
    again = f"`chunkgraph downsample {args.dst} --resume` continues its work"
    return run_flow("downsample", args, call, again, functools.partial(_shown, args))


def _shown(args: argparse.Namespace, report: Any) -> list[str]:
    """The source, and the levels where they are volumes of their own (Zarr v3 beside
    it); levels inside a multiscale source are reached through it."""
    source = volume.open(args.dst)
    inside = source.format.multiscale and args.format not in ZARR3_NAMES and args.template is None
    return [args.dst] if inside else [args.dst, *report.paths]
