"""``python -m chunkgraph``: the ``chunkgraph`` command, for environments without its script."""

import sys

from chunkgraph.cli import main

sys.exit(main())
