"""What an importer believes of a log's own numbers (spec/trace-format.md T3, Limits).

Usage counts and timestamps are the log's words, not its structure: a value of the wrong type or
out of range (a string, a negative or absurd count, NaN, infinity) is treated as absent -- sizes
then come from characters, times from order -- never a crash, a hang or a trace the model
rejects."""

from __future__ import annotations

import math

__all__ = ["MAX_COUNT", "MAX_STAMP", "count", "stamp"]

#: the largest usage count believed (a context window is < 10^8 tokens)
MAX_COUNT = 10**8
#: the largest absolute timestamp believed (a Unix time in seconds is < 10^11)
MAX_STAMP = 1e11


def count(v: object) -> int | None:
    """``v`` if it is an integer count in [0, :data:`MAX_COUNT`], else None."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_COUNT:
        return None
    return v


def stamp(v: object) -> float | None:
    """``v`` as a finite time within +-:data:`MAX_STAMP`, else None."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    x = float(v)
    return x if math.isfinite(x) and abs(x) <= MAX_STAMP else None
