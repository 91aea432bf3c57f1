"""Deep copies of a search state (an engine, its monitor and a harness), shared by the two
exhaustive searches of the executable model (:func:`checkers.symbolic.fragment.explore`,
:func:`checkers.symbolic.reach.reach`): a state is frozen once and thawed once per child."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import TypeVar

__all__ = ["UncopyableError", "copier"]

T = TypeVar("T")


class UncopyableError(Exception):
    """A state the search cannot copy: it cannot branch from it (and says so)."""


def copier(node: T) -> Callable[[], T]:
    """A maker of deep copies of ``node``: by pickle (frozen once, thawed per copy: several
    times faster than ``copy.deepcopy`` per child), or, where the state does not pickle (a
    policy or an engine written outside the project may hold a lambda, a class made at run
    time, ...), by ``copy.deepcopy``; :class:`UncopyableError` where neither can copy it."""
    try:
        frozen = pickle.dumps(node, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:  # (pickle raises PicklingError, TypeError, AttributeError, ...)
        try:
            first = [copy.deepcopy(node)]  # (the trial copy is the first one handed out)
        except Exception as e2:
            raise UncopyableError(
                f"the search cannot copy a state of the run ({type(e2).__name__}: {e2}; "
                f"pickle: {type(e).__name__}: {e}), so it cannot branch from it"
            ) from None
        return lambda: first.pop() if first else copy.deepcopy(node)
    return lambda: pickle.loads(frozen)
