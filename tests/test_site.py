"""The documentation site builds as ``make docs`` builds it, and looks right in a browser.

The site is built once for the module (the flow's pictures drawn first, then
``mkdocs build --strict``, where a broken link or reference fails), into a
temporary folder. Its pages are checked for what a strict build lets through
(a picture that is not there), and the home page and the flow page are opened
in headless Chromium, whose screenshots go to ``build/screenshots/`` (ignored
by git) for a person to look at; the test checks that they are not blank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "build" / "screenshots"
IMAGE = re.compile(r"<img [^>]*src=\"([^\"]+)\"")
# The pages a person checks first: the landing page and the page with the pictures.
SHOWN = {"index": ("index.html", (1280, 1400)), "flow": ("flow.html", (1280, 2400))}


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        found = shutil.which(name)
        if found is not None:
            return found
    return None


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, flow_pictures: None) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}{build.stderr}"
    return out


def test_the_site_has_its_pages(site: Path) -> None:
    for page in ("index.html", "flow.html", "storage.html", "changes.html", "reference/index.html"):
        assert (site / page).is_file(), page
    changes = (site / "changes.html").read_text(encoding="utf-8")
    assert "0.2.0" in changes and "0.1.0" in changes  # CHANGES.md is included, not linked
    design = (site / "design" / "flow.html").read_text(encoding="utf-8")
    assert "The divisibility rule" in design  # the package README is included
    reference = (site / "reference" / "index.html").read_text(encoding="utf-8")
    assert "chunkgraph.apply" in reference and "<code>&gt;&gt;&gt;" not in reference


def test_every_picture_on_the_site_is_there(site: Path) -> None:
    missing = [
        f"{page.relative_to(site)}: {src}"
        for page in site.rglob("*.html")
        for src in IMAGE.findall(page.read_text(encoding="utf-8"))
        if "://" not in src
        and not src.startswith("data:")
        and not (page.parent / src).resolve().is_file()
    ]
    assert not missing, missing
    flow = (site / "flow.html").read_text(encoding="utf-8")
    drawn = {"levels.png", "crop-blend.png", "checkerboard.png", "reductions.png"}
    assert drawn <= {Path(src).name for src in IMAGE.findall(flow)}


@pytest.mark.parametrize("shown", sorted(SHOWN))
def test_pages_render_in_chromium(site: Path, shown: str) -> None:
    browser = chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (apt-get install chromium): pages not opened")
    from PIL import Image

    page, (width, height) = SHOWN[shown]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / f"{shown}.png"
    shot.unlink(missing_ok=True)
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",  # as root, as CI runs
            "--disable-gpu",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--screenshot={shot}",
            (site / page).as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    with Image.open(shot) as image:
        assert image.size == (width, height)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 16)
    # A page that failed to load is one or two colours; text, code and pictures are many.
    assert colours is None or len(colours) > 50, f"{shot} looks blank ({len(colours)} colours)"


def test_doctests_in_docstrings_are_fenced_for_the_reference() -> None:
    """The API reference's griffe extension fences doctests, indented or not, once."""
    import importlib.util

    path = ROOT / "docs" / "scripts" / "griffe_doctests.py"
    spec = importlib.util.spec_from_file_location("griffe_doctests", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = "Sums.\n\n    >>> sum([1, 2])\n    3\n\n```python\n>>> kept\n```\n"
    assert module.fence_doctests(text).split("\n") == [
        "Sums.",
        "",
        "```pycon",
        ">>> sum([1, 2])",
        "3",
        "```",
        "",
        "```python",
        ">>> kept",
        "```",
        "",
    ]
