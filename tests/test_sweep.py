"""Sweeps on Dask (kvmodel.studies.sweep): a 2-worker LocalCluster gives byte for byte the serial
output; without Dask, asking for workers is a clear usage error."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from kvmodel.cli import main
from kvmodel.studies.sweep import run_tasks

ARGS = ["compare", "--sessions", "2", "--turns", "2", "--splits", "1/7,3/5", "--json",
        "--policies", "lru,kvtether,hbm-first,lachesis-det"]  # fmt: skip


def _square_plus(offset: int, x: int) -> int:
    return offset + x * x


def test_run_tasks_keeps_task_order_and_reports_progress(
    capsys: pytest.CaptureFixture[str],
) -> None:
    tasks = [(3,), (1,), (2,)]
    seen: list[int] = []
    assert run_tasks(_square_plus, tasks, shared=(10,), done=seen.append) == [19, 11, 14]
    assert seen == [0, 1, 2]
    pytest.importorskip("dask.distributed")
    seen.clear()
    assert run_tasks(_square_plus, tasks, shared=(10,), workers=2, done=seen.append) == [
        19, 11, 14,
    ]  # fmt: skip
    assert sorted(seen) == [0, 1, 2]  # each reported once, in completion order


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
    assert main([*argv, "--workers", "2"]) == 0  # a LocalCluster of its own
    assert capsys.readouterr().out == local
    assert main([*argv, "--workers", "2", "--scheduler", "tcp://x:1"]) == 2


def test_check_of_several_policies_on_dask_reports_what_a_serial_check_reports() -> None:
    # several policies on a scheduler: one search per Dask task, the reports the serial ones
    dist = pytest.importorskip("dask.distributed")
    from checkers.search.report import check_policies

    policies = ["lru", "kvtether", "checkers.search.mutants:MRUInverted"]
    names = ["no-zombie-kv", "suspended-mru"]

    def check(scheduler: str | None) -> list[dict[str, Any]]:
        reports = check_policies(
            policies, names, profile="dev", walks=8, hypothesis_shrink=False,
            scheduler=scheduler,
        )  # fmt: skip
        return [r.to_json() for r in reports]

    serial = check(None)
    with dist.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        assert check(cluster.scheduler_address) == serial
    # what was compared: lru breaks both (neither claimed), the mutant its claim
    violated = [[n for n in names if r["invariants"][n]["verdict"] == "violated"] for r in serial]
    assert violated == [names, [], ["suspended-mru"]]


def test_progress_is_drawn_only_on_a_terminal_and_not_when_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    from kvmodel.progress import bar, wanted

    assert not wanted()  # pytest's captured stderr is no terminal
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert wanted()
    assert not wanted(quiet=True)
    names: list[str] = []
    with bar(3, "x", on=True) as done:
        for n in ("a", "b", "c"):
            done(n)
            names.append(n)
    assert names == ["a", "b", "c"]
    assert "3/3" in capsys.readouterr().err  # drawn, on what claims to be a terminal
    monkeypatch.undo()
    assert main([*ARGS]) == 0  # a pipe gets the report and no progress at all
    assert capsys.readouterr().err == ""


SWEEP = ["sweep", "--policies", "lru,kvtether", "--workloads", "single-agent,multi-agent",
         "--capacities", "128,512", "--seeds", "0,1", "--sessions", "2", "--json"]  # fmt: skip


def test_the_sweep_grid_on_two_workers_is_byte_identical_to_serial(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # issue 16 item 4: policy x workload x capacity x seed, each cell an independent task
    import json

    pytest.importorskip("dask.distributed")
    assert main(SWEEP) == 0
    serial = capsys.readouterr().out
    cells = json.loads(serial)
    assert len(cells) == 2 * 2 * 2 * 2
    assert {(c["policy"], c["workload"], c["capacity"], c["seed"]) for c in cells} == {
        (p, w, c, s) for p in ("lru", "kvtether") for w in ("single-agent", "multi-agent")
        for c in (128, 512) for s in (0, 1)
    }  # fmt: skip
    assert any(c["evictions"] for c in cells)  # the small capacity is under pressure
    assert main([*SWEEP, "--workers", "2"]) == 0
    assert capsys.readouterr().out == serial


@pytest.mark.parametrize(
    "bad",
    [["--workloads", "nope"], ["--capacities", "0"], ["--seeds", "x"], ["--policies", ","],
     ["--policies", "no-such-policy"]],
)  # fmt: skip
def test_a_bad_sweep_is_a_usage_error(bad: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SWEEP, *bad]) == 2
    assert "error" in capsys.readouterr().err
