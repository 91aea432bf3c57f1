"""Negative controls: correct policies that do legal but unusual things, on which every check
must stay silent (no claimed invariant violated, no finding).

The zoo (:mod:`checkers.search.mutants` and its siblings) shows that the checks catch what is
wrong; these show that they do not flag what is right. Each exercises a corner of the contract
the built-ins leave alone:

* :class:`SlowFirstLRU` places every block in the configured tiers reversed (slowest first);
* :class:`OneTierTether` places every block in the first tier only, so a request can be refused
  mid-allocation while other tiers have room (P7.7). Checking it found two false verdicts on the
  reference engine (2026-12-04): a refusal of the first write judged as the pre-check's, and a
  bypassed Temporary block freed by the roll-back read as never bypassed;
* :class:`LastTierTether` places every block in the last tier only;
* :class:`BypassAllLRU` bypasses every block (nothing is ever indexed, nothing is ever hit);
* :class:`ProtectsRootsLRU` leaves every depth-0 block out of its order (a policy may protect
  blocks, M4.4), so allocation can fail where evictable blocks remain;
* :class:`ReclaimAtCloseLRU` frees the Dead blocks after ``close`` ops only, by code (no
  declared reclaim rule), and yields its eviction order lazily, one victim at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import ClassVar

from kvmodel.ids import BlockId
from kvmodel.io.trace import Close, Op
from kvmodel.policy import Placement
from kvmodel.view import BlockInfo, ModelView, NewBlock
from policies.kvtether import KVTether
from policies.lru import LRU

__all__ = [
    "CONTROLS",
    "BypassAllLRU",
    "LastTierTether",
    "OneTierTether",
    "ProtectsRootsLRU",
    "ReclaimAtCloseLRU",
    "SlowFirstLRU",
]


class SlowFirstLRU(LRU):
    name: ClassVar[str] = "control-slow-first-lru"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(tuple(reversed(pl.tiers)), bypass=pl.bypass)


class OneTierTether(KVTether):
    name: ClassVar[str] = "control-one-tier-tether"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(pl.tiers[:1], bypass=pl.bypass)


class LastTierTether(KVTether):
    name: ClassVar[str] = "control-last-tier-tether"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        pl = super().place(view, block)
        return Placement(pl.tiers[-1:], bypass=pl.bypass)


class BypassAllLRU(LRU):
    name: ClassVar[str] = "control-bypass-all-lru"

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        return Placement(super().place(view, block).tiers, bypass=True)


class ProtectsRootsLRU(LRU):
    name: ClassVar[str] = "control-protects-roots-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        return [b for b in super().eviction_order(view, candidates) if view.block(b).depth > 0]


class ReclaimAtCloseLRU(LRU):
    name: ClassVar[str] = "control-reclaim-at-close-lru"

    def eviction_order(self, view: ModelView, candidates: Sequence[BlockInfo]) -> Iterable[BlockId]:
        yield from super().eviction_order(view, candidates)

    def on_op(self, view: ModelView, op: Op) -> Iterable[BlockId]:
        return view.dead() if isinstance(op, Close) else ()


#: import paths of the controls
CONTROLS: tuple[str, ...] = tuple(
    f"checkers.search.controls:{c.__name__}"
    for c in (
        SlowFirstLRU,
        OneTierTether,
        LastTierTether,
        BypassAllLRU,
        ProtectsRootsLRU,
        ReclaimAtCloseLRU,
    )
)
