"""The viewer draws the volumes in a real browser: headless Chromium opens the viewer on
an image and a label volume, Neuroglancer takes a screenshot once it reports every chunk
in view loaded, and the screenshot shows both. Saved to ``build/screenshots/view.png``
(ignored by git) for a person to look at. Skipped where Chromium is not installed."""

from __future__ import annotations

import io
import shutil
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from chunkgraph import volume
from chunkgraph.viewer import view

ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "build" / "screenshots" / "view.png"
SIZE = (480, 360)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    return None


@pytest.fixture
def image_and_labels() -> Iterator[tuple[volume.Volume, volume.Volume]]:
    shape = (64, 64, 16)
    x = np.arange(shape[0], dtype="float32")[:, None, None]
    image = volume.create("browser-image", shape, (32, 32, 16), "float32", backend="memory")
    image.write(image.bounds, np.broadcast_to(x / shape[0], shape).astype("float32"))
    labels = volume.create("browser-labels", shape, (32, 32, 16), "uint32", backend="memory")
    blocks = (np.indices(shape)[0] // 32) * 2 + np.indices(shape)[1] // 32 + 1
    labels.write(labels.bounds, blocks.astype("uint32"))
    yield image, labels
    volume.remove("browser-image")
    volume.remove("browser-labels")


def test_the_viewer_draws_an_image_and_labels(
    image_and_labels: tuple[volume.Volume, volume.Volume],
) -> None:
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (apt-get install chromium): viewer not opened")
    from PIL import Image

    with view(*image_and_labels) as shown:
        with shown.viewer.txn() as state:
            state.layout = "xy"
            state.layers["browser-labels"].selected_alpha = 0.4
            state.cross_section_scale = 0.25e-9  # metres per pixel: 4 pixels a voxel
        client = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",  # as root, as CI runs
                "--use-angle=swiftshader",  # WebGL in software: no GPU needed
                "--enable-unsafe-swiftshader",
                "--remote-debugging-port=0",  # stays open until killed
                "--window-size=800,600",
                shown.url,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Neuroglancer answers a screenshot request once all chunks in view are loaded.
            with ThreadPoolExecutor(1) as pool:
                reply = pool.submit(shown.viewer.screenshot, size=list(SIZE)).result(timeout=90)
        finally:
            client.kill()
            client.wait()
    png = reply.screenshot.image
    SHOT.parent.mkdir(parents=True, exist_ok=True)
    SHOT.write_bytes(png)
    with Image.open(io.BytesIO(png)) as picture:
        assert picture.size == SIZE
        pixels = np.asarray(picture.convert("RGB")).reshape(-1, 3)
        rgb = np.asarray(picture.convert("RGB"), dtype=float)
    colours = np.unique(pixels, axis=0)
    # A blank or black canvas is one colour; a ramp under four coloured labels is hundreds.
    assert len(colours) > 100, f"{SHOT} looks blank ({len(colours)} colours)"
    # The 64^2 section spans 256 pixels about the centre, x to the right, y down: the four
    # labels' quadrants differ in colour, and inside one the ramp brightens along x.
    cx, cy = SIZE[0] // 2, SIZE[1] // 2
    quadrants = {tuple(rgb[cy + dy, cx + dx].round()) for dx in (-64, 64) for dy in (-64, 64)}
    assert len(quadrants) == 4, f"{SHOT}: the labels' quadrants are {quadrants}"
    left, right = rgb[cy - 64, cx + 64 - 24].sum(), rgb[cy - 64, cx + 64 + 24].sum()
    assert right > left, f"{SHOT}: the image does not brighten along x ({left} -> {right})"
