"""Functions of ``__main__`` run in process workers: ``python -c`` and unguarded scripts.

Each case is a real interpreter whose main module defines a function, a
lambda, a closure, a callable class and a result class, then runs a graph
and an apply flow with ``executor="processes"``. The script has no
``if __name__ == "__main__":`` guard: a worker that imported it would run the
whole program again (and print ``main ran`` once more).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import chunkgraph
    from chunkgraph import volume
    from chunkgraph.graph import Graph

    print("main ran", flush=True)
    offset = 10

    def add_offset(x):
        return x + offset

    def scaler(k):
        return lambda x: x * k

    class Pair:
        def __init__(self, a, b):
            self.a, self.b = a, b

    class Blur:
        def __call__(self, src):
            return (src[:-2] + src[1:-1] + src[2:]) / 3

    g = Graph()
    a = g.add(add_offset, 1, name="a")
    b = g.add(scaler(3), a, name="b")
    c = g.add(lambda x, y: Pair(x, y), a, b, name="c")
    got = chunkgraph.run(g, [a, b, c], executor="processes", workers=2)
    pair = got[2]

    root = sys.argv[1]
    data = np.arange(64, dtype="float32")
    src = volume.create(os.path.join(root, "src.zarr"), (64,), (16,), "float32")
    src.write(src.bounds, data)
    dst = volume.create(os.path.join(root, "dst.zarr"), (64,), (16,), "float32")
    volume.apply(Blur(), src, dst, chunk_sizes=[16], crop_pads=1, executor="processes",
                 workers=2, bbox=chunkgraph.Box((8,), (56,)))
    out = dst.read(chunkgraph.Box((8,), (56,)))
    print(json.dumps(dict(
        graph=got[:2], pair=[pair.a, pair.b], same_class=type(pair) is Pair,
        flow=bool(np.allclose(out, data[8:56])),
    )), flush=True)
    """
)


@pytest.mark.parametrize("how", ["python -c", "unguarded script"])
def test_functions_of_main_run_in_process_workers(tmp_path: Path, how: str) -> None:
    if how == "python -c":
        command = [sys.executable, "-c", PROGRAM, str(tmp_path)]
    else:
        script = tmp_path / "job.py"
        script.write_text(PROGRAM)
        command = [sys.executable, str(script), str(tmp_path)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines.count("main ran") == 1, done.stdout + done.stderr  # not again in a worker
    result = json.loads(lines[-1])
    assert result == dict(graph=[11, 33], pair=[11, 33], same_class=True, flow=True)
