"""The ``chunkgraph`` command line: one subcommand per ``_cmd_*.py`` module.

    chunkgraph demo | run | plan | bench | status | clean | reduce | report | spec-schema
               | downsample | transfer

Each command lives in its own module, which exposes ``register(commands)``:
it adds its subparser and sets ``handler`` to a function ``(args) -> int``.
The modules are found by name, so adding a command touches nothing here.
Commands import what they need inside their handler: ``chunkgraph --help``
stays fast, and a command never pays for another's imports.

Exit codes, the same for every command: 0 success, 1 the work itself failed
(task failures, a result that does not check out, an object store that failed),
2 usage or spec errors. A store that fails is said in one line (``StoreError``:
what was asked, where, why), never as the client's traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from chunkgraph import __version__
from chunkgraph._errors import ConfigError, StoreError, VolumeNotFoundError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def command_modules() -> list[str]:
    """The command modules of this package, ``_cmd_<name>``, in name order."""
    here = str(Path(__file__).parent)
    return sorted(
        f"chunkgraph.cli.{m.name}"
        for m in pkgutil.iter_modules([here])
        if m.name.startswith("_cmd_")
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chunkgraph",
        description="Plan and run task graphs and chunked volume flows.",
    )
    parser.add_argument("--version", action="version", version=f"chunkgraph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    for name in command_modules():
        importlib.import_module(name).register(commands)
    return parser


def _show_warning(message: Warning | str, category: type[Warning], *_: object) -> None:
    """Warnings as one line for a person at a terminal, not a source location."""
    print(f"chunkgraph: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shown = warnings.showwarning
    warnings.showwarning = _show_warning  # type: ignore[assignment]
    try:
        result: int = args.handler(args)
    except (ConfigError, VolumeNotFoundError) as error:  # bad options found past argparse
        print(f"chunkgraph {args.command}: {error}", file=sys.stderr)
        return EXIT_USAGE
    except StoreError as error:
        print(f"chunkgraph {args.command}: {error}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:  # `chunkgraph ... | head`: the reader left, nothing is wrong
        sys.stderr.close()
        return EXIT_OK
    finally:
        warnings.showwarning = shown
    return result
