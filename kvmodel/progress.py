"""Progress on long commands: a bar on stderr when it is a terminal, nothing otherwise.

``kvmodel check``, ``compare`` and ``prove`` report each finished unit (a policy, a cell) here.
The bar is drawn by ``rich`` (a dependency for this and nothing else) and only when stderr is a
TTY and ``--quiet`` was not given: a pipe, a log file or CI gets no control codes and no lines,
and stdout -- the report -- is never touched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

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
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=True) as p:
        task = p.add_task(what, total=total)

        def done(name: str) -> None:
            p.update(task, advance=1, description=f"{what}: {name}")

        yield done
