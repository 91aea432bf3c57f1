"""Independent tasks, serially or on a Dask cluster, with the same results either way.

A sweep (``kvmodel compare``'s policy x configuration grid, say) is a list of independent tasks,
each a deterministic function of its arguments. :func:`run_tasks` runs them in this process, or
on ``dask.distributed`` -- a ``LocalCluster`` of ``workers`` processes (one thread each), or an
existing scheduler at ``scheduler`` -- and returns the results in task order, so the output of a
sweep is byte for byte the serial output (tests/test_sweep.py compares them).

Dask is an optional extra (``pip install 'kvmodel[dist]'``); asking for workers without it is a
:class:`~kvmodel.errors.ConfigError` that says so. Progress, when asked for, is one line per
finished task, in completion order, through the caller's ``done(k)`` (kvmodel.progress).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from kvmodel.errors import ConfigError

__all__ = ["CONNECT_TIMEOUT_S", "connect", "executor", "local_cluster", "run_tasks", "sweep_cell"]

T = TypeVar("T")


def _dask() -> Any:
    try:
        return importlib.import_module("dask.distributed")  # an optional, untyped extra
    except ImportError:
        raise ConfigError("--workers/--scheduler need Dask: pip install 'kvmodel[dist]'") from None


@contextmanager
def local_cluster(workers: int | None) -> Iterator[str | None]:
    """The address of a local Dask cluster of ``workers`` one-thread processes for the duration
    (None, and no cluster, when ``workers`` is None)."""
    if not workers:
        yield None
        return
    cluster = _dask().LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
    )
    try:
        yield str(cluster.scheduler_address)
    finally:
        cluster.close()


#: seconds a client waits for a scheduler to answer before the command says there is none
CONNECT_TIMEOUT_S = 10


def connect(scheduler: str) -> Any:
    """A Dask client of the scheduler at ``scheduler``, or a :class:`ConfigError` (exit 2)
    naming the address when none answers (an address with no scheduler was an ``OSError``
    traceback after 30 s)."""
    try:
        return _dask().Client(scheduler, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError, ValueError, TypeError) as e:
        raise ConfigError(
            f"--scheduler {scheduler!r}: no Dask scheduler answered there within "
            f"{CONNECT_TIMEOUT_S} s ({type(e).__name__}: {e})"
        ) from None


@contextmanager
def executor(jobs: int, scheduler: str | None = None) -> Iterator[Executor]:
    """A ``concurrent.futures`` executor: ``jobs`` local processes, or the workers of the Dask
    scheduler at ``scheduler`` (its client's executor), closed on exit."""
    if scheduler is None:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            yield pool
        return
    client = connect(scheduler)
    try:
        yield client.get_executor(pure=False)
    finally:
        client.close()


def run_tasks(
    fn: Callable[..., T],
    tasks: Sequence[tuple[Any, ...]],
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    shared: tuple[Any, ...] = (),
    done: Callable[[int], None] | None = None,
) -> list[T]:
    """``[fn(*shared, *task) for task in tasks]``, serially unless ``workers`` (a local cluster)
    or ``scheduler`` (an address) is given. ``shared`` arguments (a trace, say) are sent to the
    cluster once, not with every task. ``done(k)`` is called as task ``k`` finishes (progress)."""
    if not workers and not scheduler:
        out = []
        for k, task in enumerate(tasks):
            out.append(fn(*shared, *task))
            if done is not None:
                done(k)
        return out
    dist = _dask()
    cluster: Any = None
    if scheduler:
        client = connect(scheduler)
    else:
        cluster = dist.LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = dist.Client(cluster)
    try:
        sent = [client.scatter(x, broadcast=True) for x in shared]
        futures = [client.submit(fn, *sent, *task, pure=False) for task in tasks]
        index = {f.key: k for k, f in enumerate(futures)}
        for f in dist.as_completed(futures):
            if done is not None:
                done(index[f.key])
        return [f.result() for f in futures]
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


# ---------------------------------------------------------------- the sweep command's grid


def sweep_cell(
    policy: str, workload: str, capacity: int, seed: int, sessions: int | None
) -> dict[str, Any]:
    """One cell of ``kvmodel sweep``: a generated workload (a preset, this seed) on one HBM tier
    of ``capacity`` blocks of 16 tokens, replayed under ``policy``; its metrics as JSON."""
    import attrs

    from kvmodel.config import EngineConfig
    from kvmodel.ids import TierName
    from kvmodel.memory import TierConfig
    from kvmodel.replay import replay
    from kvmodel.studies.metrics import compute_metrics
    from kvmodel.workloads import PRESETS, generate_agentic

    params = attrs.evolve(PRESETS[workload], seed=seed)
    if sessions is not None:
        params = attrs.evolve(params, sessions=sessions)
    config = EngineConfig(16, (TierConfig(TierName("hbm"), capacity),))
    metrics = compute_metrics(replay(generate_agentic(params), policy, config)).to_json()
    return {"policy": policy, "workload": workload, "capacity": capacity, "seed": seed, **metrics}
