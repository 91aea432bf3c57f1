"""A policy found by `kvmodel discover` (kvmodel issue 17): d-ast-smru-lru-dead-bypass-segments.

Provenance: search seed 0, budget 24 candidates of the space in policies/space.py; training
cells single-agent/s0/n6/0.1+0.3, single-agent/s0/n6/0.2+0.4, single-agent/s1/n6/0.1+0.3,
single-agent/s1/n6/0.2+0.4, multi-agent/s0/n6/0.1+0.3, multi-agent/s0/n6/0.2+0.4,
multi-agent/s1/n6/0.1+0.3, multi-agent/s1/n6/0.2+0.4; held-out test cells
single-agent/s100/n8/0.15+0.25, single-agent/s100/n8/0.25+0.5, single-agent/s101/n8/0.15+0.25,
single-agent/s101/n8/0.25+0.5, multi-agent/s100/n8/0.15+0.25, multi-agent/s100/n8/0.25+0.5,
multi-agent/s101/n8/0.15+0.25, multi-agent/s101/n8/0.25+0.5.

Passed the safety gate: kvmodel check on its claims, kvmodel prove on the fragment. On the test
cells: cost 0.996x KVTether's, HBF writes 0.900x Lachesis's, hit rate 96.5% of Belady's, HBF
writes 1.68x opt-placement's.

Goal (beat both on their metrics, within 10% of the optima): HBF writes 1.68x the optimum's
(needs <= 1.1; opt-placement minimizes HBF writes alone: its own cost is 1.088x KVTether's and
its hit rate 86.4% of Belady's, this policy's 0.996x and 96.5%).
"""

from __future__ import annotations

from typing import ClassVar

from kvmodel.lifecycle import BlockClass
from kvmodel.policy import Placement, RankTerm, Reclaim
from kvmodel.view import ModelView, NewBlock
from policies.lachesis import LachesisDet

__all__ = ["Discovered"]

_C = BlockClass
_BYPASS: frozenset[BlockClass] = frozenset({_C.TEMPORARY})


class Discovered(LachesisDet):
    name: ClassVar[str] = "discovered"
    #: the point of the policy space (policies/space.py) this policy is
    point: ClassVar[str] = "d-ast-smru-lru-dead-bypass-segments"
    rank: ClassVar[tuple[RankTerm, ...]] = (
        RankTerm("state", order=(_C.DEAD, _C.EXPIRED, _C.ACTIVE, _C.SUSPENDED, _C.TEMPORARY)),
        RankTerm("suspend_time", descending=True, only=frozenset({_C.SUSPENDED})),
        RankTerm("last_access"),
        RankTerm("depth", descending=True),
    )
    reclaim: ClassVar[Reclaim | None] = Reclaim.DEAD
    bypasses: ClassVar[frozenset[BlockClass] | None] = _BYPASS
    compares_times_only: ClassVar[bool] = True
    claims: ClassVar[frozenset[str]] = frozenset(
        {
            "accounting",
            "chains",
            "deterministic-placement",
            "free-at-boundary",
            "legal-transitions",
            "no-eviction-in-flight",
            "no-live-eviction-before-dead-reclaim",
            "no-stale-hit",
            "no-zombie-kv",
            "pinned-never-evicted",
            "prefix-closed-residency",
            "reclaim-dead-only",
            "suspended-mru",
            "temporary-bypass",
        }
    )

    def place(self, view: ModelView, block: NewBlock) -> Placement:
        tiers = super().place(view, block).tiers
        return Placement(tiers, bypass=block.state in _BYPASS)
