"""Delta debugging: shrink a failing op sequence to a 1-minimal one (every search's last step)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["shrink"]

T = TypeVar("T")


def shrink(
    ops: Sequence[T], fails: Callable[[Sequence[T]], bool], *, budget: int = 2000
) -> tuple[list[T], bool]:
    """Delta debugging (ddmin) over ops, then single-op deletion to a fixpoint.

    Returns the shortened ops and whether they are **1-minimal** (no single op can be deleted
    and still fail). ``fails`` must be deterministic; ``budget`` bounds the number of tries.
    """
    cur = list(ops)
    tries = 0
    n = 2
    while len(cur) >= 2 and tries < budget:
        chunk = math.ceil(len(cur) / n)
        for i in range(0, len(cur), chunk):
            cand = cur[:i] + cur[i + chunk :]
            tries += 1
            if fails(cand):
                cur = cand
                n = max(n - 1, 2)
                break
        else:
            if chunk == 1:
                break
            n = min(len(cur), n * 2)
    changed = True
    while changed and tries < budget:
        changed = False
        for i in range(len(cur)):
            cand = cur[:i] + cur[i + 1 :]
            tries += 1
            if fails(cand):
                cur = cand
                changed = True
                break
    one_minimal = tries < budget and not changed
    return cur, one_minimal
