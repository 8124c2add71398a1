"""``chunkgraph label``: the connected components of a volume's foreground.

    chunkgraph label SRC DST [--threshold T] [--connectivity 1|2|3] [--dtype uint32]
                     [--chunk 128,64,64] [--backend zarr|tensorstore]
                     [--executor KIND] [--workers N] [--resume] [--dry-run]
                     [--lock-wait SECONDS] [--memory-limit BYTES] [--quiet | --log-json PATH]

``chunkgraph.label``: a pass that finds each chunk's pieces, a reduction that joins them,
a pass that writes the final ids (scipy.ndimage.label's on the whole array). Exit codes:
0 labelled, 1 failed or locked, 2 bad options, 130 interrupted (``--resume`` continues).
"""

from __future__ import annotations

import argparse
import functools
from typing import Any

from chunkgraph import jobs
from chunkgraph.cli._flow_command import add_flow_options, int_tuple, run_flow
from chunkgraph.volume import FORMATS


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "label",
        help="label the connected components of a volume (foreground: nonzero or > T)",
        description="Write the connected components of SRC's foreground (nonzero voxels, or "
        "those above --threshold) to a new volume DST: 0 background, 1..N by each "
        "component's first voxel, the ids scipy.ndimage.label gives the whole array.",
        epilog="exit codes: 0 labelled; 1 failed or the flow is running elsewhere; 2 bad "
        "options; 130 interrupted (--resume continues)",
    )
    parser.add_argument("src", metavar="SRC", help="the source volume's path")
    parser.add_argument("dst", metavar="DST", help="the new volume's path")
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        help="foreground is SRC > T (default: nonzero voxels; needed for a float SRC)",
    )
    parser.add_argument(
        "--connectivity",
        type=int,
        default=1,
        help="1: voxels sharing a face touch (6 neighbours in 3-d), 2: or an edge (18), "
        "3: or a corner (26); default 1",
    )
    parser.add_argument(
        "--dtype", default=None, help="dst's integer dtype (default uint32, uint64 if needed)"
    )
    parser.add_argument(
        "--chunk",
        type=int_tuple,
        default=None,
        help="the chunk both passes label by, multiples of SRC's chunks (default ~2^19 voxels)",
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
        jobs.label,
        args.src,
        args.dst,
        threshold=args.threshold,
        connectivity=args.connectivity,
        dtype=args.dtype,
        chunk=args.chunk,
        backend=args.backend,
    )
    again = f"`chunkgraph label {args.src} {args.dst} --resume` continues its work"
    return run_flow("label", args, call, again, lambda _: [args.src, args.dst], _outcome)


def _outcome(report: Any) -> dict[str, Any]:
    """What a JSON log's outcome line says of a label: how many components, and where."""
    return {"components": report.components, "dst": report.path}
