"""Progress on long commands: a bar on stderr when it is a terminal, nothing otherwise.

``kvmodel check``, ``compare`` and ``prove`` report each finished unit (a policy, a cell) here.
The bar is drawn by ``rich`` (a dependency for this and nothing else) and only when stderr is a
TTY and ``--quiet`` was not given: a pipe, a log file or CI gets no control codes and no lines,
and stdout -- the report -- is never touched.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["bar", "wanted"]


def wanted(quiet: bool = False) -> bool:
    """Draw progress? Only for a person watching: stderr a terminal and not ``--quiet``."""
    return not quiet and sys.stderr.isatty()


@contextmanager
def bar(total: int, what: str, *, on: bool) -> Iterator[Callable[[str], None]]:
    """A bar of ``total`` steps titled ``what``; the yielded ``done(name)`` advances it one step
    and shows the unit just finished. With ``on`` false, ``done`` does nothing."""
    if not on or total <= 0:
        yield lambda _name: None
        return
    # imported by name, as the optional Dask is in kvmodel.studies.sweep: rich is a dependency, but
    # the type check of the model must not hinge on it being installed where mypy runs
    console: Any = importlib.import_module("rich.console")
    rp: Any = importlib.import_module("rich.progress")
    columns = (
        rp.TextColumn("{task.description}"),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TimeElapsedColumn(),
        rp.TextColumn("eta"),
        rp.TimeRemainingColumn(),  # (from the rate so far: a long judge says when it ends)
    )
    with rp.Progress(*columns, console=console.Console(stderr=True), transient=True) as p:
        task = p.add_task(what, total=total)

        def done(name: str) -> None:
            p.update(task, advance=1, description=f"{what}: {name}")

        yield done
