"""``chunkgraph spec-schema``: the JSON Schema of ``chunkgraph run`` spec files.

Generated from the pydantic model (``_spec.RunSpec``), so it cannot drift from
what ``run`` accepts; editors use it to complete and check spec files (YAML
language servers read JSON Schema).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from chunkgraph.cli._main import EXIT_OK
from chunkgraph.cli._spec import RunSpec


def register(commands: Any) -> None:
    schema = commands.add_parser(
        "spec-schema", help="print the JSON Schema of `chunkgraph run` spec files"
    )
    schema.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    print(json.dumps(RunSpec.model_json_schema(), indent=2))
    return EXIT_OK
