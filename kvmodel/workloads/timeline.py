"""Per-session op streams merged onto one timeline (the generators' common last step)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from kvmodel.io.trace import Op

__all__ = ["batch_start", "merge_streams"]


def merge_streams(streams: Sequence[Sequence[Op]]) -> Iterator[Op]:
    """The ops of every stream by time, stable by (t, stream, position): each stream must
    already be in time order."""
    heap = [(ops[0].t, i, 0) for i, ops in enumerate(streams) if ops]
    heapq.heapify(heap)
    while heap:
        _, i, j = heapq.heappop(heap)
        yield streams[i][j]
        if j + 1 < len(streams[i]):
            heapq.heappush(heap, (streams[i][j + 1].t, i, j + 1))


def batch_start(arrivals: Sequence[float], i: int, batch: int) -> float:
    """When the ``i``-th session starts, sessions arriving in batches of ``batch`` (the
    generator's ``arrival_batch``; spec/metrics.md E9): the first of each batch at its own
    arrival in ``arrivals`` (those up to ``i`` are read), the others a millisecond apart after
    it -- the mean rate is the arrivals', and each batch runs at once. ``batch`` 1: every
    session at its own arrival."""
    k = i % batch
    return round(arrivals[i - k] + 0.001 * k, 3)
