"""The dispatcher imports a command's module only when the command line names it.

``chunkgraph --help`` lists every command from ``COMMANDS`` (module and one-line help)
without importing one; ``chunkgraph CMD ...`` imports CMD's module, which imports what
it needs at module level. The table must say what the modules say: the lazily built
parser reads exactly as the one every module registers into.
"""

from __future__ import annotations

import argparse
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

from chunkgraph import cli
from chunkgraph.cli._main import COMMANDS, build_parser

CLI = Path(cli.__file__).parent

# Print the modules the command line `argv` loaded (its --help exits 0).
_LOADED = """
import json, sys
from chunkgraph.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)))
"""


def _loaded_by(argv: list[str]) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(argv=argv)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(json.loads(out.splitlines()[-1]))


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_help_imports_no_command() -> None:
    loaded = _loaded_by(["--help"])
    assert not {m for m in loaded if m.startswith("chunkgraph.cli._cmd_")}
    for heavy in ("chunkgraph.flow", "chunkgraph.volume", "chunkgraph.report", "zarr", "pydantic"):
        assert heavy not in loaded, heavy


def test_a_command_imports_its_module_only() -> None:
    loaded = _loaded_by(["report", "--help"])
    commands = {m for m in loaded if m.startswith("chunkgraph.cli._cmd_")}
    assert commands == {"chunkgraph.cli._cmd_report"}
    assert "chunkgraph.report" in loaded and "chunkgraph.flow" not in loaded


def test_the_table_names_every_command_module() -> None:
    modules = {m.name for m in pkgutil.iter_modules([str(CLI)]) if m.name.startswith("_cmd_")}
    assert {module for module, _ in COMMANDS.values()} == modules


def test_the_lazy_parser_reads_as_the_full_one() -> None:
    """The table's help is the modules' own, in the same order, and a named command gets
    its module's full parser."""
    full = build_parser()
    assert build_parser([]).format_help() == full.format_help()
    assert list(_commands(full)) == list(COMMANDS)
    for name in COMMANDS:
        lazy = _commands(build_parser([name, "--help"]))[name]
        assert lazy.format_help() == _commands(full)[name].format_help(), name


def test_an_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["nope"])
    assert exit_.value.code == 2
    assert "invalid choice: 'nope'" in capsys.readouterr().err
