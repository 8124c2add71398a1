"""The viewer draws the volumes in a real browser: headless Chromium opens the viewer on
an image and a label volume, Neuroglancer takes a screenshot once it reports every chunk
in view loaded, and the screenshot shows both; then the mouse is moved over the section
(through Chromium's DevTools protocol, with Neuroglancer's tornado for the socket) and a
key bound to a Python action reports each layer's value under it, which must be the
volumes' voxels there. The screenshot is saved to ``build/screenshots/view.png``
(ignored by git) for a person to look at. Skipped where Chromium is not installed."""

from __future__ import annotations

import asyncio
import io
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from tornado.websocket import websocket_connect

from chunkgraph import volume
from chunkgraph.geometry import Box
from chunkgraph.viewer import view

ROOT = Path(__file__).resolve().parents[2]
SHOT = ROOT / "build" / "screenshots" / "view.png"
SIZE = (480, 360)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def _page_socket(devtools: int) -> str:
    """The DevTools socket of the browser's page, once it has one."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{devtools}/json/list") as reply:
            pages = [p for p in json.load(reply) if p["type"] == "page"]
        if pages:
            return str(pages[0]["webSocketDebuggerUrl"])
        time.sleep(0.1)  # polling the browser's own list: the condition, not a guess
    raise AssertionError("the browser shows no page")


async def _move_mouse_and_press_t(socket_url: str, at: tuple[int, int]) -> None:
    """Chrome DevTools protocol: move the mouse to ``at``, press and release T."""
    key = {"key": "t", "code": "KeyT", "windowsVirtualKeyCode": 84}
    steps = [
        ("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": at[0], "y": at[1]}),
        ("Input.dispatchKeyEvent", {"type": "keyDown", "text": "t", **key}),
        ("Input.dispatchKeyEvent", {"type": "keyUp", **key}),
    ]
    connection = await websocket_connect(socket_url)
    for number, (method, params) in enumerate(steps):
        await connection.write_message(
            json.dumps({"id": number, "method": method, "params": params})
        )
        await connection.read_message()  # each step done before the next
    connection.close()


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

    image, labels = image_and_labels
    with view(image, labels) as shown:
        probed: list[Any] = []
        pressed = threading.Event()
        shown.viewer.actions.add("probe", lambda action: (probed.append(action), pressed.set()))
        with shown.viewer.config_state.txn() as config:
            config.input_event_bindings.viewer["keyt"] = "probe"  # T: what is under the mouse
        with shown.viewer.txn() as state:
            state.layout = "xy"
            state.layers["browser-labels"].selected_alpha = 0.4
            state.cross_section_scale = 0.25e-9  # metres per pixel: 4 pixels a voxel
        devtools = _free_port()
        client = subprocess.Popen(
            [
                browser,
                "--headless",
                "--no-sandbox",  # as root, as CI runs
                "--use-angle=swiftshader",  # WebGL in software: no GPU needed
                "--enable-unsafe-swiftshader",
                f"--remote-debugging-port={devtools}",  # stays open; driven through it
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
            # The mouse over the section, then T: the viewer reports the position and
            # each layer's value there, as its layer panel shows them.
            asyncio.run(_move_mouse_and_press_t(_page_socket(devtools), (300, 250)))
            assert pressed.wait(30), "the viewer did not report the key press"
        finally:
            client.kill()
            client.wait()
    where = tuple(int(np.floor(c)) for c in probed[0].mouse_voxel_coordinates)
    values = probed[0].selected_values
    voxel = Box(where, tuple(c + 1 for c in where))
    assert values["browser-image"].value == pytest.approx(float(image.read(voxel).item()))
    assert int(values["browser-labels"].value) == int(labels.read(voxel).item())
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
