"""The ``chunkgraph`` command line: one subcommand per ``_cmd_*.py`` module.

    chunkgraph demo | run | plan | bench | status | clean | reduce | report | spec-schema
               | downsample | transfer | label | view

Each command lives in its own module, which exposes ``register(commands)``: it adds
its subparser and sets ``handler`` to a function ``(args) -> int``. A command module
imports what it needs at module level, and this dispatcher imports a command's module
only when the command line names it: ``COMMANDS`` says which module holds each command
and its one-line help, so ``chunkgraph --help`` imports no command (a tenth of a second
instead of half a second), and a command never pays for another's imports. A test
checks that ``COMMANDS`` lists every command module and says what each one says.

Exit codes, the same for every command: 0 success, 1 the work itself failed
(task failures, a result that does not check out, an object store that failed),
2 usage or spec errors. A store that fails is said in one line (``StoreError``:
what was asked, where, why), never as the client's traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from collections.abc import Sequence

from chunkgraph import __version__
from chunkgraph._errors import ConfigError, StoreError, VolumeNotFoundError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


# Each command, in the order ``--help`` lists them: its module and its one-line help
# (the module's register() gives the same help; tests/cli checks that they agree).
COMMANDS: dict[str, tuple[str, str]] = {
    "bench": ("_cmd_bench", "list the benchmarks of a checkout, or run one"),
    "demo": ("_cmd_demo", "run a task graph and a volume flow on generated data"),
    "downsample": (
        "_cmd_downsample",
        "write pyramid levels of a volume (mean, mode for labels, ...)",
    ),
    "label": (
        "_cmd_label",
        "label the connected components of a volume (foreground: nonzero or > T)",
    ),
    "plan": ("_cmd_plan", "plan a task graph given as JSON; print the plan"),
    "reduce": ("_cmd_reduce", "reduce a deferred apply flow's layers into its destination"),
    "report": ("_cmd_report", "summarize a run report directory"),
    "run": ("_cmd_run", "run a volume flow described by a spec file"),
    "spec-schema": ("_cmd_spec_schema", "print the JSON Schema of `chunkgraph run` spec files"),
    "status": ("_cmd_status", "show the apply flows beside a destination"),
    "clean": (
        "_cmd_status",
        "remove the temporaries of abandoned apply flows beside a destination",
    ),
    "transfer": (
        "_cmd_transfer",
        "copy, rechunk or convert a volume (Zarr v3 shards, dtype, bbox)",
    ),
    "view": ("_cmd_view", "look at volumes in Neuroglancer, served from this machine"),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser of the command line ``argv``: the command it names is registered by
    its module, the others by name and help only (enough to list them). Without
    ``argv``, every command module is imported and registers its commands."""
    parser = argparse.ArgumentParser(
        prog="chunkgraph",
        description="Plan and run task graphs and chunked volume flows.",
    )
    parser.add_argument("--version", action="version", version=f"chunkgraph {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    named = None if argv is None else COMMANDS.get(_command_word(argv), ("", ""))[0]
    for name, (module, summary) in COMMANDS.items():
        if name in commands.choices:  # registered by its module beside an earlier command
            continue
        if argv is None or module == named:
            # deferred: --help speed (a command's module imports what the command needs)
            importlib.import_module(f"chunkgraph.cli.{module}").register(commands)
        else:
            commands.add_parser(name, help=summary)
    return parser


def _command_word(argv: Sequence[str]) -> str:
    """The command ``argv`` names: its first word that is not an option ("" if none).
    The options before a command (``--help``, ``--version``) take no value."""
    return next((word for word in argv if not word.startswith("-")), "")


def _show_warning(message: Warning | str, category: type[Warning], *_: object) -> None:
    """Warnings as one line for a person at a terminal, not a source location."""
    print(f"chunkgraph: warning: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(words).parse_args(words)
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
