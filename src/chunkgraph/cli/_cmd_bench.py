"""``chunkgraph bench``: list the benchmarks of a checkout, or run one.

    chunkgraph bench [--dir DIR]                 the scripts and their first docstring line
    chunkgraph bench [--dir DIR] NAME [ARGS...]  python benchmarks/NAME.py ARGS...

The benchmarks are scripts in the repository's ``benchmarks/`` folder, not part
of the installed package. Found by walking up from the current directory, then
from this package's directory (an editable install from a checkout), to the
first folder holding ``benchmarks/*.py``; ``--dir`` names it (or the checkout holding it). Modules
whose name starts with ``_`` are helpers, not benchmarks. A benchmark runs with
this interpreter in the current directory, and its exit code is the command's
(128 + N when signal N ended it).
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from chunkgraph.cli._main import EXIT_OK, EXIT_USAGE

FOLDER = "benchmarks"


def register(commands: Any) -> None:
    bench = commands.add_parser(
        "bench",
        help="list the benchmarks of a checkout, or run one",
        description="Without NAME, list the benchmarks; with it, run benchmarks/NAME.py with "
        "the remaining arguments (NAME --help shows the benchmark's own options).",
    )
    bench.add_argument("--dir", metavar="DIR", help=f"the {FOLDER}/ folder to use")
    bench.add_argument("name", nargs="?", metavar="NAME", help="the benchmark to run")
    bench.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the benchmark")
    bench.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.dir:
        given = Path(args.dir)
        folder = given / FOLDER if (given / FOLDER).is_dir() else given  # or the checkout
        if not folder.is_dir():
            print(f"chunkgraph bench: --dir {args.dir} is not a folder", file=sys.stderr)
            return EXIT_USAGE
    else:
        found = find_benchmarks([Path.cwd(), Path(__file__)])
        if found is None:
            print(
                f"chunkgraph bench: no {FOLDER}/ folder above the current directory or the "
                "installed package. The benchmarks ship with the source repository, not the "
                f"package: run this inside a checkout, or pass --dir path/to/{FOLDER}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        folder = found
    scripts = benchmark_scripts(folder)
    if args.name is None:
        print(f"benchmarks in {folder} (run one with: chunkgraph bench NAME [--help | ARGS]):")
        width = max((len(name) for name in scripts), default=0)
        for name, path in scripts.items():
            print(f"  {name:<{width}}  {first_line(path)}")
        return EXIT_OK
    name = args.name.removesuffix(".py")
    if name not in scripts:
        print(
            f"chunkgraph bench: no benchmark {args.name!r} in {folder}; the benchmarks are: "
            f"{', '.join(scripts) or 'none'}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        code = subprocess.call([sys.executable, str(scripts[name]), *args.args])
    except KeyboardInterrupt:  # the benchmark got the same Ctrl-C and has stopped
        return 128 + 2
    return code if code >= 0 else 128 - code


def find_benchmarks(starts: Iterable[Path]) -> Path | None:
    """The first ``benchmarks/`` folder with scripts in it, walking up from each start."""
    for start in starts:
        for folder in [start.resolve(), *start.resolve().parents]:
            candidate = folder / FOLDER
            if candidate.is_dir() and any(candidate.glob("*.py")):
                return candidate
    return None


def benchmark_scripts(folder: Path) -> dict[str, Path]:
    """``{name: path}`` of the benchmark scripts in ``folder``, by name."""
    return {p.stem: p for p in sorted(folder.glob("*.py")) if not p.stem.startswith("_")}


def first_line(script: Path) -> str:
    """The first line of a script's module docstring, read without running it."""
    try:
        doc = ast.get_docstring(ast.parse(script.read_text(), str(script)))
    except (OSError, SyntaxError, ValueError) as err:
        return f"(cannot read: {type(err).__name__})"
    return doc.strip().splitlines()[0] if doc and doc.strip() else "(no docstring)"
