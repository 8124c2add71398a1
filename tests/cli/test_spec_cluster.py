"""A spec's ``run.executor`` naming a cluster to start: ``{slurm: {cores: 8, ...}}``.
A bad key or value is refused at its line, naming the key and the valid ones (exit 2,
nothing run, no job submitted); a cluster whose package is missing names the extra."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from chunkgraph import cli
from chunkgraph.execute import ClusterSpec

SPEC = (
    "input: raw.zarr\n"
    "output: {path: out.zarr, dtype: float32, chunks: [16, 16, 16]}\n"
    "function: spec_functions:scale\n"
    "run:\n"
    "  executor:\n"
)


@pytest.mark.parametrize(
    ("executor", "where", "says"),
    [
        pytest.param(
            "    slurm:\n      cores: 8\n      memory: 32GiB\n      gres: 1\n",
            ":9: run.executor.slurm.gres: ",
            "unknown option of a slurm cluster; valid: cores, memory, walltime, jobs, "
            "processes, queue, account, extra_directives, prologue",
            id="unknown-key",
        ),
        pytest.param(
            "    pbs: {cores: 4, memory: 8GB, walltime: 2}\n",
            ":6: run.executor.pbs.walltime: ",
            "a string (in YAML, quote it: unquoted, 2:00:00 is the number 7200), got 2",
            id="bad-value",
        ),
        pytest.param(
            "    slurm: {cores: 4, memory: 32, walltime: 02:00:00}\n",
            ":6: run.executor.slurm.memory: ",
            "a number without a unit is bytes: give the unit, e.g. '32GiB'), got 32",
            id="memory-without-unit",
        ),
        pytest.param(
            "    slurm: {cores: 4, memory: 32GiB, walltime: 2:00:00}\n",
            ":6: run.executor.slurm.walltime: ",
            "(in YAML, quote it: unquoted, 2:00:00 is the number 7200), got 7200",
            id="walltime-unquoted",
        ),
        pytest.param(
            "    sge:\n      memory: 8GB\n",
            ":6: run.executor.sge.cores: ",
            "executor.sge.cores is needed",
            id="missing-cores",
        ),
        pytest.param(
            "    slrum: {cores: 4, memory: 8GB}\n",
            ":5: run.executor: ",
            "'slrum' is not a cluster chunkgraph starts; give one of slurm, pbs, lsf, sge, "
            "kubernetes",
            id="unknown-kind",
        ),
    ],
)
def test_a_bad_cluster_is_refused_at_its_line(
    work: Path, capsys: pytest.CaptureFixture[str], executor: str, where: str, says: str
) -> None:
    spec = work / "spec.yaml"
    spec.write_text(SPEC + executor)
    assert cli.main(["run", str(spec)]) == 2
    err = capsys.readouterr().err
    assert f"{spec}{where}" in err and says in err, err
    assert not (work / "out.zarr").exists()


def test_a_spec_cluster_is_one_value_in_the_run_options(work: Path) -> None:
    from chunkgraph.cli._spec import load_spec

    spec = work / "spec.yaml"
    spec.write_text(SPEC + '    lsf: {cores: 2, memory: 4GB, walltime: "01:00", jobs: 3}\n')
    run = load_spec(spec).run
    assert run.executor == ClusterSpec.of("lsf", cores=2, memory="4GB", walltime="01:00", jobs=3)


def test_kubernetes_without_its_package_is_exit_2_naming_the_extra(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "dask_kubernetes.operator", None)  # not installed
    spec = work / "spec.yaml"
    spec.write_text(SPEC + "    kubernetes: {image: 'ghcr.io/dask/dask:latest', workers: 2}\n")
    assert cli.main(["run", "--quiet", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "needs dask-kubernetes" in err and "pip install 'chunkgraph[kubernetes]'" in err
    assert not (work / "out.zarr").exists()


def test_kubernetes_out_of_reach_is_exit_2_saying_what_to_check(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """dask-kubernetes for real, with no cluster to reach (no kubeconfig, not in a pod)."""
    pytest.importorskip("dask_kubernetes")
    for name in [k for k in os.environ if k.startswith("KUBERNETES_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(work))
    monkeypatch.setenv("KUBECONFIG", str(work / "no-kubeconfig"))
    spec = work / "spec.yaml"
    spec.write_text(SPEC + "    kubernetes: {image: 'ghcr.io/dask/dask:latest', workers: 2}\n")
    assert cli.main(["run", "--quiet", str(spec)]) == 2
    err = capsys.readouterr().err
    assert "cannot start a Dask cluster on Kubernetes" in err
    assert "`kubectl get pods` works here" in err
    assert not (work / "out.zarr").exists()


def test_the_spec_schema_lists_each_cluster_kind_and_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    from chunkgraph.execute import CLUSTER_KINDS, valid_options

    assert cli.main(["spec-schema"]) == 0
    executor = json.loads(capsys.readouterr().out)["$defs"]["RunDefaults"]["properties"]
    forms = executor["executor"]["anyOf"]
    cluster = next(f for f in forms if f.get("maxProperties") == 1)
    assert list(cluster["properties"]) == list(CLUSTER_KINDS)
    for kind in CLUSTER_KINDS:
        assert list(cluster["properties"][kind]["properties"]) == valid_options(kind)
    assert cluster["properties"]["slurm"]["properties"]["cores"]["type"] == "integer"
