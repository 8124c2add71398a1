"""The Python examples of the READMEs and of the site run, and print what they say.

Every fenced ```python block of ``README.md``, of each subsystem README
(``src/chunkgraph/*/README.md``) and of each page of the documentation site
(``docs/**/*.md``) is run, unless the line right before its fence
is an HTML comment ``<!-- illustrative: why it cannot run here -->`` (for code
that needs what a test machine lacks: a cluster, a GPU). One page's blocks
run in order in one namespace, as a user pasting them into one script would
(later blocks use names from earlier ones; ``__name__`` is ``"__main__"``), in
a fresh temporary working directory (they create ``raw.zarr`` and friends).

Shown output. A ``print(...)`` line followed by ``#`` comment lines shows the
output: in a block with such comments, everything the block prints must equal
those lines, in order (``# `` stripped). Arithmetic is compared exactly. Two
things vary from run to run and match anything of their form: a flow id (16
hex digits) and a duration, ``in 0.74 s``; a line of a run's measured breakdown
(``time on 2 slots x ...``, ``memory: peak RSS ...``) matches a line that starts the
same way. Paths under the working directory
are shown as if it were ``/home/me`` (``temporaries under /home/me/.out.zarr...``).

  a page ──extract──> [Block(line, code, expected)] ──exec in order──> stdout
                                                                          │
                                   expected lines as patterns <──compare──┘
"""

from __future__ import annotations

import contextlib
import io
import re
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "src" / "chunkgraph").glob("*/README.md"))]
SITE_PAGES = sorted((ROOT / "docs").rglob("*.md"))
PAGES = READMES + SITE_PAGES

FENCE = re.compile(r"^```(\w*)\s*$")
ILLUSTRATIVE = re.compile(r"^<!--\s*illustrative\b(?P<why>.*?)-->\s*$")
# Parts of shown output that differ between runs: a flow id, a duration.
VARYING = re.compile(r"(\b[0-9a-f]{16}\b|\bin \d+(?:\.\d+)? s\b)")
# How the lines of a run's breakdown (ApplyReport.summary) start: the rest is measured.
MEASURED = ("time on ", "memory: peak RSS ")
# The working directory, as the READMEs show it in printed paths.
SHOWN_WORKDIR = "/home/me"


@dataclass(frozen=True)
class Block:
    """One fenced ```python block: where it starts, its code, what it shows."""

    path: Path
    line: int  # 1-based line number of the first code line (after the fence)
    code: str
    illustrative: bool
    expected: tuple[str, ...] | None  # shown output lines, None if nothing is shown

    @property
    def where(self) -> str:
        return f"{name(self.path)}, block at line {self.line}"


def name(path: Path) -> str:
    """``path`` relative to the repository, as failure messages show it."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def shown_output(lines: list[str]) -> tuple[str, ...] | None:
    """The ``#`` comment lines that directly follow ``print(...)`` lines, in order."""
    shown: list[str] = []
    found = False
    for i, line in enumerate(lines):
        code = line.lstrip()
        if not code.startswith("print("):
            continue
        indent = line[: len(line) - len(code)]
        j = i + 1
        while j < len(lines) and lines[j].startswith(indent + "#"):
            text = lines[j][len(indent) + 1 :]
            shown.append(text[1:] if text.startswith(" ") else text)
            found = True
            j += 1
    return tuple(shown) if found else None


def extract(path: Path) -> list[Block]:
    """Every ```python block of a Markdown file."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        if end == len(lines):
            raise AssertionError(f"{name(path)}: fence at line {i + 1} is never closed")
        if fence.group(1) == "python":
            marker = ILLUSTRATIVE.match(lines[i - 1]) if i > 0 else None
            if marker is not None and not marker.group("why").strip(" :-"):
                raise AssertionError(
                    f"{name(path)}, line {i}: say why the block cannot run, "
                    "e.g. <!-- illustrative: needs a GPU -->"
                )
            body = lines[start:end]
            blocks.append(
                Block(
                    path=path,
                    line=start + 1,
                    code="\n".join(body) + "\n",
                    illustrative=marker is not None,
                    expected=shown_output(body),
                )
            )
        i = end + 1
    return blocks


def output_matches(expected: tuple[str, ...], printed: str) -> bool:
    """Whether ``printed`` is the shown output, flow ids and durations aside."""
    got = printed.removesuffix("\n").split("\n") if printed else []
    if len(got) != len(expected):
        return False
    for want, line in zip(expected, got, strict=True):
        measured = next((m for m in MEASURED if want.lstrip().startswith(m)), None)
        if measured is not None:
            if not line.lstrip().startswith(measured):
                return False
            continue
        parts = VARYING.split(want)  # odd indices are the varying parts
        pattern = "".join(
            re.escape(part)
            if k % 2 == 0
            else (r"in \d+(?:\.\d+)? s" if part.startswith("in ") else "[0-9a-f]{16}")
            for k, part in enumerate(parts)
        )
        if re.fullmatch(pattern, line) is None:
            return False
    return True


def run_block(block: Block, namespace: dict[str, object], workdir: Path) -> None:
    # Leading newlines make tracebacks show the README's own line numbers.
    source = "\n" * (block.line - 1) + block.code
    code = compile(source, str(block.path), "exec")
    printed = io.StringIO()
    error = None
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
    except BaseException:
        error = traceback.format_exc()
    if error is not None:
        pytest.fail(
            f"{block.where} raised:\n{error}\nit printed:\n{printed.getvalue()}", pytrace=False
        )
    output = printed.getvalue()
    for directory in {str(workdir.resolve()), str(workdir)}:
        output = output.replace(directory, SHOWN_WORKDIR)
    if block.expected is not None and not output_matches(block.expected, output):
        shown = "\n".join(f"# {line}".rstrip() for line in block.expected)
        actual = "\n".join(f"# {line}".rstrip() for line in output.splitlines())
        pytest.fail(
            f"{block.where}: the output shown on the page is not what the block prints.\n"
            f"shown:\n{shown}\nprinted (paste this, if it is right):\n{actual}",
            pytrace=False,
        )


@pytest.mark.parametrize("path", PAGES, ids=[name(p) for p in PAGES])
def test_readme_examples_run(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in extract(path):
        if not block.illustrative:
            run_block(block, namespace, tmp_path)


def test_the_deferred_reduction_example_draws_no_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deferred example draws no warning (a ReadAmplificationWarning among them)."""
    import warnings

    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in extract(ROOT / "docs" / "flow.md"):
        if block.illustrative:
            continue
        if "reduce_deferred(kept" not in block.code:
            run_block(block, namespace, tmp_path)
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_block(block, namespace, tmp_path)
        assert [str(w.message) for w in caught] == []
        return
    raise AssertionError("docs/flow.md has no deferred-reduction example")


def test_the_main_readme_has_examples_and_shows_output() -> None:
    """Guards the extraction itself: a broken fence pattern would pass vacuously."""
    blocks = extract(ROOT / "README.md")
    assert len([b for b in blocks if not b.illustrative]) >= 2, [b.where for b in blocks]
    assert any(b.expected for b in blocks), "no block of README.md shows its output"


def test_the_site_has_examples_that_show_output() -> None:
    """The site's pages are found, and most of their examples run and show their output."""
    blocks = [b for page in SITE_PAGES for b in extract(page)]
    runnable = [b for b in blocks if not b.illustrative]
    assert len(SITE_PAGES) >= 10, [name(p) for p in SITE_PAGES]
    assert len(runnable) >= 15, [b.where for b in blocks]
    assert sum(1 for b in runnable if b.expected) >= 10, "few examples on the site show output"


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("path", PAGES, ids=[name(p) for p in PAGES])
def test_readme_links_resolve(path: Path, flow_pictures: None) -> None:
    """Relative links point at files that exist (a moved module leaves none dangling)."""
    text = path.read_text(encoding="utf-8")
    missing = [
        target
        for target in LINK.findall(text)
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not missing, f"{name(path)} links to missing files: {missing}"


@pytest.mark.parametrize(
    ("expected", "printed", "ok"),
    [
        (("flow 015dc00f635d7f8b over Box",), "flow 0123456789abcdef over Box\n", True),
        (("wrote 1 MiB in 0.74 s",), "wrote 1 MiB in 12.05 s\n", True),
        (("wrote 1 MiB in 0.74 s",), "wrote 2 MiB in 0.74 s\n", False),
        (("would write 853 TiB",), "would write 472 TiB\n", False),
        (("a", "b"), "a\n", False),
        (("a", ""), "a\n\n", True),
    ],
)
def test_output_comparison(expected: tuple[str, ...], printed: str, ok: bool) -> None:
    assert output_matches(expected, printed) is ok


def test_extract_reads_markers_and_shown_output(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n"
        "```python\n"
        "x = 2\n"
        "print(x)\n"
        "# 2\n"
        "```\n"
        "<!-- illustrative: needs a GPU -->\n"
        "```python\n"
        "import cupy\n"
        "```\n"
        "```bash\n"
        "make test\n"
        "```\n",
        encoding="utf-8",
    )
    first, second = extract(doc)
    assert (first.line, first.code, first.illustrative, first.expected) == (
        3,
        "x = 2\nprint(x)\n# 2\n",
        False,
        ("2",),
    )
    assert (second.line, second.illustrative, second.expected) == (9, True, None)


def test_an_illustrative_marker_must_say_why(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("<!-- illustrative -->\n```python\npass\n```\n", encoding="utf-8")
    with pytest.raises(AssertionError, match="say why"):
        extract(doc)
