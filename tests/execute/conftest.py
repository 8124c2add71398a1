"""Make ``tests.execute._tasks`` importable here and in worker processes (they inherit sys.path)."""

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.append(_ROOT)
