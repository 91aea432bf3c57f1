"""Where the oracle's reference takes its victims from (spec/invariants.md §Oracle, "How the
reference finds that set"): a rank index the follower steers, or, for one op, the policy's
order over listed candidates (an adopted op's puppet names its victims).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from kvmodel._engine_view import EngineView
from kvmodel._eviction import PolicyOrder
from kvmodel._rank_index import RankIndex
from kvmodel._resident import ResidentBlock
from kvmodel.engine import Engine
from kvmodel.ids import BlockId, ContextId
from kvmodel.policy import RankTerm
from kvmodel.view import ModelView

__all__ = ["listed", "steer"]

#: the follower's choice among the candidates tied at the index's front (their index in its
#: order; None: the first)
Chooser = Callable[[ModelView, Sequence[ResidentBlock]], int | None]


def steer(engine: Engine, rank: tuple[RankTerm, ...], choose: Chooser) -> None:
    """Where the rank alone orders the victims -- one tier, nothing that moves, a rank the index
    does not group -- ``engine`` (the follower's) takes them from a rank index over ``rank``,
    which asks ``choose`` among the candidates tied at its front: work per inference in
    proportion to what changed and what it evicts, where listing the candidates costs the
    resident blocks at every inference that must evict (the same choices and verdicts:
    tests/test_oracle.py). Elsewhere the follower orders listed candidates itself."""
    if len(engine.config.tiers) != 1 or engine.movement is not None:
        return
    view = engine.view
    if not isinstance(view, EngineView):  # (a view of another engine's: keyed by it, not here)
        return
    index = RankIndex(engine, rank, view.features)
    if index.grouped:
        return
    index.choose = lambda tied: choose(view, tied)
    engine.victims = index
    engine.residency.marks = index


class _Both:
    """Marks told to a steered rank index and to a listing source at once (:func:`listed`)."""

    def __init__(self, index: RankIndex, order: PolicyOrder) -> None:
        self.index, self.order = index, order

    def mark_block(self, bid: BlockId) -> None:
        self.index.mark_block(bid)
        self.order.mark_block(bid)

    def mark_ctx(self, cid: ContextId) -> None:
        self.index.mark_ctx(cid)
        self.order.mark_ctx(cid)

    def forget(self, bid: BlockId) -> None:
        self.index.forget(bid)
        self.order.forget(bid)

    def invalidate(self) -> None:
        self.index.invalidate()
        self.order.invalidate()


@contextlib.contextmanager
def listed(engine: Engine) -> Iterator[None]:
    """For an op: a steered engine's victims from the policy's order over listed candidates
    (an adopted op's puppet names them), its rank index still told of every change."""
    index = engine.victims
    if not isinstance(index, RankIndex) or index.choose is None:
        yield
        return
    order = PolicyOrder(engine)
    engine.victims = order
    engine.residency.marks = _Both(index, order)
    try:
        yield
    finally:
        engine.victims = index
        engine.residency.marks = index
