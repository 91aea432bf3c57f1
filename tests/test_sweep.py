"""Sweeps on Dask (kvmodel.sweep): a 2-worker LocalCluster gives byte for byte the serial
output; without Dask, asking for workers is a clear usage error."""

from __future__ import annotations

import importlib

import pytest

from kvmodel.cli import main
from kvmodel.sweep import run_tasks

ARGS = ["compare", "--sessions", "2", "--turns", "2", "--splits", "1/7,3/5", "--json",
        "--policies", "lru,kvtether,hbm-first,lachesis-det"]  # fmt: skip


def _square_plus(offset: int, x: int) -> int:
    return offset + x * x


def test_run_tasks_keeps_task_order_and_reports_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tasks = [(3,), (1,), (2,)]
    assert run_tasks(_square_plus, tasks, shared=(10,)) == [19, 11, 14]
    assert capsys.readouterr().err == ""
    got = run_tasks(_square_plus, tasks, shared=(10,), label=lambda k: f"x={tasks[k][0]}")
    assert got == [19, 11, 14]
    assert capsys.readouterr().err.splitlines() == ["[1/3] x=3", "[2/3] x=1", "[3/3] x=2"]
    pytest.importorskip("dask.distributed")
    assert run_tasks(_square_plus, tasks, shared=(10,), workers=2) == [19, 11, 14]


def test_compare_on_a_two_worker_cluster_is_byte_identical_to_serial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("dask.distributed")
    assert main(ARGS) == 0
    serial = capsys.readouterr().out
    assert main([*ARGS, "--workers", "2"]) == 0
    assert capsys.readouterr().out == serial


def test_workers_without_dask_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.import_module

    def no_dask(name: str, *a: object, **k: object) -> object:
        if name.startswith("dask"):
            raise ImportError(name)
        return real(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib, "import_module", no_dask)
    assert main([*ARGS, "--workers", "2"]) == 2
    assert "pip install 'kvmodel[dist]'" in capsys.readouterr().err


def test_check_walks_on_a_dask_scheduler_find_what_local_processes_find(
    capsys: pytest.CaptureFixture[str],
) -> None:
    dist = pytest.importorskip("dask.distributed")
    argv = ["check", "lru", "--invariants", "no-zombie-kv,pinned-never-evicted", "--walks",
            "24", "-j", "2", "--max-examples", "20", "--steps", "10", "--json"]  # fmt: skip
    assert main(argv) == 0
    local = capsys.readouterr().out
    with dist.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        assert main([*argv, "--scheduler", cluster.scheduler_address]) == 0
    remote = capsys.readouterr().out
    assert remote == local  # the same walks, merged in walk order: the same report
    assert '"walks": 24' in remote
