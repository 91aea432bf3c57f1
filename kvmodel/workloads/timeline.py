"""Per-session op streams merged onto one timeline (the generators' common last step)."""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence

from kvmodel.io.trace import Op

__all__ = ["merge_streams"]


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
