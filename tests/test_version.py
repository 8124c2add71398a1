"""One version: pyproject's, the package's and the newest release in CHANGES.md agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import chunkgraph

ROOT = Path(__file__).resolve().parents[1]
# A release heading: "## 0.2.0" (optionally followed by a date); "## Unreleased" is not one.
RELEASE = re.compile(r"^## (\d+\.\d+\.\d+)\b", re.M)


def newest_release(changes: str) -> str:
    """The first release heading of a changelog (newest first).

    >>> newest_release("# Changes\\n## Unreleased\\n## 1.2.0 (2026-01-01)\\n## 1.1.0\\n")
    '1.2.0'
    """
    found = RELEASE.search(changes)
    if found is None:
        raise AssertionError("CHANGES.md has no release heading such as '## 0.2.0'")
    return found.group(1)


def test_pyproject_version_is_the_newest_release_in_changes() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    changes = (ROOT / "CHANGES.md").read_text(encoding="utf-8")
    assert project["version"] == newest_release(changes), (
        f"pyproject.toml says {project['version']}, CHANGES.md's newest release is "
        f"{newest_release(changes)}: bump one of them"
    )


def test_the_package_reports_that_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert chunkgraph.__version__ == project["version"]


def test_changes_lists_releases_newest_first() -> None:
    changes = (ROOT / "CHANGES.md").read_text(encoding="utf-8")
    versions = [tuple(int(p) for p in v.split(".")) for v in RELEASE.findall(changes)]
    assert versions == sorted(versions, reverse=True), versions
    assert len(versions) >= 2
