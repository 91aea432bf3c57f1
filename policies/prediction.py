"""Prediction-based peers without a dead/live distinction (spec/policies.md §mori, §ttl).

* ``mori`` -- MORI-like: each context's priority is the share of a recent window it spent
  waiting on tools; the most idle context's KV is evicted first. A closed context keeps idling
  (it never resumes), which is how dead KV ends up evicted -- eventually, not at once. KV of
  a session that has ended belongs to no active program and goes first.
* ``ttl`` -- Continuum/CacheWise-like: the tool-call intervals observed so far (suspension to
  resumption) give a TTL per tool class (a quantile, default p90); a waiting context's KV is
  protected until its TTL runs out; unprotected KV goes first by LRU, then protected KV by the
  earliest expiry.

Both rank by quantities that change with time, so they order blocks in Python (no declarative
rank, no Z3 proof) and take the general eviction path.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import ClassVar

from kvmodel.ids import BlockId, ContextId, SessionId
from kvmodel.io.trace import Append, Close, EndSession, Fork, Infer, Op, Open, Replace, Return
from kvmodel.messages import AgentKind
from kvmodel.policy import STRUCTURAL_CLAIMS, BasePolicy, Reclaim
from kvmodel.view import BlockInfo, ModelView

__all__ = ["MORI", "TTL", "WaitTracker", "linear_quantile"]


def linear_quantile(ascending: Sequence[float], q: float) -> float:
    """The ``q``-quantile of a non-empty ascending sequence, as ``numpy.quantile`` computes it
    by default (method ``linear``), bit for bit: the two values around index ``q * (n - 1)``
    interpolated by its fractional part, from the nearer end (numpy's ``_lerp``). O(1) on a
    list kept sorted, where ``numpy.quantile`` sorts or partitions the whole history each
    time (a test compares the two on thousands of seeded samples)."""
    n = len(ascending)
    v = (n - 1) * q
    lo = math.floor(v)
    if lo >= n - 1:
        return ascending[n - 1]
    t = v - lo
    a, b = ascending[lo], ascending[lo + 1]
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


class WaitTracker:
    """Per-context waiting intervals: from the end of an inference to the next input."""

    def __init__(self) -> None:
        self.waits: dict[ContextId, list[tuple[float, float | None]]] = {}
        self.agent: dict[ContextId, AgentKind] = {}
        #: completed waits: (agent kind, seconds)
        self.completed: list[tuple[AgentKind, float]] = []
        #: the same waits' seconds by agent kind, ascending (each inserted in its place: a
        #: quantile of them is then read in O(1), :func:`linear_quantile`)
        self.waited: dict[AgentKind, list[float]] = {}
        #: per context, (window start, index of its first wait that ends after it): waits that
        #: ended before a window contribute nothing to it, nor to any later one
        self._first: dict[ContextId, tuple[float, int]] = {}

    def observe(self, view: ModelView, op: Op) -> None:
        match op:
            case Open():
                self.agent[op.ctx] = op.agent
            case Fork():
                self.agent[op.ctx] = view.context(op.src).agent
            case Infer():
                # every inference ran on an open context; a one-shot context is closed by its
                # own inference before this call and idles on from its end like any closed one
                # (spec §mori) -- not left out, which made its KV look never idle
                self.waits.setdefault(op.ctx, []).append((op.t + op.duration, None))
            case Append() | Replace():
                self._resume(op.ctx, op.t)
            case Return():
                self._resume(op.into, op.t)
            case Close() | EndSession():
                pass  # a closed context never resumes: it idles on

    def _resume(self, ctx: ContextId, t: float) -> None:
        w = self.waits.get(ctx)
        if w and w[-1][1] is None:
            start = w[-1][0]
            w[-1] = (start, max(start, t))
            agent, seconds = self.agent.get(ctx, AgentKind.MAIN), max(0.0, t - start)
            self.completed.append((agent, seconds))
            bisect.insort(self.waited.setdefault(agent, []), seconds)

    def open_wait_start(self, ctx: ContextId) -> float | None:
        w = self.waits.get(ctx)
        return w[-1][0] if w and w[-1][1] is None else None

    def idle_share(self, ctx: ContextId, now: float, window: float) -> float:
        """The share of the last ``window`` seconds before ``now`` that ``ctx`` spent waiting.

        A context's waits follow one another in time, so those that ended by the window's start
        are a prefix of its list: skipped from where the last call with an earlier or equal start
        stopped (each added exactly 0.0, so the sum is the full loop's, bit for bit), and the
        cost per call is the waits in the window, not the session's history."""
        lo = now - window
        waits = self.waits.get(ctx, ())
        seen_lo, i = self._first.get(ctx, (lo, 0))
        if lo < seen_lo:  # an earlier window than the last one asked about: from the start
            i = 0
        while i < len(waits) and (end := waits[i][1]) is not None and end <= lo:
            i += 1
        self._first[ctx] = (lo, i)
        idle = 0.0
        for start, end in waits[i:]:
            e = now if end is None else end
            idle += max(0.0, min(e, now) - max(start, lo))
        return min(1.0, idle / window)


class _Tracking(BasePolicy):
    """Observes every op into a :class:`WaitTracker`; reclaims nothing."""

    reclaim: ClassVar[Reclaim | None] = Reclaim.NONE

    def __init__(self) -> None:
        self.tracker = WaitTracker()

    def observe(self, view: ModelView, op: Op) -> None:
        self.tracker.observe(view, op)


class MORI(_Tracking):
    name: ClassVar[str] = "mori"
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS
    window_s: ClassVar[float] = 600.0
    #: the score of KV no active program owns: above every idle share, so it goes first
    ENDED: ClassVar[float] = 2.0

    def __init__(self) -> None:
        super().__init__()
        self.session: dict[ContextId, SessionId] = {}
        self.ended: set[SessionId] = set()

    def observe(self, view: ModelView, op: Op) -> None:
        super().observe(view, op)
        match op:
            case Open():
                self.session[op.ctx] = op.session
            case Fork():
                self.session[op.ctx] = self.session[op.src]
            case EndSession():
                self.ended.add(op.session)

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        now = view.now
        shares: dict[ContextId, float] = {}  # one per context per ordering, not per block

        def share(c: ContextId) -> float:
            s = shares.get(c)
            if s is None:
                s = shares[c] = self.tracker.idle_share(c, now, self.window_s)
            return s

        def idle(b: BlockInfo) -> float:
            holders = b.holders
            if len(holders) == 1:  # (most blocks: no generator for the min of one)
                return share(holders[0])
            if holders:
                return min(share(c) for c in holders)
            # held by no open context: its writer's program's, unless that program has ended
            return self.ENDED if self.session[b.writer] in self.ended else share(b.writer)

        return [
            b.id
            for b in sorted(candidates, key=lambda b: (-idle(b), b.last_access, -b.depth, b.id))
        ]


class TTL(_Tracking):
    name: ClassVar[str] = "ttl"
    claims: ClassVar[frozenset[str]] = STRUCTURAL_CLAIMS | frozenset(
        {
            "prefix-closed-residency",
        }
    )
    quantile: ClassVar[float] = 0.9
    default_ttl_s: ClassVar[float] = 30.0

    def ttl_for(self, agent: AgentKind) -> float:
        """The tool class is the agent kind: traces name no tools (see spec §ttl). Read from
        the kind's waits kept sorted, in O(1): an ordering asks it for every open context."""
        xs = self.tracker.waited.get(agent)
        return linear_quantile(xs, self.quantile) if xs else self.default_ttl_s

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        now = view.now
        expiry: dict[ContextId, float] = {}
        for cid in view.open_contexts():
            start = self.tracker.open_wait_start(cid)
            if start is not None:
                expiry[cid] = start + self.ttl_for(view.context(cid).agent)

        #: per holder set, (protected?, latest expiry): one per context, not per block
        guards: dict[tuple[ContextId, ...], tuple[int, float]] = {}

        def key(b: BlockInfo) -> tuple[int, float, float, int, int]:
            guard = guards.get(b.holders)
            if guard is None:
                protected = [expiry[c] for c in b.holders if c in expiry and expiry[c] > now]
                guard = guards[b.holders] = (1, max(protected)) if protected else (0, 0.0)
            return (*guard, b.last_access, -b.depth, b.id)

        return [b.id for b in sorted(candidates, key=key)]
