"""``chunkgraph view``: look at volumes in Neuroglancer, served from this machine.

    chunkgraph view PATH_OR_URL... [--port N] [--no-browser]
                    [--bbox X0,Y0,Z0:X1,Y1,Z1] [--position X,Y,Z]

Opens every volume first (one that does not open: exit 2, naming it), starts the
viewer on 127.0.0.1, prints its URL, opens it in a browser unless ``--no-browser``, and
serves until Ctrl-C (exit 0). A port in use: exit 2.
"""

from __future__ import annotations

import argparse
from typing import Any

from chunkgraph.cli._cmd_transfer import box_arg
from chunkgraph.cli._flow_command import int_tuple
from chunkgraph.cli._main import EXIT_OK
from chunkgraph.cli._view_link import serve


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "view",
        help="look at volumes in Neuroglancer, served from this machine",
        description="Serve volumes (any path or URL chunkgraph opens) to a Neuroglancer "
        "viewer on 127.0.0.1, one layer each, and print its URL; Ctrl-C stops it.",
        epilog="exit codes: 0 stopped with Ctrl-C; 2 a volume that does not open, a port "
        "in use, or bad options",
    )
    parser.add_argument("paths", metavar="PATH_OR_URL", nargs="+", help="volumes to show")
    parser.add_argument(
        "--port", type=int, default=0, help="the viewer's port (default: any free one)"
    )
    parser.add_argument(
        "--no-browser", action="store_true", help="print the URL; do not open a browser"
    )
    parser.add_argument(
        "--bbox", type=box_arg, default=None, help="outline and centre on this region"
    )
    parser.add_argument(
        "--position", type=int_tuple, default=None, help="centre on this voxel, e.g. 64,64,32"
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    serve(
        args.paths,
        port=args.port,
        bbox=args.bbox,
        position=args.position,
        open_browser=not args.no_browser,
    )
    return EXIT_OK
