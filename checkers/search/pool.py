"""A search's draws must not depend on what else the process has imported.

Recent Hypothesis releases (the pinned 6.170 among them) mix into their draws *local constants*:
every number and string literal of every non-library module loaded in the process (kvmodel's, the
checkers', a user's policy module), read off their source when a test case starts. A derandomized
search is then a function of its seed *and* of every literal of every module imported so far:
adding a preset to ``kvmodel.workloads`` moved the examples a lockstep search drew (the radix-cache
example's coverage line changed), and a search run after a lazy import draws differently from the
same search run before it -- in pytest that depends on which tests ran first in the worker.

:func:`fixed_constants` pins the local pool to empty while a search runs, and restores it after:
Hypothesis's own constants (boundary integers, special floats and strings) are still drawn, so a
search's examples depend on its seed, its strategy and Hypothesis's version (pinned in
``constraints.txt``) alone (spec/invariants.md, "Determinism of the searches").

It patches a private function of Hypothesis. If a release renames it, the pin does nothing and
:data:`PINNED` is False; ``tests/test_search.py`` fails then, so an upgrade cannot drop the pin
silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["PINNED", "fixed_constants"]

_providers: Any
try:
    from hypothesis.internal.conjecture import providers as _providers
except ImportError:  # pragma: no cover - a Hypothesis without the module has no local pool
    _providers = None

#: whether this Hypothesis has the local constant pool this module pins
PINNED: bool = (
    _providers is not None
    and callable(getattr(_providers, "_get_local_constants", None))
    and hasattr(_providers, "Constants")
    and hasattr(getattr(_providers, "CONSTANTS_CACHE", None), "cache")
)
#: Hypothesis's own harvest of the pool (for the test that shows what the pin prevents)
_HARVEST: Any = _providers._get_local_constants if PINNED else None


def _clear_cache() -> None:
    # the permitted constants per (type, constraints) are cached from the pool: stale once the
    # pool changes
    _providers.CONSTANTS_CACHE.cache.clear()


@contextlib.contextmanager
def fixed_constants() -> Iterator[None]:
    """Within: Hypothesis draws no constant harvested from loaded modules. Re-entrant."""
    if not PINNED:
        yield
        return
    before = _providers._get_local_constants
    empty = _providers.Constants()
    _providers._get_local_constants = lambda: empty
    _clear_cache()
    try:
        yield
    finally:
        _providers._get_local_constants = before
        _clear_cache()
