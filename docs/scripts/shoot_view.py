"""Draw docs/view.png: the demo's input and output side by side in Neuroglancer.

    .venv/bin/chunkgraph demo --workdir demo-data
    .venv/bin/python docs/scripts/shoot_view.py demo-data docs/view.png

Serves the two volumes with ``chunkgraph.view`` (as ``chunkgraph view`` does), opens
the viewer in headless Chromium (``apt-get install chromium``), and saves the
screenshot Neuroglancer takes once every chunk in view is loaded. Not run by
``make docs``: the picture is committed, since drawing it needs a browser.
"""

from __future__ import annotations

import argparse
import io
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from PIL import Image

from chunkgraph.viewer import view

SIZE = (1000, 420)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("workdir", type=Path, help="where `chunkgraph demo` wrote its data")
    parser.add_argument("out", type=Path, help="the PNG to write")
    args = parser.parse_args()
    browser = next(filter(None, map(shutil.which, ("chromium", "google-chrome"))), None)
    if browser is None:
        print("shoot_view: Chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    paths = [str(args.workdir / name) for name in ("demo-src.zarr", "demo-dst.zarr")]
    with view(*paths) as shown:
        with shown.viewer.txn() as state:
            state.position = [128, 256, 300]  # mid-depth, between two slabs' seams
            state.cross_section_scale = 0.9e-9
        client = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--use-angle=swiftshader",
             "--enable-unsafe-swiftshader", "--remote-debugging-port=0",
             "--window-size=1200,800", shown.url],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            with ThreadPoolExecutor(1) as pool:
                reply = pool.submit(shown.viewer.screenshot, size=list(SIZE)).result(timeout=180)
        finally:
            client.kill()
            client.wait()
    # 64 colours: the page's picture stays small (greys, the outline and the axes).
    with Image.open(io.BytesIO(reply.screenshot.image)) as shot:
        shot.convert("RGB").quantize(64).save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
