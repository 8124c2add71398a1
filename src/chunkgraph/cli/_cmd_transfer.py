"""``chunkgraph transfer``: copy, rechunk or convert a volume.

    chunkgraph transfer SRC DST [--chunks 256,256,32] [--shards 1024,1024,64]
                        [--dtype uint16] [--cast safe|same_kind|unsafe]
                        [--bbox X0,Y0,Z0:X1,Y1,Z1] [--backend zarr|tensorstore]
                        [--executor KIND] [--workers N] [--resume] [--dry-run]
                        [--lock-wait SECONDS]
                        [--memory-limit BYTES] [--quiet | --log-json PATH]

``chunkgraph.transfer``: an apply flow with the identity function, top-level regions
aligned to both volumes' chunks. Exit codes: 0 copied, 1 failed or locked, 2 bad
options, 130 interrupted.
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from chunkgraph import jobs
from chunkgraph.cli._flow_command import add_flow_options, int_tuple, run_flow
from chunkgraph.geometry import Box
from chunkgraph.volume import FORMATS


def box_arg(text: str) -> Any:
    """``"0,0,0:128,128,64"`` -> Box((0, 0, 0), (128, 128, 64))."""
    start, sep, stop = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"{text!r} is not START:STOP, e.g. 0,0,0:128,128,64")
    return Box(int_tuple(start), int_tuple(stop))


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "transfer",
        help="copy, rechunk or convert a volume (Zarr v3 shards, dtype, bbox)",
        description="Copy SRC into a new volume DST with other chunks, shards, dtype or "
        "backend, or a part of it (--bbox), reading each source chunk about once.",
        epilog="exit codes: 0 copied; 1 failed or the flow is running elsewhere; 2 bad "
        "options; 130 interrupted (--resume continues)",
    )
    parser.add_argument("src", metavar="SRC", help="the source volume's path")
    parser.add_argument("dst", metavar="DST", help="the new volume's path")
    parser.add_argument(
        "--chunks", type=int_tuple, default=None, help="spatial chunks (default SRC's)"
    )
    parser.add_argument(
        "--shards",
        type=int_tuple,
        default=None,
        help="Zarr v3 shards, each a multiple of the chunk (default unsharded)",
    )
    parser.add_argument("--dtype", default=None, help="dst's dtype (default SRC's)")
    parser.add_argument(
        "--cast",
        default="safe",
        choices=("safe", "same_kind", "unsafe"),
        help="which dtype conversions are allowed (default safe)",
    )
    parser.add_argument(
        "--bbox", type=box_arg, default=None, help="START:STOP in global voxels, e.g. 0,0:64,64"
    )
    parser.add_argument(
        "--backend",
        default=None,
        choices=[f.name for f in FORMATS if f.plain and not f.in_process],
        help="dst's storage backend (default SRC's)",
    )
    add_flow_options(parser)
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    call = functools.partial(
        jobs.transfer,
        args.src,
        args.dst,
        chunks=args.chunks,
        shards=args.shards,
        dtype=args.dtype,
        cast=args.cast,
        bbox=args.bbox,
        backend=args.backend,
    )
    again = f"`chunkgraph transfer {args.src} {args.dst} --resume` continues its work"
    return run_flow("transfer", args, call, again, lambda _: [args.src, args.dst])
