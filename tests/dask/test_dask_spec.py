"""``chunkgraph run SPEC.yaml`` on a real LocalCluster of worker processes: the
function's module beside the spec is shipped to the workers, which could not
import it otherwise (their path holds this checkout's src and root, not the
spec's directory)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chunkgraph import cli, volume

distributed = pytest.importorskip("distributed")

FUNCTIONS = Path(__file__).resolve().parents[1] / "cli" / "spec_functions.py"
SPEC = (
    "function: spec_functions:scale\n"
    "kwargs: {{factor: 3.0}}\n"
    "input: raw.zarr\n"
    "output: {{path: {out}, dtype: float32, chunks: [8, 8, 8]}}\n"
    "chunk_sizes: [8]\n"
    "retries: 0\n"
)


def test_a_spec_whose_function_lies_beside_it_runs_on_the_cluster(
    healthy: Any, cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "spec_functions", raising=False)  # another test's copy
    shutil.copy(FUNCTIONS, tmp_path)
    raw = volume.create(tmp_path / "raw.zarr", (16, 16, 16), (8, 8, 8), "float32")
    data = np.random.default_rng(3).random((16, 16, 16), dtype="float32")
    raw.write(raw.bounds, data)
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out="out.zarr"))
    code = cli.main(["run", "--quiet", str(spec), "--executor", cluster.scheduler_address])
    assert code == 0
    out = volume.open(tmp_path / "out.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), data * 3)

    # The module changed beside the spec: the workers run the new one.
    with (tmp_path / "spec_functions.py").open("a") as f:
        f.write("\n\ndef scale(x, factor=2.0, offset=0.0):\n    return x * factor + 1\n")
    monkeypatch.delitem(sys.modules, "spec_functions", raising=False)
    spec.write_text(SPEC.format(out="again.zarr"))
    code = cli.main(["run", "--quiet", str(spec), "--executor", cluster.scheduler_address])
    assert code == 0
    again = volume.open(tmp_path / "again.zarr")
    np.testing.assert_array_equal(again.read(again.bounds), data * 3 + 1)


def test_a_module_the_workers_cannot_import_is_refused_before_anything_is_written(
    healthy: Any, cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "client_only.py").write_text(
        "import multiprocessing\n\n"
        "if 'Dask Worker' in multiprocessing.current_process().name:\n"
        "    raise ImportError('a package only this machine has')\n\n\n"
        "def scale(x):\n"
        "    return x\n"
    )
    raw = volume.create(tmp_path / "raw.zarr", (16, 16, 16), (8, 8, 8), "float32")
    raw.write(raw.bounds, np.zeros((16, 16, 16), dtype="float32"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(out="out.zarr").replace("spec_functions", "client_only"))
    spec.write_text(spec.read_text().replace("kwargs: {factor: 3.0}\n", ""))
    code = cli.main(["run", "--quiet", str(spec), "--executor", cluster.scheduler_address])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "cannot import 'client_only'" in err
    assert "a package only this machine has" in err
    assert not (tmp_path / "out.zarr").exists()


def test_a_package_beside_the_spec_runs_on_the_cluster_and_a_changed_submodule_too(
    healthy: Any, cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mytools/filters.py`` inside a package beside the spec: the package is zipped and
    sent; changed, the workers import the new submodule, not the one they had loaded."""
    package = tmp_path / "mytools"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "filters.py").write_text("def scale(x, factor=2.0):\n    return x * factor\n")
    for name in ("mytools", "mytools.filters"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    raw = volume.create(tmp_path / "raw.zarr", (16, 16, 16), (8, 8, 8), "float32")
    data = np.random.default_rng(5).random((16, 16, 16), dtype="float32")
    raw.write(raw.bounds, data)
    spec = tmp_path / "spec.yaml"
    text = SPEC.replace("spec_functions:scale", "mytools.filters:scale")
    spec.write_text(text.format(out="out.zarr"))
    code = cli.main(["run", "--quiet", str(spec), "--executor", cluster.scheduler_address])
    assert code == 0
    out = volume.open(tmp_path / "out.zarr")
    np.testing.assert_array_equal(out.read(out.bounds), data * 3)

    (package / "filters.py").write_text("def scale(x, factor=2.0):\n    return x * factor + 1\n")
    for name in ("mytools", "mytools.filters"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    spec.write_text(text.format(out="again.zarr"))
    code = cli.main(["run", "--quiet", str(spec), "--executor", cluster.scheduler_address])
    assert code == 0
    again = volume.open(tmp_path / "again.zarr")
    np.testing.assert_array_equal(again.read(again.bounds), data * 3 + 1)
